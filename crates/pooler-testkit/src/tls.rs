//! What a live TLS test needs: a throwaway certificate authority and a server certificate
//! for `localhost` and 127.0.0.1, made with `openssl`, and a check that the server program
//! the test starts is there.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A directory of the test's own, removed when dropped, holding `ca.crt`, `server.crt` and
/// `server.key` (PEM).
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    /// A new CA and a server certificate it signed, in a fresh directory named after `name`
    /// and the process.
    ///
    /// # Panics
    ///
    /// When `openssl` fails.
    #[must_use]
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("pooler-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .expect("the extension file");
        let openssl = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("openssl runs");
            assert!(status.success(), "openssl {args:?}");
        };
        let key = ["-newkey", "rsa:2048", "-nodes"];
        openssl(
            &[
                &["req", "-x509"],
                &key[..],
                &["-keyout", "ca.key", "-out", "ca.crt", "-days", "1"],
                &["-subj", "/CN=pooler test CA"],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"],
                &key[..],
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=localhost",
                ],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ]);
        // A server started as another user (RabbitMQ's scripts) reads them too.
        for file in ["ca.crt", "server.crt", "server.key"] {
            let _ = Command::new("chmod")
                .arg("a+r")
                .arg(dir.join(file))
                .status();
        }
        Certificates { dir }
    }

    /// The directory holding the files.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA's certificate, PEM.
    ///
    /// # Panics
    ///
    /// When the file cannot be read.
    #[must_use]
    pub fn ca_pem(&self) -> String {
        std::fs::read_to_string(self.dir.join("ca.crt")).expect("ca.crt")
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `program` runs (with `--version` or `version`). When it does not, the test is
/// skipped with a notice — or fails under `POOLER_REQUIRE_SERVICES=1`.
///
/// # Panics
///
/// When `program` is missing and `POOLER_REQUIRE_SERVICES=1`.
#[must_use]
pub fn tool(program: &str) -> bool {
    let runs = |arg: &str| {
        Command::new(program)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("--version") || runs("version") {
        return true;
    }
    crate::cannot_run(&format!("{program} (on the PATH)"))
}
