//! The embedding model whose vectors this deployment stores and searches.
//!
//! Every vector records its model (`chunks.model_id`, a row of
//! `embedding_models`), so vectors of different models never meet in one
//! ranking. Each model's vectors have an HNSW index of their own, partial
//! on the model and on the cast to its dimensions (`embedding` itself is an
//! untyped `vector`): [`register`] makes the configured model's row and
//! index at start, the index without blocking writes.
//!
//! The model the deployment stores is recorded once, in the database
//! (`embedding_choice`): the newest process to start records its own. During
//! a rolling deploy, processes with the old settings run beside the new ones;
//! their workers ask [`Choice`] before embedding and leave a job they may
//! not embed to a worker that may, and a trigger refuses a vector of any
//! other model whatever a stale worker does.

use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::{Connection, PgPool};

/// What an embedder's vectors are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Stable name (`all-minilm-l6-v2`, `docflow-local-hash`, or the
    /// provider's model name).
    pub name: String,
    pub dims: usize,
}

/// A registered model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub id: i16,
    pub name: String,
    pub dims: usize,
}

impl Model {
    /// The expression its HNSW index is built on; a query must use it
    /// verbatim, with [`Model::predicate`], for the index to serve it.
    pub fn vector_expr(&self) -> String {
        format!("embedding::vector({})", self.dims)
    }

    /// The index's partial predicate.
    pub fn predicate(&self) -> String {
        format!("model_id = {}", self.id)
    }

    fn index_name(&self) -> String {
        format!("chunks_embedding_m{}", self.id)
    }
}

/// Records `spec` (once; a name keeps its dimensions) and makes sure its
/// vectors have a valid HNSW index. Several processes may start at once:
/// the index is made under an advisory lock, concurrently, so writes go on.
pub async fn register(pool: &PgPool, spec: &ModelSpec) -> anyhow::Result<Model> {
    let dims = i32::try_from(spec.dims).context("vector dimensions")?;
    let (id, stored) = sqlx::query!(
        r#"WITH new AS (
             INSERT INTO embedding_models (name, dims) VALUES ($1, $2)
             ON CONFLICT (name) DO NOTHING RETURNING id, dims)
           SELECT id AS "id!", dims AS "dims!" FROM new
           UNION ALL SELECT id, dims FROM embedding_models WHERE name = $1"#,
        &spec.name,
        dims
    )
    .map(|m| (m.id, m.dims))
    .fetch_one(pool)
    .await
    .context("registering the embedding model")?;
    anyhow::ensure!(
        stored == dims,
        "the embedding model {:?} was recorded with {stored} dimensions, but the configured \
         one makes {dims}: give the model another name",
        spec.name
    );
    let model = Model {
        id,
        name: spec.name.clone(),
        dims: spec.dims,
    };
    ensure_index(pool, &model).await?;
    choose(pool, &model).await?;
    Ok(model)
}

/// Records `model` as the deployment's choice.
async fn choose(pool: &PgPool, model: &Model) -> anyhow::Result<()> {
    let before = sqlx::query_scalar!(
        r#"WITH before AS (SELECT m.name FROM embedding_choice c JOIN embedding_models m ON m.id = c.model_id),
              chosen AS (
                  INSERT INTO embedding_choice (model_id) VALUES ($1)
                  ON CONFLICT (only_row) DO UPDATE SET model_id = EXCLUDED.model_id, chosen_at = now()
                  WHERE embedding_choice.model_id <> EXCLUDED.model_id)
           SELECT name AS "name!" FROM before"#,
        model.id
    )
    .fetch_optional(pool)
    .await
    .context("recording the deployment's embedding model")?;
    match before {
        Some(before) if before != model.name => tracing::warn!(
            model = %model.name,
            before = %before,
            "the deployment's embedding model changed: from now on only this model's vectors are stored"
        ),
        None => tracing::info!(model = %model.name, "the deployment's embedding model"),
        Some(_) => {}
    }
    Ok(())
}

/// Whether this process's model is still the deployment's choice, read
/// again at most every [`Choice::FRESH`].
pub struct Choice {
    pool: PgPool,
    read: std::sync::Mutex<Option<(Instant, i16)>>,
}

impl Choice {
    /// How long an answer is trusted; the trigger guards the window.
    pub const FRESH: Duration = Duration::from_secs(5);

    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            read: std::sync::Mutex::new(None),
        }
    }

    /// The chosen model's id.
    pub async fn chosen(&self) -> sqlx::Result<Option<i16>> {
        if let Some((at, id)) = *self.read.lock().unwrap_or_else(|e| e.into_inner()) {
            if at.elapsed() < Self::FRESH {
                return Ok(Some(id));
            }
        }
        let id = sqlx::query_scalar!("SELECT model_id FROM embedding_choice")
            .fetch_optional(&self.pool)
            .await?;
        *self.read.lock().unwrap_or_else(|e| e.into_inner()) = id.map(|id| (Instant::now(), id));
        Ok(id)
    }
}

/// Drops the HNSW index of model `id`'s vectors, without blocking writes
/// (once none of its vectors is left).
pub async fn drop_index(pool: &PgPool, id: i16) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query(&format!(
        "DROP INDEX CONCURRENTLY IF EXISTS chunks_embedding_m{id}"
    ))
    .execute(&mut *conn)
    .await
    .with_context(|| format!("dropping the vector index of model {id}"))?;
    Ok(())
}

/// pgvector's HNSW index holds vectors of up to 2,000 dimensions.
const HNSW_MAX_DIMS: usize = 2_000;

async fn ensure_index(pool: &PgPool, model: &Model) -> anyhow::Result<()> {
    if model.dims > HNSW_MAX_DIMS {
        tracing::warn!(
            model = %model.name,
            dims = model.dims,
            "vectors of more than {HNSW_MAX_DIMS} dimensions get no index: searches scan them"
        );
        return Ok(());
    }
    let name = model.index_name();
    let valid = |name: &str| {
        sqlx::query_scalar!(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
            name
        )
    };
    if valid(&name).fetch_optional(pool).await? == Some(true) {
        return Ok(());
    }
    // CREATE INDEX CONCURRENTLY runs outside a transaction; the session
    // lock keeps a second process from building the same index meanwhile.
    let mut conn = pool.acquire().await?.detach();
    sqlx::query_scalar!("SELECT pg_advisory_lock(hashtext('docflow.vector_index'))")
        .fetch_one(&mut conn)
        .await?;
    let built = async {
        match valid(&name).fetch_optional(&mut conn).await? {
            Some(true) => return anyhow::Ok(()),
            // A build that died half-way leaves an invalid index behind.
            Some(false) => {
                sqlx::query(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                    .execute(&mut conn)
                    .await?;
            }
            None => {}
        }
        tracing::info!(model = %model.name, "building the vector index {name}");
        sqlx::query(&format!(
            "CREATE INDEX CONCURRENTLY {name} ON chunks USING hnsw (({}) vector_cosine_ops) WHERE {}",
            model.vector_expr(),
            model.predicate()
        ))
        .execute(&mut conn)
        .await?;
        Ok(())
    }
    .await;
    // Closing the connection releases the lock whatever happened.
    let _ = conn.close().await;
    built.with_context(|| format!("building the vector index {name}"))
}
