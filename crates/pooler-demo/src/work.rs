//! What a consumer does with a member of each kind.

use std::future::Future;

use pooler::Manager;
use pooler_postgres::PgManager;
use pooler_redis::RedisManager;

use crate::sim::Sim;

/// One unit of work on a member.
pub(crate) trait Work: Manager {
    fn work(member: &mut Self::Member) -> impl Future<Output = Result<(), String>> + Send;
}

impl Work for Sim {
    async fn work(member: &mut Self::Member) -> Result<(), String> {
        member.queries += 1;
        Ok(())
    }
}

impl Work for PgManager {
    async fn work(member: &mut Self::Member) -> Result<(), String> {
        member
            .simple_query("SELECT 1")
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl Work for RedisManager {
    async fn work(member: &mut Self::Member) -> Result<(), String> {
        pooler_redis::redis::cmd("PING")
            .query_async::<String>(member)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

impl Work for pooler_mysql::MysqlManager {
    async fn work(member: &mut Self::Member) -> Result<(), String> {
        use pooler_mysql::mysql_async::prelude::Queryable as _;
        member
            .query_drop("SELECT 1")
            .await
            .map_err(|e| e.to_string())
    }
}

impl Work for pooler_lapin::AmqpManager {
    /// Publishes a message to the demo's queue and gets one back.
    async fn work(member: &mut Self::Member) -> Result<(), String> {
        use pooler_lapin::lapin::BasicProperties;
        use pooler_lapin::lapin::options::{
            BasicGetOptions, BasicPublishOptions, QueueDeclareOptions,
        };
        use pooler_lapin::lapin::types::FieldTable;
        let queue = "pooler-demo";
        let options = QueueDeclareOptions {
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        member
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .map_err(|e| e.to_string())?;
        member
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                b"work",
                BasicProperties::default(),
            )
            .await
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        member
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
