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

/// The queues on the broker whose arguments hold `marker`, as `rabbitmqctl` lists them: a
/// queue the broker names cannot be asked for by a name nobody learnt. `None` when the
/// broker is not this machine's (`url` names another host), where `rabbitmqctl` cannot see it.
#[allow(dead_code)] // not every test binary lists queues
pub(crate) fn listed(url: &str, marker: &str) -> Option<Vec<String>> {
    if !(url.contains("@127.0.0.1") || url.contains("@localhost") || url.contains("//127.0.0.1")) {
        return None;
    }
    let out = std::process::Command::new("rabbitmqctl")
        .args([
            "list_queues",
            "-q",
            "--no-table-headers",
            "name",
            "arguments",
        ])
        .output()
        .expect("rabbitmqctl runs beside the local broker");
    assert!(
        out.status.success(),
        "rabbitmqctl list_queues: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|line| line.contains(marker))
            .map(|line| line.split('\t').next().unwrap_or(line).to_owned())
            .collect(),
    )
}
