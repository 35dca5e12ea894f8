//! TLS through rustls, live: the test makes a CA and a server certificate with `openssl`,
//! starts a `redis-server` of its own listening for TLS only, and pools `rediss://`
//! connections that trust that CA. Without `redis-server` or `openssl` on the PATH the test
//! skips with a notice, or fails under `POOLER_REQUIRE_SERVICES=1`.
#![cfg(feature = "rustls")]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pooler::{PoolConfig, Shutdown};
use pooler_redis::RedisManager;
use pooler_redis::redis;
use pooler_redis::rustls::crypto::ring;
use pooler_redis::rustls::pki_types::CertificateDer;
use pooler_redis::rustls::pki_types::pem::PemObject as _;
use pooler_redis::rustls::{ClientConfig, RootCertStore};
use pooler_testkit::started;
use pooler_testkit::tls::{Certificates, tool};

/// A `redis-server` of the test's own, stopped when dropped (before its certificates go).
struct Server {
    child: Child,
    certificates: Certificates,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a TLS-only server on a free port; `None` (skip) when the tools are missing.
async fn server() -> Option<(Server, u16)> {
    if !tool("redis-server") || !tool("openssl") {
        return None;
    }
    let certificates = Certificates::new("redis-tls");
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
        .current_dir(certificates.dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    let server = Server {
        child,
        certificates,
    };
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

fn trusting(certificates: &Certificates) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(certificates.dir().join("ca.crt")).unwrap())
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
    let manager = RedisManager::with_rustls(&url, trusting(&server.certificates)).unwrap();
    let pool = started(PoolConfig::new("tls", 2, 2), manager).await;
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
    let stranger = Certificates::new("redis-tls-other");
    let manager = RedisManager::with_rustls(&url, trusting(&stranger)).unwrap();
    let pool = started(PoolConfig::new("tls-untrusted", 1, 1), manager).await;
    assert!(
        pool.try_take_member().is_err(),
        "an unverified server is never pooled"
    );
    pool.close(Shutdown::Immediate).await;

    // Plain `redis://` and `#insecure` addresses are refused by with_rustls; `rediss://` by new.
    assert!(
        RedisManager::with_rustls("redis://localhost", trusting(&server.certificates)).is_err()
    );
    assert!(
        RedisManager::with_rustls(
            "rediss://localhost/#insecure",
            trusting(&server.certificates)
        )
        .is_err()
    );
    assert!(RedisManager::new(url.as_str()).is_err());
}
