//! TLS, live: the test makes a CA and a server certificate with `openssl`, starts a RabbitMQ
//! node of its own that listens for TLS only (a node name, ports and data directory of its
//! own beside the machine's broker), and pools channels over an `amqps://` connection that
//! trusts that CA. Without RabbitMQ's server script or `openssl` the test skips with a
//! notice, or fails under `POOLER_REQUIRE_SERVICES=1`. `POOLER_RABBITMQ_SERVER` names the
//! script (default: the Debian package's, which runs the broker as the user it is started
//! by).
#![cfg(feature = "rustls")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lapin::BasicProperties;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::FieldTable;
use pooler::{PoolConfig, Shutdown};
use pooler_lapin::AmqpManager;
use pooler_testkit::started;
use pooler_testkit::tls::{Certificates, tool};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// A RabbitMQ node of the test's own, killed when dropped (before its files go).
struct Node {
    child: Child,
    certificates: Certificates,
    port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a TLS-only node; `None` (skip) when the tools are missing.
async fn node() -> Option<Node> {
    let script = std::env::var("POOLER_RABBITMQ_SERVER").unwrap_or_else(|_| SERVER.to_owned());
    if !PathBuf::from(&script).exists() {
        assert!(
            std::env::var("POOLER_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "{script} is needed and POOLER_REQUIRE_SERVICES=1"
        );
        eprintln!("skipping: no RabbitMQ server script at {script}");
        return None;
    }
    if !tool("openssl") {
        return None;
    }
    let certificates = Certificates::new("amqp-tls");
    let dir = certificates.dir().to_owned();
    let port = free_port();
    std::fs::write(
        dir.join("rabbitmq.conf"),
        format!(
            "listeners.tcp = none\n\
             listeners.ssl.default = {port}\n\
             ssl_options.cacertfile = {ca}\n\
             ssl_options.certfile = {cert}\n\
             ssl_options.keyfile = {key}\n\
             ssl_options.verify = verify_none\n\
             ssl_options.fail_if_no_peer_cert = false\n",
            ca = dir.join("ca.crt").display(),
            cert = dir.join("server.crt").display(),
            key = dir.join("server.key").display(),
        ),
    )
    .unwrap();
    let child = Command::new(&script)
        .env("HOME", &dir)
        .env(
            "RABBITMQ_NODENAME",
            format!("pooler-tls-{}@localhost", std::process::id()),
        )
        .env("RABBITMQ_DIST_PORT", free_port().to_string())
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_PID_FILE", dir.join("pid"))
        // The script then runs the Erlang VM in its own process, so killing it stops the node.
        .env("RUNNING_UNDER_SYSTEMD", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the RabbitMQ server script starts");
    let mut node = Node {
        child,
        certificates,
        port,
    };
    for _ in 0..600 {
        if let Ok(Some(status)) = node.child.try_wait() {
            panic!("the TLS RabbitMQ node ended at its start: {status}");
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Some(node);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the TLS RabbitMQ node never listened on {port}");
}

fn trusting(certificates: &Certificates) -> OwnedTLSConfig {
    OwnedTLSConfig {
        identity: None,
        cert_chain: Some(certificates.ca_pem()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqps_channels_are_pooled_and_the_broker_verified() {
    let Some(node) = node().await else {
        return;
    };
    let url = format!("amqps://guest:guest@localhost:{}/%2f", node.port);
    // guest may connect from localhost only, which is where the test is.
    let manager = AmqpManager::new(url.as_str()).tls(trusting(&node.certificates));
    let pool = started(PoolConfig::new("amqps", 2, 2), manager).await;
    let queue = format!("pooler-tls-{}", std::process::id());
    let channel = pool.take_member(Duration::from_secs(10)).await.unwrap();
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            b"over tls",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    drop(channel);
    // The other channel, on the same TLS connection, reads it back.
    let first = pool.take_member(Duration::from_secs(10)).await.unwrap();
    let second = pool.take_member(Duration::from_secs(10)).await.unwrap();
    let got = loop {
        if let Some(got) = second
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            break got;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(got.delivery.data, b"over tls");
    drop((first, second));
    pool.close(Shutdown::Graceful).await;

    // A CA the broker's certificate is not signed by: no channel is opened.
    let stranger = Certificates::new("amqp-tls-other");
    let manager = AmqpManager::new(url.as_str()).tls(trusting(&stranger));
    let pool = started(PoolConfig::new("amqps-untrusted", 1, 1), manager).await;
    assert!(
        pool.try_take_member().is_err(),
        "an unverified broker is never pooled"
    );
    pool.close(Shutdown::Immediate).await;

    // No CA given: the system's roots do not know the test's CA either.
    let pool = started(
        PoolConfig::new("amqps-system-roots", 1, 1),
        AmqpManager::new(url.as_str()),
    )
    .await;
    assert!(pool.try_take_member().is_err());
    pool.close(Shutdown::Immediate).await;
    drop(node);
}
