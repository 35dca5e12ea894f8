//! A watch on the PostgreSQL protocol between a client and its server, for what a
//! transaction pooler (PgBouncer in transaction mode) cannot serve: a message sent while a
//! sync point (`Sync` or a simple `Query`) is unanswered, when its answer then says "no
//! transaction". At that sync point's `ReadyForQuery` the pooler may give its server
//! connection to another client, and the answers to what was sent behind it go to that
//! client — which reads them as "unexpected message from server" — or the statement runs on
//! a server the sender never sees again.
//!
//! State (per connection): `sent` — the messages the client sent that no `ReadyForQuery` has
//! answered yet. At each `ReadyForQuery` the sync point it answers leaves `sent`; if it
//! reports "no transaction" and anything is left, that was sent behind it. `sent` is updated
//! from the server's messages *before* they are passed on, so a message the client sent
//! after reading an answer is never counted against it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy in front of a PostgreSQL server that records each time a client had sent
/// messages behind a sync point answered outside a transaction (see the module's docs). A
/// connection that asks for TLS is passed on unread.
pub struct PipelineWatch {
    addr: SocketAddr,
    pipelined: Arc<Mutex<Vec<String>>>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
    listener: JoinHandle<()>,
}

/// One connection's state, shared by its two directions.
#[derive(Debug)]
struct Link {
    /// The messages sent since the last answered sync point, in order: each one's type (a
    /// simple query's with its text).
    sent: Vec<String>,
    /// TLS was asked for: nothing more is read.
    opaque: bool,
}

/// The code of a startup packet that asks for TLS.
const SSL_REQUEST: u32 = 80_877_103;

impl PipelineWatch {
    /// A watch on a free local port in front of `upstream` (`host:port`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, it leaves no listener behind.
    pub async fn start(upstream: &str) -> PipelineWatch {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let addr = listener.local_addr().expect("bound");
        let pipelined: Arc<Mutex<Vec<String>>> = Arc::default();
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let upstream = upstream.to_owned();
        let (seen, all) = (pipelined.clone(), links.clone());
        let listener = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, seen) = (upstream.clone(), seen.clone());
                let link = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let state = Arc::new(Mutex::new(Link {
                        sent: Vec::new(),
                        opaque: false,
                    }));
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, true, state.clone(), seen.clone()),
                        pump(server_read, client_write, false, state, seen),
                    );
                });
                all.lock().expect("links").push(link);
            }
        });
        PipelineWatch {
            addr,
            pipelined,
            links,
            listener,
        }
    }

    /// Where clients connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Each time so far messages were sent behind a sync point answered outside a
    /// transaction: those messages' types, and the sync point's (a simple query's with its
    /// text).
    #[must_use]
    pub fn pipelined(&self) -> Vec<String> {
        self.pipelined.lock().expect("pipelined").clone()
    }
}

impl Drop for PipelineWatch {
    fn drop(&mut self) {
        self.listener.abort();
        for link in self.links.lock().expect("links").drain(..) {
            link.abort();
        }
    }
}

/// Copies `from` to `to`, reading each whole message: the client's (`frontend`), which join
/// the link's unanswered ones, or the server's, whose `ReadyForQuery` answers them.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frontend: bool,
    state: Arc<Mutex<Link>>,
    seen: Arc<Mutex<Vec<String>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = vec![0_u8; 16 * 1024];
    // The client's first packet has no type byte.
    let mut startup = frontend;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        while !state.lock().expect("link").opaque {
            let rest = &buf[used..];
            let (kind, header) = if startup {
                (None, 4)
            } else {
                (rest.first().copied(), 5)
            };
            let Some(len) = rest
                .get(header - 4..header)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            else {
                break;
            };
            // A length counts itself (4 bytes): one shorter is not the protocol, and is
            // stepped over rather than read for ever.
            let whole = header - 4 + len.max(4);
            if rest.len() < whole {
                break;
            }
            let mut link = state.lock().expect("link");
            match kind {
                None => {
                    startup = false;
                    let code = rest
                        .get(4..8)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    link.opaque = code == Some(SSL_REQUEST);
                }
                Some(b'X') => {}
                Some(kind) if frontend => link.sent.push(if kind == b'Q' {
                    let text = rest.get(5..whole - 1).unwrap_or_default();
                    format!("Q {:?}", String::from_utf8_lossy(text))
                } else {
                    (kind as char).to_string()
                }),
                Some(b'Z') => {
                    let answered = link
                        .sent
                        .iter()
                        .position(|m| m == "S" || m.starts_with('Q'))
                        .map_or(link.sent.len(), |at| at + 1);
                    let answered: Vec<String> = link.sent.drain(..answered).collect();
                    if rest.get(5) == Some(&b'I') && !link.sent.is_empty() {
                        seen.lock().expect("pipelined").push(format!(
                            "[{}] sent behind [{}], answered outside a transaction",
                            link.sent.join(", "),
                            answered.join(", ")
                        ));
                    }
                }
                Some(_) => {}
            }
            used += whole;
        }
        let forward = if state.lock().expect("link").opaque {
            buf.len()
        } else {
            used
        };
        if to.write_all(&buf[..forward]).await.is_err() {
            break;
        }
        buf.drain(..forward);
    }
    let _ = to.shutdown().await;
}
