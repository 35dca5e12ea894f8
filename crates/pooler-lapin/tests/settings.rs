//! A pool built from settings as a pools file names them, live against RabbitMQ.
#![cfg(feature = "serde")]

use pooler::PoolConfig;
use pooler_lapin::lapin;
use pooler_lapin::{AmqpManager, AmqpSettings};
use pooler_testkit::{Server, started};

async fn url() -> Option<String> {
    Server::Amqp.url().await
}

#[tokio::test]
async fn a_pool_from_settings_connects_where_they_say() {
    let Some(url) = url().await else { return };
    let authority = url
        .strip_prefix("amqp://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.rsplit_once('@'))
        .map_or("127.0.0.1:5672", |(_, host)| host);
    let (host, port) = authority.split_once(':').unwrap_or((authority, "5672"));
    let settings: AmqpSettings = toml::from_str(&format!(
        "host = \"{host}\"\nport = {port}\nuser = \"guest\"\npassword = \"guest\"\nheartbeat = \"20s\"\nconnection_name = \"from-settings\""
    ))
    .unwrap();
    let manager = AmqpManager::from_settings(&settings).unwrap();
    let pool = started(PoolConfig::new("settings", 1, 1), manager.clone()).await;
    let channel = pool.take().await.unwrap();
    let queue = channel
        .queue_declare(
            "".into(),
            lapin::options::QueueDeclareOptions {
                exclusive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    assert!(!queue.name().as_str().is_empty());
}
