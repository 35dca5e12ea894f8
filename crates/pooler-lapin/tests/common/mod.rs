//! What the hand-over tests share.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

/// Whether a queue named `name` exists, asked on a connection of its own: a passive
/// declaration of another connection's exclusive queue is refused as locked, of a queue
/// that does not exist as not found.
pub(crate) async fn exists(url: &str, name: &str) -> bool {
    let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .expect("a connection of the test's own");
    let channel = connection.create_channel().await.expect("a channel");
    let asked = channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    let _ = connection.close(200, "asked".into()).await;
    match asked {
        Ok(_) => true,
        Err(e) if e.to_string().contains("RESOURCE_LOCKED") => true,
        Err(e) if e.to_string().contains("NOT_FOUND") => false,
        Err(e) => panic!("asking for {name}: {e}"),
    }
}
