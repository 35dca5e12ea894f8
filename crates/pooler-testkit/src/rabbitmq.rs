//! A RabbitMQ broker of the test's own (a node of its own name, on ports of its own, with
//! its data in a directory of its own), to kill and start again on the same port without
//! touching the broker other tests share. Its files are removed when it is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::free_port;

/// The broker's start script as Debian installs it (the one in `/usr/sbin` switches to the
/// `rabbitmq` user, whose home the test's files are not in).
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ broker of the test's own; killed, and its files removed, when dropped.
pub struct RabbitMqServer {
    /// The start script, which runs the Erlang VM as its child.
    child: Option<Child>,
    port: u16,
    dist_port: u16,
    dir: PathBuf,
}

/// Whether a broker can be started here; a notice when not, and a panic when not and
/// `POOLER_REQUIRE_SERVICES=1`.
#[must_use]
pub fn available() -> bool {
    std::path::Path::new(SERVER).exists() || crate::cannot_run(SERVER)
}

impl RabbitMqServer {
    /// A fresh broker on a free port (guest/guest, the default virtual host), listening;
    /// `None` (the test skips, with a notice) without RabbitMQ's server.
    ///
    /// # Panics
    ///
    /// When the server is missing and `POOLER_REQUIRE_SERVICES=1`, or when the broker does
    /// not come up within 60 s.
    #[must_use]
    pub fn start() -> Option<RabbitMqServer> {
        if !available() {
            return None;
        }
        let (port, dist_port) = (free_port(), free_port());
        let dir =
            std::env::temp_dir().join(format!("pooler-rabbitmq-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the broker's directory");
        // Its own listener (the machine's configuration names the shared broker's) and
        // guest allowed from the loopback only, as by default.
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .expect("the broker's configuration");
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("the broker's plugins");
        let mut server = RabbitMqServer {
            child: None,
            port,
            dist_port,
            dir,
        };
        server.run();
        Some(server)
    }

    /// Starts the broker on its directory and port, and waits until it listens.
    fn run(&mut self) {
        let log = std::fs::File::create(self.dir.join("server.log")).expect("the broker's log");
        let child = Command::new(SERVER)
            .env("RABBITMQ_CONFIG_FILE", self.dir.join("rabbitmq.conf"))
            .env("RABBITMQ_NODENAME", self.node())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", self.dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.dir.join("log"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.dir.join("enabled_plugins"),
            )
            .env("RABBITMQ_PID_FILE", self.dir.join("pid"))
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("rabbitmq-server starts");
        self.child = Some(child);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(60) {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!(
                    "rabbitmq-server on {} exited at its start: {status}",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("rabbitmq-server never listened on {}", self.port);
    }

    /// Its Erlang node's name.
    fn node(&self) -> String {
        format!("pooler-{}-{}@localhost", std::process::id(), self.port)
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// An AMQP URI for it, as guest.
    #[must_use]
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Kills it (SIGKILL to the Erlang VM: no goodbye to its clients), and waits for it to
    /// end.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // The VM is the script's child (its pid also in the pid file once it has booted).
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &child.id().to_string()])
            .status();
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pid")) {
            let _ = Command::new("kill").args(["-KILL", pid.trim()]).status();
        }
        let _ = std::fs::remove_file(self.dir.join("pid"));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts it again on the same port and data, once killed, and waits until it listens.
    ///
    /// # Panics
    ///
    /// When it is still running, or does not come up within 60 s.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "kill it first");
        self.run();
    }
}

impl Drop for RabbitMqServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
