//! `redis-server`s of the test's own: a plain server, a replica of one, a Sentinel watching
//! one, a cluster — each on a port of its own, with nothing saved to disk, stopped when
//! dropped — to freeze (SIGSTOP), kill and restart without touching the server other tests
//! share.

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
            // A replica's first sync starts at once, not after the default 5 s wait for
            // more replicas.
            .args(["--repl-diskless-sync-delay", "0"])
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
        RedisServer::sentinel_with(service, master, down_after, &[])
    }

    /// [`sentinel`](RedisServer::sentinel) with `lines` added to its configuration
    /// (`requirepass secret`).
    #[must_use]
    pub fn sentinel_with(
        service: &str,
        master: u16,
        down_after: Duration,
        lines: &[&str],
    ) -> RedisServer {
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
                 sentinel parallel-syncs {service} 1\n{}\n",
                dir.display(),
                lines.join("\n")
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
    /// When `kill` fails, or a stop does not take effect within 2 s ([`crate::signal`]).
    pub fn signal(&self, which: &str) {
        crate::signal(self.child.id(), which);
    }

    /// Kills it and waits for it to end.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of `redis-server`s of the test's own, made by `redis-cli --cluster
/// create`: masters, each with its replicas, nodes calling a peer failed after
/// `node_timeout`.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// A cluster of `masters` masters with `replicas` replicas each, once every node says the
    /// cluster is `ok` and knows every other, and every replica is in sync; `None` (the test skips) without `redis-cli`.
    ///
    /// # Panics
    ///
    /// When `redis-cli` is missing and `POOLER_REQUIRE_SERVICES=1`, or when the cluster does
    /// not come up within 30 s.
    #[must_use]
    pub fn start(masters: usize, replicas: usize, node_timeout: Duration) -> Option<RedisCluster> {
        if !available() || !crate::tls::tool("redis-cli") {
            return None;
        }
        let timeout = node_timeout.as_millis().to_string();
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                // The cluster bus port is chosen too: by default it is the port + 10 000,
                // which may be taken or past the end.
                let bus = free_port().to_string();
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    &timeout,
                    "--cluster-require-full-coverage",
                    "no",
                ])
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let created = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes, masters };
        let began = std::time::Instant::now();
        while !cluster.settled() {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the cluster did not settle within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(cluster)
    }

    /// Every node live says `cluster_state:ok`, knows every other node and sees every
    /// replica as a replica (a replica is a master without slots in the views that have not
    /// heard of its `CLUSTER REPLICATE` yet), and every replica's link to its master is up.
    fn settled(&self) -> bool {
        let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.alive()).collect();
        live.iter().all(|node| {
            let info = node.cli(&["CLUSTER", "INFO"]);
            let known = info
                .lines()
                .find_map(|l| l.strip_prefix("cluster_known_nodes:"))
                .and_then(|n| n.trim().parse::<usize>().ok());
            let masters = node
                .cli(&["CLUSTER", "NODES"])
                .lines()
                .filter(|line| {
                    line.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.contains("master"))
                })
                .count();
            let replication = node.cli(&["INFO", "replication"]);
            let synced = !replication.contains("role:slave")
                || replication.contains("master_link_status:up");
            info.contains("cluster_state:ok")
                && known == Some(self.nodes.len())
                && masters == self.masters
                && synced
        })
    }

    /// The nodes, in the order they were started (the first `masters` started as masters).
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node at `i`, to kill or freeze.
    #[must_use]
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The URLs of every node.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

impl RedisServer {
    /// Whether its process is still running.
    fn alive(&self) -> bool {
        Command::new("kill")
            .args(["-0", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// What `redis-cli` prints for `args` sent to it (empty when it cannot connect).
    #[must_use]
    pub fn cli(&self, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
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
