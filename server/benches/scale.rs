//! Reads at scale: with 1,000,000 jobs and 10,000 dead letters in the
//! database, p50/p99 of a `/metrics` scrape, of `/api/admin/stats`, and of the
//! server-rendered `/admin` page, after the vacuum autovacuum would have run.
//! Run: `cargo bench -p server --bench benches scale`.

use crate::common;

use std::time::{Duration, Instant};

use docflow::Roles;

const JOBS: i64 = 1_000_000;
const DEAD: i64 = 10_000;
const SAMPLES: usize = 200;

const SEED: &str = r#"
INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes, sha256, pages, blob_key, indexed_at, created_at)
SELECT gen_random_uuid(), u.tenant_id, u.id, 'doc-' || g || '.txt', 'text/plain', 1000, decode(md5(g::text) || md5(g::text), 'hex'), 1,
       'documents/x/original', now(), now() - (g % 604800) * interval '1 second'
FROM generate_series(1, $1) g, (SELECT id, tenant_id FROM users WHERE email = 'alice@acme.test') u;

INSERT INTO jobs (id, tenant_id, document_id, queue, state, attempt, retries, lease_owner, lease_until,
                  enqueued_at, started_at, finished_at, failure_kind, last_error)
SELECT gen_random_uuid(), d.tenant_id, d.id,
       (ARRAY['high', 'normal', 'slow'])[1 + (n % 3)],
       s.state::job_state,
       1 + (n % 4), n % 4,
       CASE WHEN s.state = 'processing' THEN 'bench-worker' END,
       CASE WHEN s.state = 'processing' THEN now() + interval '1 hour' END,
       d.created_at, d.created_at,
       CASE WHEN s.state IN ('done', 'failed') THEN d.created_at + interval '3 seconds' END,
       CASE WHEN s.state = 'failed' THEN 'permanent' END,
       CASE WHEN s.state = 'failed' THEN 'parse: the PDF could not be read' END
FROM (SELECT id, tenant_id, created_at, row_number() OVER () AS n FROM documents) d,
     LATERAL (SELECT CASE WHEN d.n % 100 < 95 THEN 'done' WHEN d.n % 100 < 98 THEN 'failed'
                          WHEN d.n % 100 < 99 THEN 'pending' ELSE 'retrying' END AS state) s;

INSERT INTO job_steps (job_id, step, state, attempts, started_at, finished_at, duration_ms)
SELECT j.id, st.step, 'done', 1, j.started_at, j.finished_at, 3000
FROM (SELECT id, started_at, finished_at FROM jobs WHERE state = 'done' ORDER BY enqueued_at DESC LIMIT 100000) j,
     unnest(ARRAY['parse', 'chunk', 'embed', 'store']) AS st(step);

INSERT INTO dead_letters (id, job_id, tenant_id, queue, reason, error, attempts, payload, dead_at)
SELECT gen_random_uuid(), j.id, j.tenant_id, 'docflow.jobs.' || j.queue, 'permanent', j.last_error, 1, '{}', j.finished_at
FROM jobs j WHERE j.state = 'failed' LIMIT $2;

VACUUM ANALYZE jobs;
VACUUM ANALYZE job_steps;
VACUUM ANALYZE dead_letters;
"#;

#[tokio::main]
pub async fn main() {
    let bench = common::start(
        Roles {
            web: true,
            background: true,
            queues: vec![],
            slots: 0,
        },
        |_| {},
    )
    .await;
    let t = Instant::now();
    for stmt in SEED.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        sqlx::query(stmt)
            .bind(JOBS)
            .bind(DEAD)
            .execute(&bench.pool)
            .await
            .unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&bench.pool)
        .await
        .expect("count");
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters")
        .fetch_one(&bench.pool)
        .await
        .expect("count");
    println!(
        "seeded {jobs} jobs and {dead} dead letters in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let admin = bench.login("admin@demo.test").await;
    // Let the sampler see the data once.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for (name, path) in [
        ("GET /metrics", "/metrics"),
        ("GET /api/admin/stats", "/api/admin/stats?window=1h"),
        ("GET /admin (SSR)", "/admin"),
    ] {
        let mut lat = Vec::with_capacity(SAMPLES);
        let mut status = 0;
        for _ in 0..SAMPLES {
            let t = Instant::now();
            let r = admin
                .get(format!("{}{path}", bench.base))
                .send()
                .await
                .expect("request");
            status = r.status().as_u16();
            let _ = r.bytes().await;
            lat.push(t.elapsed());
        }
        lat.sort();
        println!(
            "{name} with {jobs} jobs: status {status}  p50 {}  p99 {}",
            common::ms(common::quantile(&lat, 0.5)),
            common::ms(common::quantile(&lat, 0.99))
        );
    }
    bench.stop().await;
}
