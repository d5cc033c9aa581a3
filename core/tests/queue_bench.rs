//! Runs the `shardwork bench` queue measurement (src/bench/queue.rs) on every adapter that can
//! run here. Ignored by default (it is a measurement, and slow on a shared machine):
//! `cargo nextest run -p shardwork-core --test queue_bench --run-ignored only --no-capture`.
//! Set SHARDWORK_BENCH_MESSAGES to change the message count (default 10,000) and
//! SHARDWORK_BENCH_CONSUMERS the number of concurrent consumers (default 4).

#[path = "../../src/bench/queue.rs"]
mod queue_bench;

use std::sync::Arc;

use queue_bench::{QueueBenchConfig, bench_queue};
use sea_orm::{ConnectOptions, ConnectionTrait, Database};
use sea_orm_migration::MigratorTrait;
use shardwork_core::queue::rabbitmq::{RabbitQueue, RabbitSettings};
use shardwork_core::queue::table::TableQueue;
use shardwork_core::queue::table::schema::QueueOnly as Migrator;
use shardwork_core::testkit::services::{Service, service_url};

fn config(adapter: &str) -> QueueBenchConfig {
    let mut config =
        QueueBenchConfig::new(adapter, &format!("bench.{}", uuid::Uuid::new_v4().simple()));
    if let Some(n) = std::env::var("SHARDWORK_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.messages = n;
    }
    if let Some(n) = std::env::var("SHARDWORK_BENCH_CONSUMERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.consumers = n;
    }
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn bench_rabbitmq() {
    let Some(url) = service_url(Service::RabbitMq, "queue bench (RabbitMQ)") else {
        return;
    };
    let queue = RabbitQueue::connect(&url, RabbitSettings::default())
        .await
        .expect("connect");
    let config = config("RabbitMQ");
    let report = bench_queue(Arc::new(queue.clone()), &config)
        .await
        .expect("bench");
    println!("{report}");
    queue.delete(&config.queue).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn bench_table_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    // One connection: SQLite has one writer, and writers on several pooled connections meet in
    // SQLite's busy handler, which sleeps (34 tasks/s with four consumers on four connections,
    // against hundreds on one).
    let mut options = ConnectOptions::new(url);
    options.max_connections(1);
    let db = Database::connect(options).await.expect("sqlite");
    Migrator::up(&db, None).await.expect("migrate");
    let report = bench_queue(Arc::new(TableQueue::new(db)), &config("table (SQLite)"))
        .await
        .expect("bench");
    println!("{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run with --run-ignored only"]
async fn bench_table_postgres() {
    let Some(url) = service_url(Service::Postgres, "queue bench (PostgreSQL)") else {
        return;
    };
    let admin = Database::connect(&url).await.expect("connect");
    let name = format!("shardwork_bench_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create db");
    let slash = url.rfind('/').expect("URL names a database");
    let db = Database::connect(&format!("{}/{name}", &url[..slash]))
        .await
        .expect("connect");
    Migrator::up(&db, None).await.expect("migrate");
    let outcome = bench_queue(
        Arc::new(TableQueue::new(db.clone())),
        &config("table (PostgreSQL)"),
    )
    .await;
    db.close().await.expect("close");
    admin
        .execute_unprepared(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .expect("drop");
    println!("{}", outcome.expect("bench"));
}
