//! Every migration applies, reverts and re-applies on SQLite (a temporary file) and on
//! PostgreSQL (a database created for the test and dropped after), and the constraints the API
//! relies on hold on both.

use sea_orm_migration::MigratorTrait;
use sea_orm_migration::prelude::SchemaManager;
use sea_orm_migration::sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement,
};
use shardwork_core::testkit::services::{Service, service_url};
use shardwork_migrations::Migrator;

const TABLES: [&str; 17] = [
    "jobs",
    "workers",
    "shards",
    "rounds",
    "tasks",
    "submissions",
    "reputation_events",
    "job_events",
    "chain_transactions",
    "siwe_nonces",
    "queue_messages",
    "task_progress",
    "rate_windows",
    "content_claims",
    "spent_attempts",
    "chain_blocks",
    "chain_logs",
];

async fn existing_tables(db: &DatabaseConnection) -> Vec<&'static str> {
    let manager = SchemaManager::new(db);
    let mut found = Vec::new();
    for table in TABLES {
        if manager.has_table(table).await.expect("has_table") {
            found.push(table);
        }
    }
    found
}

async fn exec(db: &DatabaseConnection, sql: &str) -> Result<(), String> {
    db.execute_raw(Statement::from_string(
        db.get_database_backend(),
        sql.to_owned(),
    ))
    .await
    .map(|_| ())
    .map_err(|err| err.to_string())
}

/// Up, down, up again; then the constraints.
async fn exercise(db: &DatabaseConnection) {
    Migrator::up(db, None).await.expect("first up");
    assert_eq!(
        existing_tables(db).await,
        TABLES.to_vec(),
        "every table after up"
    );

    Migrator::down(db, None).await.expect("down");
    assert!(
        existing_tables(db).await.is_empty(),
        "no table survives down"
    );

    Migrator::up(db, None).await.expect("second up");
    assert_eq!(existing_tables(db).await, TABLES.to_vec());
    // Nothing pending after up: re-running is a no-op.
    assert!(
        Migrator::get_pending_migrations(db)
            .await
            .expect("pending")
            .is_empty()
    );
    Migrator::up(db, None).await.expect("up when already up");

    check_constraints(db).await;
    check_content_claims_backfill(db).await;
}

/// A job posted before `content_claims` existed gets its dataset and held-out claims on
/// upgrade, keyed by multihash, so a second spelling of its dataset is guarded too.
async fn check_content_claims_backfill(db: &DatabaseConnection) {
    let migrations = Migrator::migrations();
    let at = migrations
        .iter()
        .position(|m| m.name() == "m20261208_000008_content_claims")
        .expect("the content_claims migration");
    Migrator::down(db, Some((migrations.len() - at) as u32))
        .await
        .expect("down to before content_claims");
    let (spec, job) = match db.get_database_backend() {
        DbBackend::Postgres => (
            "'{\"kind\":\"lora\"}'::jsonb",
            "'0190c1d2-0000-7000-8000-0000000000b1'::uuid",
        ),
        _ => (
            "'{\"kind\":\"lora\"}'",
            "'0190c1d2-0000-7000-8000-0000000000b1'",
        ),
    };
    // The dataset posted in its CIDv0 spelling; looked up below by its CIDv1 one.
    exec(
        db,
        &format!(
            "INSERT INTO jobs (id, requester, kind, status, spec, stake_wei, shards, rounds, \
             deadline, dataset_cid, heldout_cid) VALUES ({job}, \
             '0x00000000000000000000000000000000000000AB', 'lora', 'draft', {spec}, '1', 2, 1, \
             '2030-01-01T00:00:00Z', 'QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG', \
             'bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku')"
        ),
    )
    .await
    .expect("insert a job before content_claims");
    Migrator::up(db, None).await.expect("up again");
    let v1 = shardwork_core::store::parse_cid("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG")
        .expect("a CIDv0")
        .into_v1()
        .expect("as CIDv1")
        .to_string();
    assert!(v1.starts_with("bafy"), "{v1}");
    let key = shardwork_core::store::content_key_of(&v1).expect("key");
    let row = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            format!(
                "SELECT owner, kind, (SELECT COUNT(*) FROM content_claims) AS n \
                 FROM content_claims WHERE multihash = '{key}'"
            ),
        ))
        .await
        .expect("read the claim")
        .expect("the dataset's claim, found by its other spelling's multihash");
    assert_eq!(row.try_get::<String>("", "kind").unwrap(), "dataset");
    assert_eq!(
        row.try_get::<String>("", "owner").unwrap(),
        "0x00000000000000000000000000000000000000ab"
    );
    assert_eq!(
        row.try_get::<i64>("", "n").unwrap(),
        2,
        "dataset and held-out"
    );
}

