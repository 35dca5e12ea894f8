//! A MariaDB server of the test's own (`mariadbd` on a data directory made by
//! `mariadb-install-db`, on a port of its own, root without a password, a database `test`),
//! to kill, start again on the same port, and freeze (SIGSTOP) without touching the server
//! other tests share. Its files are removed when it is dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis::free_port;

/// A MariaDB server of the test's own; killed, and its files removed, when dropped.
pub struct MariaDbServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

/// Whether `mariadbd` and `mariadb-install-db` can be run here; a notice when not, and a
/// panic when not and `POOLER_REQUIRE_SERVICES=1`.
#[must_use]
pub fn available() -> bool {
    crate::tls::tool("mariadbd") && crate::tls::tool("mariadb-install-db")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

impl MariaDbServer {
    /// A fresh server on a free port, listening, with a database `test`; `None` (the test
    /// skips, with a notice) without MariaDB's server programs.
    ///
    /// # Panics
    ///
    /// When the programs are missing and `POOLER_REQUIRE_SERVICES=1`, or when the server
    /// does not come up within 10 s.
    #[must_use]
    pub fn start() -> Option<MariaDbServer> {
        if !available() {
            return None;
        }
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("pooler-mariadb-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the server's directory");
        let mut install = Command::new("mariadb-install-db");
        install
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if is_root() {
            // mariadbd will not run as root: the files belong to the `mysql` user.
            let _ = Command::new("chown").arg("mysql").arg(&dir).status();
            install.arg("--user=mysql");
        }
        let installed = install
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("mariadb-install-db runs");
        assert!(installed.success(), "mariadb-install-db failed");
        let mut server = MariaDbServer {
            child: None,
            port,
            dir,
        };
        server.run();
        server.sql("CREATE DATABASE test");
        Some(server)
    }

    /// [`start`](Self::start), with the table the writers of
    /// [`restarted_under_writers`](crate::scenarios::restarted_under_writers) write to:
    /// `test.r (v BIGINT PRIMARY KEY)`, InnoDB (what it acknowledges survives a kill).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    #[must_use]
    pub fn with_writes_table() -> Option<MariaDbServer> {
        let server = MariaDbServer::start()?;
        server.sql("CREATE TABLE test.r (v BIGINT PRIMARY KEY) ENGINE = InnoDB");
        Some(server)
    }

    /// Starts `mariadbd` on the data directory and port, and waits until it answers.
    fn run(&mut self) {
        let mut command = Command::new("mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            // What an acknowledged commit must survive here is the process killed, not the
            // machine: the log written at each commit is enough, and quicker.
            .arg("--innodb-flush-log-at-trx-commit=2");
        if is_root() {
            command.arg("--user=mysql");
        }
        let log = std::fs::File::create(self.dir.join("server.log")).expect("the server's log");
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("mariadbd starts");
        self.child = Some(child);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        for _ in 0..200 {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
                && self.answers()
            {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("mariadbd on {} exited at its start: {status}", self.port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("mariadbd never answered on {}", self.port);
    }

    /// The `mariadb` client running `sql` on it as root.
    fn client(&self, sql: &str) -> Command {
        let port = self.port.to_string();
        let mut client = Command::new("mariadb");
        client.args(["-h", "127.0.0.1", "-P", &port, "-u", "root", "-e", sql]);
        client
    }

    /// Whether the server answers a query.
    fn answers(&self) -> bool {
        self.client("SELECT 1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `sql` with the `mariadb` client as root.
    ///
    /// # Panics
    ///
    /// When it fails.
    pub fn sql(&self, sql: &str) {
        let ran = self.client(sql).status().expect("mariadb runs");
        assert!(ran.success(), "{sql}");
    }

    /// Its port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for its database `test` as root, over TCP (mysql_async's `prefer_socket` off:
    /// the server's own socket would bypass whatever the test puts on the link).
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/test?prefer_socket=false",
            self.port
        )
    }

    /// Kills it (SIGKILL: no goodbye to its clients), and waits for it to end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data, once killed, and waits until it answers.
    ///
    /// # Panics
    ///
    /// When it is still running, or does not come up within 10 s.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "kill it first");
        self.run();
    }

    /// Sends it a signal: `"-STOP"` freezes it, `"-CONT"` thaws it.
    ///
    /// # Panics
    ///
    /// When it is not running, `kill` fails, or a stop does not take effect within 2 s
    /// ([`crate::signal`]).
    pub fn signal(&self, which: &str) {
        let child = self.child.as_ref().expect("a running server");
        crate::signal(child.id(), which);
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A frozen server ends only once thawed.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
