//! TLS through rustls, live: the test makes a CA and a server certificate with `openssl`,
//! starts a `redis-server` of its own listening for TLS only, and pools `rediss://`
//! connections that trust that CA. Without `redis-server` or `openssl` on the PATH the test
//! skips with a notice, or fails under `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "rustls")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pooler::{Pool, PoolConfig, Shutdown};
use pooler_redis::RedisManager;
use pooler_redis::redis;
use pooler_redis::rustls::crypto::ring;
use pooler_redis::rustls::pki_types::CertificateDer;
use pooler_redis::rustls::pki_types::pem::PemObject as _;
use pooler_redis::rustls::{ClientConfig, RootCertStore};

/// A `redis-server` of the test's own, stopped when dropped.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA and a certificate for `localhost` and 127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &Path) {
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    run(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=pooler test CA",
        ],
    );
    run(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    run(
        dir,
        &[
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
        ],
    );
}

/// Starts a TLS-only server on a free port; `None` (skip) when the tools are missing.
async fn server() -> Option<(Server, u16)> {
    let found = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            || Command::new(tool)
                .arg("version")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
    };
    if !found("redis-server") || !found("openssl") {
        assert!(
            std::env::var("POOLER_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "redis-server and openssl are needed and POOLER_REQUIRE_SERVICES=1"
        );
        eprintln!("skipping: redis-server or openssl is not on the PATH");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("pooler-redis-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args([
            "--tls-cert-file",
            "server.crt",
            "--tls-key-file",
            "server.key",
        ])
        .args(["--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = Server { child, dir };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Some((server, port));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the TLS redis-server never listened on {port}");
}

fn trusting(dir: &Path) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap())
        .unwrap();
    ClientConfig::builder_with_provider(ring::default_provider().into())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

#[tokio::test]
async fn rediss_connections_are_pooled_and_verified() {
    let Some((server, port)) = server().await else {
        return;
    };
    let url = format!("rediss://localhost:{port}/1");
    let manager = RedisManager::with_rustls(&url, trusting(&server.dir)).unwrap();
    let pool = Pool::start(PoolConfig::new("tls", 2, 2), manager)
        .await
        .unwrap();
    let mut conn = pool.take().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("over-tls")
        .arg(42)
        .query_async(&mut *conn)
        .await
        .unwrap();
    let got: i64 = redis::cmd("GET")
        .arg("over-tls")
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(got, 42);
    drop(conn);
    pool.close(Shutdown::Graceful).await;

    // A CA the server's certificate is not signed by: no connection is made.
    let stranger =
        std::env::temp_dir().join(format!("pooler-redis-tls-other-{}", std::process::id()));
    std::fs::create_dir_all(&stranger).unwrap();
    certificates(&stranger);
    let manager = RedisManager::with_rustls(&url, trusting(&stranger)).unwrap();
    let pool = Pool::start(PoolConfig::new("tls-untrusted", 1, 1), manager)
        .await
        .unwrap();
    assert!(
        pool.try_take_member().is_err(),
        "an unverified server is never pooled"
    );
    pool.close(Shutdown::Immediate).await;
    let _ = std::fs::remove_dir_all(&stranger);

    // Plain `redis://` and `#insecure` addresses are refused by with_rustls; `rediss://` by new.
    assert!(RedisManager::with_rustls("redis://localhost", trusting(&server.dir)).is_err());
    assert!(
        RedisManager::with_rustls("rediss://localhost/#insecure", trusting(&server.dir)).is_err()
    );
    assert!(RedisManager::new(url.as_str()).is_err());
}
