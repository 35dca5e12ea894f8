//! `redis-server`s of the test's own: a plain server, a replica of one, a Sentinel watching
//! one — each on a port of its own, with nothing saved to disk, stopped when dropped — to
//! freeze (SIGSTOP), kill and restart without touching the server other tests share.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `redis-server` (or Sentinel); killed, and its files removed, when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: Option<PathBuf>,
}

/// A free port on the loopback (free when asked: a server started on it soon after gets it).
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Whether `redis-server` can be run here; a notice when not, and a panic when not and
/// `POOLER_REQUIRE_SERVICES=1`.
#[must_use]
pub fn available() -> bool {
    crate::tls::tool("redis-server")
}

impl RedisServer {
    /// A server on `port` with `args` added to its command line, once it listens.
    ///
    /// # Panics
    ///
    /// When it does not start or listen within 5 s.
    #[must_use]
    pub fn on(port: u16, args: &[&str]) -> RedisServer {
        // Its own directory: a replica writes the snapshot it syncs from there.
        let dir = std::env::temp_dir().join(format!("pooler-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the server's directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        RedisServer {
            child,
            port,
            dir: Some(dir),
        }
        .listening()
    }

    /// A server on a free port.
    #[must_use]
    pub fn start(args: &[&str]) -> RedisServer {
        RedisServer::on(free_port(), args)
    }

    /// A replica of the server on `master`, on a free port.
    #[must_use]
    pub fn replica_of(master: u16) -> RedisServer {
        RedisServer::start(&["--replicaof", "127.0.0.1", &master.to_string()])
    }

    /// A Sentinel on a free port watching the server on `master` as `service`, alone (a
    /// quorum of one): it calls the master down after `down_after` without an answer and
    /// then fails over to a replica.
    #[must_use]
    pub fn sentinel(service: &str, master: u16, down_after: Duration) -> RedisServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("pooler-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the Sentinel's directory");
        let conf = dir.join("sentinel.conf");
        let down = down_after.as_millis();
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {service} 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds {service} {down}\n\
                 sentinel failover-timeout {service} 10000\n\
                 sentinel parallel-syncs {service} 1\n",
                dir.display()
            ),
        )
        .expect("the Sentinel's configuration");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel starts");
        RedisServer {
            child,
            port,
            dir: Some(dir),
        }
        .listening()
    }

    fn listening(mut self) -> RedisServer {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        for _ in 0..100 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return self;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "redis-server on {} exited at its start: {status}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server never listened on {}", self.port);
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL (`redis://127.0.0.1:port`).
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends it a signal: `"-STOP"` freezes it, `"-CONT"` thaws it, `"-KILL"` ends it.
    ///
    /// # Panics
    ///
    /// When `kill` fails.
    pub fn signal(&self, which: &str) {
        let sent = Command::new("kill")
            .args([which, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {which}");
    }

    /// Kills it and waits for it to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
