//! Search at scale: one tenant with `SEARCH_CHUNKS` chunks (default
//! 1,000,000) among ten tenants (the nine others with a twentieth of that
//! each), 384-dimension vectors of the configured model inserted directly
//! (clustered, as real embeddings are: 1,000 topics, each chunk near one),
//! each chunk's text 20 words of a 5,000-word vocabulary. It reports the
//! HNSW index's build time, the database's size, and for the large tenant
//! and for a small one: the vector query's p50/p99 (`docflow::search::
//! nearest`, 40 candidates as a search for 10 asks), its recall@10 against
//! an exact scan of the same data, and a whole `GET /api/search` (query
//! embedded by the real model, lexical and vector rankings, fusion,
//! snippets) p50/p99.
//! Run: `cargo bench -p server --bench benches search` (`SEARCH_CHUNKS=100000` for a
//! quicker look; the model from `scripts/fetch-model.sh`).

use crate::common;

use std::time::{Duration, Instant};

use docflow::{
    pipeline::{minilm, vectors::Model},
    platform::config::EmbedderKind,
    Roles,
};
use uuid::Uuid;

const TENANTS: usize = 10;
const TOPICS: i64 = 100;
const VOCABULARY: i64 = 5_000;
const QUERIES: usize = 100;
const RECALL_QUERIES: usize = 20;

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Inserts `chunks` chunks for `tenant` in one document, in statements of
/// 50,000 rows.
async fn seed(pool: &sqlx::PgPool, tenant: Uuid, user: Uuid, model: &Model, chunks: i64) {
    let doc = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes,
                                sha256, pages, blob_key, indexed_at)
         VALUES ($1, $2, $3, 'corpus.txt', 'text/plain', 1,
                 decode(md5($1::text) || md5($1::text), 'hex'), 1, 'none', now())",
    )
    .bind(doc)
    .bind(tenant)
    .bind(user)
    .execute(pool)
    .await
    .expect("document");
    let mut from = 0;
    while from < chunks {
        let to = (from + 50_000).min(chunks);
        sqlx::query(&format!(
            "INSERT INTO chunks (document_id, tenant_id, chunk_index, text, embedding, model_id)
             SELECT $1, $2, g,
                    (SELECT string_agg('w' || (1 + floor(random() * {VOCABULARY}))::int, ' ')
                     FROM generate_series(1, 20) WHERE g >= 0),
                    (SELECT array_agg(t.x + 0.3 * (random() - 0.5) ORDER BY t.i)
                     FROM bench_topics b, unnest(b.v) WITH ORDINALITY t(x, i)
                     WHERE b.id = 1 + (g::bigint * 7919) % {TOPICS})::vector({dims}),
                    $5
             FROM generate_series($3::int, $4::int - 1) g",
            dims = model.dims
        ))
        .bind(doc)
        .bind(tenant)
        .bind(i32::try_from(from).expect("chunk index"))
        .bind(i32::try_from(to).expect("chunk index"))
        .bind(model.id)
        .execute(pool)
        .await
        .expect("chunks");
        from = to;
    }
}

fn quantiles(mut lat: Vec<Duration>) -> String {
    lat.sort();
    format!(
        "p50 {}  p99 {}",
        common::ms(common::quantile(&lat, 0.5)),
        common::ms(common::quantile(&lat, 0.99))
    )
}

