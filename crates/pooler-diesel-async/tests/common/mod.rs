//! The live scenarios both backends run, written once as a macro over the connection type
//! and the few statements that differ (diesel's query types are per backend, so a generic
//! function would repeat every query's bounds).

/// Expands to the shared live tests for connection type `$conn` against `$server` (a
/// [`pooler_testkit::Server`]); `$session` is a SQL expression for the session's id (a
/// BIGINT), `$sleep` a statement that takes about a second on the server.
macro_rules! live_tests {
    (
        $conn:ty,
        $server:expr,
        session = $session:literal,
        sleep = $sleep:literal,
        refused = $refused:literal,
        key = $key:literal
    ) => {
        use std::time::Duration;

        use pooler::{PoolConfig, Shutdown};
        use pooler_diesel_async::diesel::dsl::sql;
        use pooler_diesel_async::diesel::sql_types::{BigInt, Integer};
        use pooler_diesel_async::diesel::{IntoSql, select};
        use pooler_diesel_async::diesel_async::{
            AnsiTransactionManager, AsyncConnection, RunQueryDsl, TransactionManager,
        };
        use pooler_diesel_async::{DieselManager, Pool, pooler};
        async fn url() -> Option<String> {
            $server.url().await
        }

        /// A pool of at most `max` connections, started with one.
        async fn pool(url: &str, max: usize) -> Pool<$conn> {
            let config = PoolConfig::builder("diesel")
                .init_count(1)
                .max_count(max)
                .queue_max(64)
                .build()
                .unwrap();
            pooler_testkit::started(config, DieselManager::<$conn>::new(url)).await
        }

        async fn session(conn: &mut $conn) -> i64 {
            select(sql::<BigInt>($session))
                .get_result::<i64>(conn)
                .await
                .unwrap()
        }

        /// A link setting the socket refuses (`$refused`) made every connect fail with
        /// "Invalid argument", naming no setting: each start's error names it.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_link_setting_the_socket_refuses_is_named_by_its_key() {
            let Some(url) = url().await else { return };
            let sep = if url.contains('?') { '&' } else { '?' };
            let pool = pooler::Pool::start_lazy(
                PoolConfig::new("diesel-refused", 0, 1),
                DieselManager::<$conn>::new(format!("{url}{sep}{}", $refused)),
            )
            .unwrap();
            let Err(refused) = pool.take_member(Duration::from_millis(500)).await else {
                panic!("connected with {}", $refused);
            };
            assert!(
                refused.to_string().contains($key),
                "the start error names {}: {refused}",
                $key
            );
            pool.close(Shutdown::Immediate).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn sixty_four_tasks_share_eight_connections_with_correct_results() {
            let Some(url) = url().await else { return };
            let pool = pool(&url, 8).await;
            let tasks: Vec<_> = (0..64)
                .map(|t: i32| {
                    let pool = pool.clone();
                    tokio::spawn(async move {
                        for n in 0..10 {
                            let mut conn = pool.take_member(Duration::from_secs(10)).await.unwrap();
                            let sum: i32 =
                                select(t.into_sql::<Integer>() + n.into_sql::<Integer>())
                                    .get_result(&mut *conn)
                                    .await
                                    .unwrap();
                            assert_eq!(sum, t + n);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            let u = pool.utilization();
            assert!(u.in_use_count + u.free_count <= 8, "{u:?}");
            pool.close(Shutdown::Graceful).await;
            assert_eq!(pool.live_tasks(), 0);
        }

        #[tokio::test]
        async fn a_connection_returned_inside_a_transaction_is_not_handed_on() {
            let Some(url) = url().await else { return };
            let pool = pool(&url, 1).await;
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            let first = session(&mut conn).await;
            AnsiTransactionManager::begin_transaction(&mut *conn)
                .await
                .unwrap();
            drop(conn);
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            assert_ne!(
                session(&mut conn).await,
                first,
                "the next user got the connection with the transaction open"
            );
            let state = AnsiTransactionManager::transaction_manager_status_mut(&mut *conn)
                .transaction_depth()
                .unwrap();
            assert_eq!(state, None, "the next user starts outside a transaction");
            drop(conn);
            pool.close(Shutdown::Graceful).await;
        }

        /// A transaction diesel's manager does not know of (`sql_query("BEGIN")`), left
        /// open: the next user's write must land, not run inside it and vanish.
        #[tokio::test]
        async fn a_raw_begin_left_open_never_swallows_the_next_users_write() {
            next_users_write_lands_after("BEGIN", "pooler_diesel_raw").await;
        }

        /// `left` run by one user, who gives the connection back: the next user's write to
        /// `table` must land — seen from another connection once that user's return is done
        /// too — not run inside what `left` left and vanish.
        async fn next_users_write_lands_after(left: &str, table: &str) {
            use pooler_diesel_async::diesel::sql_query;
            let Some(url) = url().await else { return };
            let pool = pool(&url, 1).await;
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            let create = format!("CREATE TABLE IF NOT EXISTS {table} (v INT)");
            for statement in [create, format!("DELETE FROM {table}"), left.to_owned()] {
                sql_query(statement).execute(&mut *conn).await.unwrap();
            }
            drop(conn);
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            sql_query(format!("INSERT INTO {table} VALUES (1)"))
                .execute(&mut *conn)
                .await
                .unwrap();
            drop(conn);
            drop(pool.take_member(Duration::from_secs(5)).await.unwrap());
            let mut other = <$conn as AsyncConnection>::establish(&url).await.unwrap();
            let count = format!("(SELECT COUNT(*) FROM {table})");
            let n: i64 = select(sql::<BigInt>(&count))
                .get_result(&mut other)
                .await
                .unwrap();
            assert_eq!(n, 1, "after {left:?} the next user's write landed");
            pool.close(Shutdown::Graceful).await;
        }

        #[tokio::test]
        async fn a_transaction_dropped_part_way_is_not_handed_on() {
            let Some(url) = url().await else { return };
            let pool = pool(&url, 1).await;
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            let first = session(&mut conn).await;
            let timed_out = tokio::time::timeout(
                Duration::from_millis(100),
                conn.transaction(async |c| {
                    pooler_diesel_async::diesel::sql_query($sleep)
                        .execute(c)
                        .await?;
                    Ok::<_, pooler_diesel_async::diesel::result::Error>(())
                }),
            )
            .await;
            assert!(timed_out.is_err(), "the transaction was cut short");
            drop(conn);
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            assert_ne!(session(&mut conn).await, first);
            let sum: i32 = select(40.into_sql::<Integer>() + 2.into_sql::<Integer>())
                .get_result(&mut *conn)
                .await
                .unwrap();
            assert_eq!(sum, 42);
            drop(conn);
            pool.close(Shutdown::Graceful).await;
        }

        #[tokio::test]
        async fn a_query_cancelled_outside_a_transaction_does_not_answer_the_next_one() {
            let Some(url) = url().await else { return };
            let pool = pool(&url, 1).await;
            let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
            let timed_out = tokio::time::timeout(
                Duration::from_millis(100),
                pooler_diesel_async::diesel::sql_query($sleep).execute(&mut *conn),
            )
            .await;
            assert!(timed_out.is_err(), "the query was cut short");
            drop(conn);
            // The next user, on whatever connection it gets, reads its own answer.
            for n in 0..3 {
                let mut conn = pool.take_member(Duration::from_secs(5)).await.unwrap();
                let got: i32 = select(n.into_sql::<Integer>() + 7.into_sql::<Integer>())
                    .get_result(&mut *conn)
                    .await
                    .unwrap();
                assert_eq!(got, n + 7);
            }
            pool.close(Shutdown::Graceful).await;
        }
    };
}