async fn check_constraints(db: &DatabaseConnection) {
    let job = "0190c1d2-0000-7000-8000-000000000001";
    let worker = "0190c1d2-0000-7000-8000-000000000002";
    let shard = "0190c1d2-0000-7000-8000-000000000003";
    let task = "0190c1d2-0000-7000-8000-000000000004";
    let (spec, caps) = match db.get_database_backend() {
        DbBackend::Postgres => ("'{\"kind\":\"lora\"}'::jsonb", "'{\"gpu\":false}'::jsonb"),
        _ => ("'{\"kind\":\"lora\"}'", "'{\"gpu\":false}'"),
    };
    let id = |uuid: &str| match db.get_database_backend() {
        DbBackend::Postgres => format!("'{uuid}'::uuid"),
        _ => format!("'{uuid}'"),
    };
    exec(
        db,
        &format!(
            "INSERT INTO jobs (id, requester, kind, status, spec, stake_wei, shards, rounds, deadline) \
             VALUES ({}, '0x0000000000000000000000000000000000000001', 'lora', 'draft', {spec}, \
             '1000000000000000000', 2, 1, '2030-01-01T00:00:00Z')",
            id(job)
        ),
    )
    .await
    .expect("insert job");
    exec(
        db,
        &format!(
            "INSERT INTO workers (id, address, capabilities) VALUES ({}, \
             '0x00000000000000000000000000000000000000aa', {caps})",
            id(worker)
        ),
    )
    .await
    .expect("insert worker");

    // A worker address is registered once.
    let again = exec(
        db,
        &format!(
            "INSERT INTO workers (id, address, capabilities) VALUES ({}, \
             '0x00000000000000000000000000000000000000aa', {caps})",
            id("0190c1d2-0000-7000-8000-0000000000ff")
        ),
    )
    .await;
    assert!(again.is_err(), "duplicate worker address was accepted");

    // A shard must belong to an existing job.
    let orphan = exec(
        db,
        &format!(
            "INSERT INTO shards (id, job_id, \"index\", cid, sample_count, size_bytes) \
             VALUES ({}, {}, 0, 'bafy', 10, 100)",
            id(shard),
            id("0190c1d2-0000-7000-8000-00000000dead")
        ),
    )
    .await;
    assert!(orphan.is_err(), "shard without a job was accepted");

    exec(
        db,
        &format!(
            "INSERT INTO shards (id, job_id, \"index\", cid, sample_count, size_bytes) \
             VALUES ({}, {}, 0, 'bafy', 10, 100)",
            id(shard),
            id(job)
        ),
    )
    .await
    .expect("insert shard");
    exec(
        db,
        &format!(
            "INSERT INTO tasks (id, job_id, shard_id, round, status, max_attempts) \
             VALUES ({}, {}, {}, 1, 'queued', 3)",
            id(task),
            id(job),
            id(shard)
        ),
    )
    .await
    .expect("insert task");

    // One submission per task and worker: the second is refused, so submit is idempotent.
    let submit = |n: &str| {
        format!(
            "INSERT INTO submissions (id, task_id, worker_id, adapter_cid, metrics_cid, sample_count) \
             VALUES ({}, {}, {}, 'bafyadapter', 'bafymetrics', 10)",
            id(n),
            id(task),
            id(worker)
        )
    };
    exec(db, &submit("0190c1d2-0000-7000-8000-000000000005"))
        .await
        .expect("first submission");
    let second = exec(db, &submit("0190c1d2-0000-7000-8000-000000000006")).await;
    assert!(
        second.is_err(),
        "second submission for the same task and worker was accepted"
    );

    // Outbox rows default to not needing dispatch and not dispatched.
    exec(
        db,
        &format!(
            "INSERT INTO job_events (job_id, kind, payload, needs_dispatch) \
             VALUES ({}, 'round_queued', {spec}, TRUE)",
            id(job)
        ),
    )
    .await
    .expect("insert job event");
    let pending = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT COUNT(*) AS n FROM job_events WHERE needs_dispatch AND dispatched_at IS NULL",
        ))
        .await
        .expect("count outbox")
        .expect("a row");
    assert_eq!(pending.try_get::<i64>("", "n").expect("n"), 1);

    // A queue key is unique per queue, not globally.
    let message = |queue: &str| {
        let payload = match db.get_database_backend() {
            DbBackend::Postgres => "'\\x7b7d'::bytea",
            _ => "X'7B7D'",
        };
        format!(
            "INSERT INTO queue_messages (queue, idempotency_key, payload, visible_at, created_at) \
             VALUES ('{queue}', 'job-1/round-1/shard-0', {payload}, 0, 0)"
        )
    };
    exec(db, &message("tasks")).await.expect("first message");
    assert!(
        exec(db, &message("tasks")).await.is_err(),
        "duplicate key in one queue"
    );
    exec(db, &message("other"))
        .await
        .expect("same key in another queue");

    // One progress point per task, attempt and step: a repeated heartbeat adds nothing, while
    // the same step of the next attempt (a retrained task) is a point of its own.
    let point = |attempt: i32| {
        format!(
            "INSERT INTO task_progress (task_id, attempt, step, total_steps, loss, \
             tokens_per_second, recorded_at) VALUES ({}, {attempt}, 3, 10, 0.7, NULL, \
             '2030-01-01T00:00:00Z')",
            id(task)
        )
    };
    exec(db, &point(1)).await.expect("first progress point");
    assert!(
        exec(db, &point(1)).await.is_err(),
        "the same step of the same attempt twice"
    );
    exec(db, &point(2))
        .await
        .expect("the same step of another attempt");
    let orphan_point = exec(
        db,
        &format!(
            "INSERT INTO task_progress (task_id, attempt, step, total_steps, recorded_at) \
             VALUES ({}, 1, 1, 10, '2030-01-01T00:00:00Z')",
            id("0190c1d2-0000-7000-8000-00000000beef")
        ),
    )
    .await;
    assert!(orphan_point.is_err(), "progress of no task was accepted");

    // Deleting a job takes its shards, tasks, submissions and progress with it.
    exec(db, &format!("DELETE FROM jobs WHERE id = {}", id(job)))
        .await
        .expect("delete job");
    let left = db
        .query_one_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT (SELECT COUNT(*) FROM shards) + (SELECT COUNT(*) FROM tasks) \
             + (SELECT COUNT(*) FROM submissions) + (SELECT COUNT(*) FROM task_progress) AS n",
        ))
        .await
        .expect("count children")
        .expect("a row");
    assert_eq!(left.try_get::<i64>("", "n").expect("n"), 0);

    // A cursor keeps the hash of the last block it read; older cursors have none.
    let hash = format!("0x{}", "ab".repeat(32));
    exec(
        db,
        &format!(
            "INSERT INTO chain_cursors (name, next_block, last_block_hash) \
             VALUES ('escrow:1:0x01', 8, '{hash}')"
        ),
    )
    .await
    .expect("a cursor with its block hash");
    exec(
        db,
        "INSERT INTO chain_cursors (name, next_block) VALUES ('escrow:1:0x02', 8)",
    )
    .await
    .expect("a cursor without one");

    // A follower keeps one hash per block it checkpointed.
    let checkpoint = format!(
        "INSERT INTO chain_blocks (cursor, number, hash) VALUES ('escrow:1:0x01', 7, '{hash}')"
    );
    exec(db, &checkpoint).await.expect("a checkpoint");
    assert!(
        exec(db, &checkpoint).await.is_err(),
        "two hashes for one height of one cursor"
    );
}

#[tokio::test]
async fn migrations_apply_revert_and_reapply_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("shardwork.db").display()
    );
    let db = Database::connect(&url).await.expect("open sqlite");
    exercise(&db).await;
}

#[tokio::test]
async fn migrations_apply_revert_and_reapply_on_postgres() {
    let Some(url) = service_url(Service::Postgres, "migrations on PostgreSQL") else {
        return;
    };
    let admin = Database::connect(&url)
        .await
        .expect("connect to PostgreSQL");
    let name = format!("shardwork_mig_{}", uuid::Uuid::new_v4().simple());
    exec(&admin, &format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let test_url = match url.rfind('/') {
        Some(slash) => format!("{}/{name}", &url[..slash]),
        None => panic!("PostgreSQL URL {url} names no database"),
    };
    let db = Database::connect(&test_url)
        .await
        .expect("connect to the test database");
    // Run the checks in a task so the database is dropped even when one fails.
    let outcome = tokio::spawn(async move {
        exercise(&db).await;
        db.close().await.expect("close");
    })
    .await;
    exec(&admin, &format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .expect("drop database");
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
}
