//! The database's own rules: what the application never writes, the
//! database still refuses, whether a rule sits on its table or in a
//! column's domain; and deleting a tenant deletes everything of it.

use docflow::Roles;

use crate::helpers::{queues, spawn_with, Options};

/// Runs `sql` on a done job's rows (`$1` is its id) and returns the
/// SQLSTATE it was refused with, or `None` if PostgreSQL accepted it.
async fn refused(pool: &sqlx::PgPool, sql: &str, job: uuid::Uuid) -> Option<String> {
    let mut tx = pool.begin().await.expect("begin");
    let result = sqlx::query(sql).bind(job).execute(&mut *tx).await;
    let _ = tx.rollback().await;
    result.err().map(|e| {
        e.as_database_error()
            .and_then(|d| d.code())
            .map_or_else(|| e.to_string(), |c| c.into_owned())
    })
}

#[tokio::test]
async fn the_database_refuses_values_outside_its_rules_and_a_deleted_tenant_takes_its_rows() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1"])),
        ..Default::default()
    })
    .await;
    let body = "Rules of the road. ".repeat(200).into_bytes();
    let up = app.upload_ok("alice@acme.test", "rules.txt", body).await;
    let id = up["job_id"].as_str().expect("job id").to_string();
    app.wait_state("alice@acme.test", &id, "done").await;
    let job: uuid::Uuid = id.parse().expect("uuid");
    let doc = "(SELECT document_id FROM jobs WHERE id = $1)";

    const CHECK_VIOLATION: &str = "23514";
    let forbidden = [
        "UPDATE jobs SET queue = 'urgent' WHERE id = $1".to_string(),
        "UPDATE jobs SET current_step = 'print' WHERE id = $1".into(),
        "UPDATE jobs SET failure_kind = 'bored' WHERE id = $1".into(),
        "UPDATE jobs SET attempt = -1 WHERE id = $1".into(),
        "UPDATE jobs SET retries = retries - 100 WHERE id = $1".into(),
        "UPDATE jobs SET crashes = -1 WHERE id = $1".into(),
        // Rules that tie columns together.
        "UPDATE jobs SET finished_at = NULL WHERE id = $1".into(),
        "UPDATE jobs SET lease_owner = 'w1', lease_until = now() WHERE id = $1".into(),
        "UPDATE job_steps SET state = 'lost' WHERE job_id = $1".into(),
        "UPDATE job_steps SET step = 'print' WHERE job_id = $1 AND step = 'store'".into(),
        format!("UPDATE documents SET filename = '' WHERE id = {doc}"),
        format!("UPDATE documents SET filename = repeat('a', 256) WHERE id = {doc}"),
        format!("UPDATE documents SET idempotency_key = '' WHERE id = {doc}"),
        format!("UPDATE documents SET content_type = 'image/gif' WHERE id = {doc}"),
        format!("UPDATE documents SET size_bytes = 0 WHERE id = {doc}"),
        format!("UPDATE documents SET sha256 = '\\x00' WHERE id = {doc}"),
        format!("UPDATE documents SET pages = -1 WHERE id = {doc}"),
        format!("UPDATE chunks SET chunk_index = -1 WHERE document_id = {doc}"),
    ];
    for sql in &forbidden {
        assert_eq!(
            refused(&app.pool, sql, job).await.as_deref(),
            Some(CHECK_VIOLATION),
            "{sql}"
        );
    }
    // The same columns take every value the application writes.
    let allowed = [
        "UPDATE jobs SET queue = 'slow', current_step = 'embed', failure_kind = 'crashed',
             attempt = 0, retries = 3, crashes = 2 WHERE id = $1"
            .to_string(),
        "UPDATE job_steps SET state = 'pending' WHERE job_id = $1".into(),
        format!(
            "UPDATE documents SET filename = repeat('a', 255), content_type = 'application/pdf',
                 size_bytes = 1, sha256 = sha256('x'), pages = 0 WHERE id = {doc}"
        ),
    ];
    for sql in &allowed {
        assert_eq!(refused(&app.pool, sql, job).await, None, "{sql}");
    }

    // A tenant's deletion reaches its events and chunks through its jobs
    // and documents.
    let tenant: uuid::Uuid = sqlx::query_scalar("SELECT id FROM tenants WHERE slug = 'acme'")
        .fetch_one(&app.pool)
        .await
        .expect("tenant");
    let tables = ["job_events", "chunks", "jobs", "documents"];
    for table in tables {
        assert!(rows_of(&app.pool, table, tenant).await > 0, "{table}");
    }
    sqlx::query("DELETE FROM tenants WHERE id = $1")
        .bind(tenant)
        .execute(&app.pool)
        .await
        .expect("delete tenant");
    for table in tables {
        assert_eq!(
            rows_of(&app.pool, table, tenant).await,
            0,
            "{table} rows of the deleted tenant"
        );
    }
}

async fn rows_of(pool: &sqlx::PgPool, table: &str, tenant: uuid::Uuid) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {table} WHERE tenant_id = $1"
    ))
    .bind(tenant)
    .fetch_one(pool)
    .await
    .expect("count")
}
