//! A PgBouncer of the test's own in front of a PostgreSQL server: Debian's `pgbouncer`
//! (`.ci/run` installs it when missing), started on a free port of the loopback with a
//! configuration written for the test, and stopped when dropped.
//!
//! PgBouncer refuses to run as root, so under root it runs as the `postgres` user (`-u`).
//! It reaches the server as the client's user with trust authentication, and accepts any of
//! `root` and `postgres` without a password.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How PgBouncer lends its server connections (its `pool_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A client keeps one server connection for as long as it is connected.
    Session,
    /// A client holds a server connection for one transaction (a statement outside one);
    /// the next may run on another.
    Transaction,
}

/// A running PgBouncer; killed, and its files removed, when dropped.
pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` in front of the server at `upstream` (host:port on this
    /// machine), with database `test` and `settings` (`key = value` lines) added to its
    /// `[pgbouncer]` section; `None` (the test skips, with a notice) when `pgbouncer` is not
    /// installed.
    ///
    /// # Panics
    ///
    /// When PgBouncer is missing and `POOLER_REQUIRE_SERVICES=1`, or when it does not come up.
    #[must_use]
    pub fn start(upstream: SocketAddr, mode: Mode, settings: &[&str]) -> Option<PgBouncer> {
        let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(binary) = binary else {
            assert!(
                std::env::var("POOLER_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "pgbouncer is not installed and POOLER_REQUIRE_SERVICES=1"
            );
            eprintln!("skipping: pgbouncer is not installed");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("pooler-pgbouncer-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("PgBouncer's directory");
        let mode = match mode {
            Mode::Session => "session",
            Mode::Transaction => "transaction",
        };
        let mut ini = format!(
            "[databases]\ntest = host={} port={} dbname=test\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {}\npool_mode = {mode}\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             default_pool_size = 20\nmax_client_conn = 500\nlogfile =\npidfile =\n",
            upstream.ip(),
            upstream.port(),
            dir.join("users.txt").display(),
        );
        for line in settings {
            ini.push_str(line);
            ini.push('\n');
        }
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("PgBouncer's configuration");
        std::fs::write(dir.join("users.txt"), "\"root\" \"\"\n\"postgres\" \"\"\n")
            .expect("PgBouncer's users");
        let mut command = Command::new(binary);
        if is_root() {
            command.args(["-u", "postgres"]);
        }
        let child = command
            .arg(dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer starts");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut bouncer = PgBouncer { child, dir, addr };
        for _ in 0..250 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Some(bouncer);
            }
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                panic!("pgbouncer exited at its start: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("pgbouncer did not listen on {addr} within 5 s");
    }

    /// Where PgBouncer listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends PgBouncer a signal: `"-STOP"` freezes it, `"-CONT"` thaws it.
    ///
    /// # Panics
    ///
    /// When `kill` fails, or a stop does not take effect within 2 s ([`crate::signal`]).
    pub fn signal(&self, which: &str) {
        crate::signal(self.child.id(), which);
    }

    /// A URL for database `test` through PgBouncer as `user`.
    #[must_use]
    pub fn url(&self, user: &str) -> String {
        format!("postgres://{user}@{}/test", self.addr)
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