#[tokio::main]
pub async fn main() {
    let big = env_or("SEARCH_CHUNKS", 1_000_000);
    let small = (big / 20).max(1);
    let bench = common::start(Roles::web(), |c| c.embedder = EmbedderKind::Minilm).await;
    let pool = &bench.pool;
    let model = docflow::pipeline::vectors::register(
        pool,
        &docflow::pipeline::vectors::ModelSpec {
            name: minilm::MODEL_NAME.into(),
            dims: minilm::DIMS,
        },
    )
    .await
    .expect("the model is registered");

    // Ten tenants: acme (alice) is the large one.
    let alice: (Uuid, Uuid) =
        sqlx::query_as("SELECT tenant_id, id FROM users WHERE email = 'alice@acme.test'")
            .fetch_one(pool)
            .await
            .expect("alice");
    let bob: (Uuid, Uuid) =
        sqlx::query_as("SELECT tenant_id, id FROM users WHERE email = 'bob@globex.test'")
            .fetch_one(pool)
            .await
            .expect("bob");
    let mut others = vec![bob];
    for i in others.len()..TENANTS - 1 {
        let email = format!("user{i}@tenant{i}.test");
        docflow::demo::add_user(
            pool,
            &email,
            &format!("tenant{i}"),
            docflow::platform::db::Plan::Free,
            docflow::platform::db::Role::Member,
            common::PASSWORD,
        )
        .await
        .expect("user");
        others.push(
            sqlx::query_as("SELECT tenant_id, id FROM users WHERE email = $1")
                .bind(&email)
                .fetch_one(pool)
                .await
                .expect("tenant"),
        );
    }

    sqlx::query(&format!(
        "CREATE UNLOGGED TABLE bench_topics AS
         SELECT g AS id, (SELECT array_agg((random() - 0.5)::real) FROM generate_series(1, {})
                          WHERE g > 0) AS v
         FROM generate_series(1, {TOPICS}) g",
        model.dims
    ))
    .execute(pool)
    .await
    .expect("topics");
    let index = format!("chunks_embedding_m{}", model.id);
    let definition: String = sqlx::query_scalar("SELECT pg_get_indexdef($1::regclass)")
        .bind(&index)
        .fetch_one(pool)
        .await
        .expect("the model's index");
    sqlx::query(&format!("DROP INDEX {index}"))
        .execute(pool)
        .await
        .expect("drop");

    let t = Instant::now();
    seed(pool, alice.0, alice.1, &model, big).await;
    for (tenant, user) in &others {
        seed(pool, *tenant, *user, &model, small).await;
    }
    sqlx::query("VACUUM ANALYZE chunks")
        .execute(pool)
        .await
        .expect("vacuum");
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM chunks")
        .fetch_one(pool)
        .await
        .expect("count");
    println!(
        "search: {total} chunks in {TENANTS} tenants (acme {big}, nine others {small} each), inserted in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET maintenance_work_mem = '4GB'")
        .execute(&mut *conn)
        .await
        .expect("memory");
    let t = Instant::now();
    sqlx::query(&definition)
        .execute(&mut *conn)
        .await
        .expect("index");
    drop(conn);
    let (table, index_size, database): (i64, i64, i64) = sqlx::query_as(&format!(
        "SELECT pg_total_relation_size('chunks') - pg_relation_size('{index}'),
                pg_relation_size('{index}'), pg_database_size(current_database())"
    ))
    .fetch_one(pool)
    .await
    .expect("sizes");
    let mb = |b: i64| b as f64 / 1_048_576.0;
    println!(
        "HNSW index (m 16, ef_construction 64, maintenance_work_mem 4GB) built in {:.0} s: {:.0} MB; chunks with their other indexes {:.0} MB; database {:.0} MB",
        t.elapsed().as_secs_f64(),
        mb(index_size),
        mb(table),
        mb(database)
    );

    // Queries near a topic, as a question near its passages is.
    let queries: Vec<Vec<f32>> = sqlx::query_scalar(&format!(
        "SELECT (SELECT array_agg(t.x + 0.3 * (random() - 0.5) ORDER BY t.i)
                 FROM bench_topics b, unnest(b.v) WITH ORDINALITY t(x, i)
                 WHERE b.id = 1 + (g * 104729) % {TOPICS})::real[]
         FROM generate_series(1, {QUERIES}) g"
    ))
    .fetch_all(pool)
    .await
    .expect("queries");

    let client = bench.login("alice@acme.test").await;
    for (name, tenant, email) in [
        ("large tenant (acme)", alice.0, "alice@acme.test"),
        ("small tenant (globex)", others[0].0, "bob@globex.test"),
    ] {
        let mut lat = Vec::new();
        for q in &queries {
            let mut tx = pool.begin().await.expect("tx");
            let t = Instant::now();
            docflow::search::nearest(&mut tx, &model, tenant, q, 40)
                .await
                .expect("nearest");
            lat.push(t.elapsed());
            tx.rollback().await.expect("rollback");
        }
        let mut recall = 0usize;
        for q in queries.iter().take(RECALL_QUERIES) {
            let mut tx = pool.begin().await.expect("tx");
            let found = docflow::search::nearest(&mut tx, &model, tenant, q, 40)
                .await
                .expect("nearest");
            tx.rollback().await.expect("rollback");
            // Exact: every one of the tenant's vectors compared (no index
            // may answer the ORDER BY).
            let mut tx = pool.begin().await.expect("tx");
            sqlx::query("SET LOCAL enable_indexscan = off")
                .execute(&mut *tx)
                .await
                .expect("exact");
            let exact: Vec<i32> = sqlx::query_scalar(&format!(
                "SELECT chunk_index FROM chunks WHERE tenant_id = $1 AND model_id = $3
                 ORDER BY embedding::vector({dims}) <=> $2::vector({dims}) LIMIT 10",
                dims = model.dims
            ))
            .bind(tenant)
            .bind(docflow::search::pgvector_literal(q))
            .bind(model.id)
            .fetch_all(&mut *tx)
            .await
            .expect("exact scan");
            tx.rollback().await.expect("rollback");
            recall += found
                .iter()
                .take(10)
                .filter(|(_, c, _)| exact.contains(c))
                .count();
        }
        println!(
            "  {name}: vector query {}, recall@10 {:.3} against an exact scan ({RECALL_QUERIES} queries)",
            quantiles(lat),
            recall as f64 / (RECALL_QUERIES * 10) as f64
        );
        let who = if email == "alice@acme.test" {
            client.clone()
        } else {
            bench.login(email).await
        };
        let mut lat = Vec::new();
        let mut found = 0;
        for i in 0..QUERIES {
            let q = format!("w{} w{} topic", 1 + i * 37 % 5_000, 1 + i * 91 % 5_000);
            let t = Instant::now();
            let r = who
                .get(format!("{}/api/search", bench.base))
                .query(&[("q", q.as_str()), ("k", "10")])
                .send()
                .await
                .expect("search");
            assert_eq!(r.status(), 200);
            let hits: Vec<serde_json::Value> = r.json().await.expect("hits");
            lat.push(t.elapsed());
            found += hits.len();
        }
        println!(
            "  {name}: GET /api/search (k 10) {}, {:.1} hits a query",
            quantiles(lat),
            found as f64 / QUERIES as f64
        );
    }
    bench.stop().await;
}
