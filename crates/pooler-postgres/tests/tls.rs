//! TLS through rustls, live: the local server has SSL on (`SHOW ssl`); its certificate is read
//! through SQL and pinned. Unreachable, the test skips with a notice, or fails under
//! `POOLER_REQUIRE_SERVICES=1`; a server with SSL off fails it under that variable too.
#![cfg(feature = "rustls")]
#![allow(clippy::disallowed_methods)] // the admin connection is spawned by the test

mod common;

use std::sync::Arc;
use std::time::Duration;

use pooler::{Member, PoolConfig, Shutdown};
use pooler_postgres::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use pooler_postgres::rustls::crypto::{CryptoProvider, ring};
use pooler_postgres::rustls::pki_types::pem::PemObject as _;
use pooler_postgres::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use pooler_postgres::rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use pooler_postgres::{PgManager, TxStatus};
use pooler_testkit::{Server, started};

/// The connection's transaction status once its driver has written everything and every
/// answer is read (bounded: a test that finds it never settles fails).
async fn settled(conn: &pooler_postgres::PgConnection) -> TxStatus {
    tokio::time::timeout(Duration::from_secs(5), conn.settled())
        .await
        .expect("the connection settles")
}

/// Accepts exactly one certificate (the local server's self-signed one) and checks the
/// handshake's signatures with the provider's algorithms.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, pooler_postgres::rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(pooler_postgres::rustls::Error::General(
                "not the pinned certificate".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, pooler_postgres::rustls::Error> {
        pooler_postgres::rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, pooler_postgres::rustls::Error> {
        pooler_postgres::rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

async fn simple_value(client: &tokio_postgres::Client, sql: &str) -> String {
    client
        .simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_rustls_keep_the_zero_round_trip_transaction_check() {
    let Some(url) = Server::Postgres.url().await else {
        return;
    };
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    if simple_value(&admin, "SHOW ssl").await != "on" {
        assert!(
            std::env::var("POOLER_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "the server has SSL off and POOLER_REQUIRE_SERVICES=1"
        );
        eprintln!("skipping: the server has SSL off");
        return;
    }
    let pem = simple_value(
        &admin,
        "SELECT pg_read_file(current_setting('ssl_cert_file'))",
    )
    .await;
    let cert = CertificateDer::from_pem_slice(pem.as_bytes()).expect("the server's certificate");
    let provider = Arc::new(ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { cert, provider }))
        .with_no_client_auth();

    let mut pg: tokio_postgres::Config = url.parse().unwrap();
    pg.ssl_mode(tokio_postgres::config::SslMode::Require)
        .application_name("pooler-tls");
    let manager = PgManager::from_config(pg).with_rustls(config.clone());
    let pool = started(PoolConfig::new("pg-tls", 2, 2), manager).await;

    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let id = Member::id(&conn);
    assert_eq!(
        simple_value(
            &conn,
            "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
        .await,
        "true",
        "the session is encrypted"
    );
    assert_eq!(settled(&conn).await, TxStatus::Idle, "read above TLS");
    conn.batch_execute("BEGIN").await.unwrap();
    assert_eq!(settled(&conn).await, TxStatus::InTransaction);
    drop(conn);
    // Take both members: one of them is the one left in a transaction.
    let both = [
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
        pool.take_member(Duration::from_secs(5)).await.unwrap(),
    ];
    let mut seen = false;
    for conn in &both {
        if Member::id(conn) == id {
            seen = true;
            assert_eq!(
                simple_value(conn, "SELECT now() = statement_timestamp()").await,
                "t",
                "rolled back before the next user"
            );
        }
    }
    drop(both);

    // A long query cancelled from another task through the token, over TLS as the
    // connection itself (`sslmode=require`).
    let conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
    let pid = common::backend_pid(&conn).await;
    let token = conn.cancel_token();
    let tls = pooler_postgres::tokio_postgres_rustls::MakeRustlsConnect::new(config);
    let cancel = async move { token.cancel_query(tls).await };
    common::sleep_is_cancelled(&conn, admin, pid, cancel).await;
    assert_eq!(settled(&conn).await, TxStatus::Idle);
    drop(conn);
    assert!(seen, "the connection came back");
    pool.close(Shutdown::Graceful).await;
}
