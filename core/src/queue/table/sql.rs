//! The adapter's statements, written once with `?` placeholders and numbered for PostgreSQL.
//!
//! Hand-written rather than built with sea-query because the claim needs `FOR UPDATE SKIP
//! LOCKED` in a subselect on PostgreSQL and `RETURNING` on both, and reads best as plain SQL.

use sea_orm::{DbBackend, Statement, Value};

/// Builds a statement for `backend` from SQL with `?` placeholders.
pub(super) fn statement(backend: DbBackend, sql: &str, values: Vec<Value>) -> Statement {
    let sql = match backend {
        DbBackend::Postgres => number_placeholders(sql),
        _ => sql.to_owned(),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// `?` → `$1`, `$2`, … (none of our statements has a `?` inside a literal).
fn number_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for ch in sql.chars() {
        if ch == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(ch);
        }
    }
    out
}

pub(super) const INSERT: &str = "INSERT INTO queue_messages \
     (queue, idempotency_key, payload, delivery_count, visible_at, dead, created_at) \
     VALUES (?, ?, ?, 0, ?, ?, ?) \
     ON CONFLICT (queue, idempotency_key) DO NOTHING";

/// Claims the oldest ready row of one queue: values are lease token, new visible_at, queue,
/// dead flag, now. On PostgreSQL the subselect locks the row and skips rows other claims hold;
/// on SQLite the whole statement runs under the database's single write lock, and the outer
/// guard re-checks readiness, so two claims can never return the same row on either.
pub(super) fn claim(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => {
            "UPDATE queue_messages \
             SET delivery_count = delivery_count + 1, lease_token = ?, visible_at = ? \
             WHERE id = (SELECT id FROM queue_messages \
                         WHERE queue = ? AND dead = ? AND visible_at <= ? \
                         ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING id, idempotency_key, payload, delivery_count"
        }
        _ => {
            "UPDATE queue_messages \
             SET delivery_count = delivery_count + 1, lease_token = ?1, visible_at = ?2 \
             WHERE id = (SELECT id FROM queue_messages \
                         WHERE queue = ?3 AND dead = ?4 AND visible_at <= ?5 \
                         ORDER BY visible_at, id LIMIT 1) \
               AND dead = ?4 AND visible_at <= ?5 \
             RETURNING id, idempotency_key, payload, delivery_count"
        }
    }
}

/// Settles a claim: every statement below is guarded by the claim's lease token, so a consumer
/// whose visibility timeout ran out (and whose row another consumer now holds) changes nothing.
pub(super) const DELETE_HELD: &str = "DELETE FROM queue_messages WHERE id = ? AND lease_token = ?";

/// Values: visible_at, id, lease token.
pub(super) const RELEASE_HELD: &str =
    "UPDATE queue_messages SET lease_token = NULL, visible_at = ? WHERE id = ? AND lease_token = ?";

/// As RELEASE_HELD, and the claim's delivery is not counted (the consumer refused it).
/// Values: visible_at, id, lease token.
pub(super) const RETURN_HELD: &str = "UPDATE queue_messages \
     SET lease_token = NULL, visible_at = ?, delivery_count = delivery_count - 1 \
     WHERE id = ? AND lease_token = ?";

/// Values: reason, visible_at, delivery count to record, id, lease token.
pub(super) const DEAD_LETTER_HELD: &str = "UPDATE queue_messages \
     SET dead = TRUE, dead_reason = ?, lease_token = NULL, visible_at = ?, delivery_count = ? \
     WHERE id = ? AND lease_token = ?";

/// Values: queue, now.
pub(super) const READY_COUNT: &str = "SELECT COUNT(*) AS n FROM queue_messages \
     WHERE queue = ? AND dead = FALSE AND visible_at <= ?";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order_for_postgres() {
        assert_eq!(number_placeholders("a = ? AND b = ?"), "a = $1 AND b = $2");
    }

    #[test]
    fn sqlite_statements_keep_question_marks() {
        let stmt = statement(DbBackend::Sqlite, "x = ?", vec![1.into()]);
        assert_eq!(stmt.sql, "x = ?");
    }
}
