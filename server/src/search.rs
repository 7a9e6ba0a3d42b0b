//! Search over a tenant's indexed chunks: embed the query with the same
//! embedder as the documents and rank by cosine similarity (exact, in Rust;
//! fine for the number of chunks one tenant has).

use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::pipeline::embedder::cosine;
use crate::state::AppState;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Hit {
    pub document_id: Uuid,
    pub filename: String,
    pub chunk_index: i32,
    pub text: String,
    pub score: f32,
}

#[derive(sqlx::FromRow)]
struct Candidate {
    document_id: Uuid,
    filename: String,
    chunk_index: i32,
    text: String,
    embedding: Vec<f32>,
}

/// The `k` best chunks of `tenant_id`'s indexed documents for `query`.
pub async fn search(
    state: &AppState,
    tenant_id: Uuid,
    query: &str,
    k: usize,
) -> Result<Vec<Hit>, SearchError> {
    let q = state
        .embedder
        .embed(&[query.to_string()])
        .await
        .map_err(|e| {
            // The provider's address and answer are for the logs only.
            tracing::warn!(error = %e, "embedding a search query failed");
            SearchError::Embed
        })?;
    let q = q.into_iter().next().unwrap_or_default();
    rank(&state.pool, tenant_id, &q, k)
        .await
        .map_err(SearchError::Db)
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The embedder could not embed the query (details are logged, never
    /// shown: they may name the provider's address or repeat its answer).
    #[error("search is unavailable right now: the embedding provider did not answer; try again in a moment")]
    Embed,
    /// Reading the chunks failed.
    #[error(transparent)]
    Db(sqlx::Error),
}

async fn rank(pool: &PgPool, tenant_id: Uuid, q: &[f32], k: usize) -> sqlx::Result<Vec<Hit>> {
    let rows: Vec<Candidate> = sqlx::query_as(
        "SELECT c.document_id, d.filename, c.chunk_index, c.text, c.embedding
         FROM chunks c JOIN documents d ON d.id = c.document_id
         WHERE c.tenant_id = $1 AND d.indexed_at IS NOT NULL AND c.embedding IS NOT NULL",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    let mut hits: Vec<Hit> = rows
        .into_iter()
        .map(|c| Hit {
            score: cosine(q, &c.embedding),
            document_id: c.document_id,
            filename: c.filename,
            chunk_index: c.chunk_index,
            text: c.text,
        })
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    Ok(hits)
}
