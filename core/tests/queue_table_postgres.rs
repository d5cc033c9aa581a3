//! The table queue on PostgreSQL against the TaskQueue conformance suite. Each test gets a
//! database of its own, created from the server's `test` database URL and dropped after.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use sea_orm_migration::MigratorTrait;
use shardwork_core::queue::TaskQueue;
use shardwork_core::queue::table::TableQueue;
use shardwork_core::queue::table::schema::QueueOnly as Migrator;
use shardwork_core::testkit::queue_suite::QueueHarness;
use shardwork_core::testkit::services::{Service, service_url};

struct PostgresHarness {
    queue: TableQueue,
    admin: DatabaseConnection,
    database: String,
}

#[async_trait]
impl QueueHarness for PostgresHarness {
    fn queue(&self) -> Arc<dyn TaskQueue> {
        Arc::new(self.queue.clone())
    }

    fn visibility_timeout(&self) -> Duration {
        Duration::from_secs(3)
    }

    /// Terminates every server process serving this test's database, as a PostgreSQL restart
    /// would; the pool notices on its next checkout and reconnects.
    async fn sever_connection(&self) -> bool {
        let sql = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            self.database
        );
        self.admin
            .execute_unprepared(&sql)
            .await
            .expect("terminate backends");
        true
    }

    async fn cleanup(&self, _queue: &str) {
        let _ = self.queue.database().clone().close().await;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database);
        self.admin
            .execute_unprepared(&sql)
            .await
            .expect("drop test database");
    }
}

fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let Some(slash) = base.rfind('/') else {
        panic!("PostgreSQL URL {url} names no database")
    };
    format!("{}/{database}{query}", &base[..slash])
}

async fn harness() -> Option<PostgresHarness> {
    let url = service_url(Service::Postgres, "TaskQueue (table) on PostgreSQL")?;
    let admin = Database::connect(&url)
        .await
        .expect("connect to PostgreSQL");
    let database = format!("shardwork_queue_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_unprepared(&format!("CREATE DATABASE {database}"))
        .await
        .expect("create db");
    let db = Database::connect(&with_database(&url, &database))
        .await
        .expect("connect test db");
    Migrator::up(&db, None).await.expect("migrate");
    Some(PostgresHarness {
        queue: TableQueue::new(db),
        admin,
        database,
    })
}

shardwork_core::queue_conformance_tests!(harness());
