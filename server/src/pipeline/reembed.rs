//! Re-embedding after the deployment's embedding model changed.
//!
//! When the chosen model ([`super::vectors`]) is not the one the stored
//! vectors record, every worker process with the chosen model re-embeds
//! the documents holding earlier vectors, in the background:
//!
//! - **The run** (`reembed_run`, one row) names the model re-embedded to
//!   and the models it replaces. The first worker to see a new choice
//!   starts it; the documents holding earlier vectors are listed into
//!   `reembeds` then, and again every [`SWEEP_EVERY`] while it runs (a job
//!   that was embedding when the choice changed may have stored a few).
//! - **A document** is claimed under a lease (`FOR UPDATE SKIP LOCKED`),
//!   its chunks' text kept as it is, and its earlier vectors replaced batch
//!   by batch (`DOCFLOW_EMBED_BATCH`), each batch committed: a worker killed
//!   half-way leaves the batches it committed, and the next claim embeds
//!   only what is left. With a model that sizes chunks in its own word
//!   pieces (all-MiniLM-L6-v2), a document chunked otherwise is chunked
//!   again from its parsed text and swapped in whole ([`rechunk`]). Calls go through the worker's embedder, so its rate
//!   limit and circuit breaker hold for re-embedding too. A failure is
//!   retried after `DOCFLOW_RETRY_DELAYS`, a dependency that is down is
//!   waited for without spending a retry, and a document that fails them
//!   all is left `failed` (its earlier vectors still searched) for an
//!   admin to retry.
//! - **Priority**: each process re-embeds one document at a time, in a
//!   slot of its fast group taken as `normal` work: a paid tenant's job
//!   waiting for a slot gets it first, so it never waits behind
//!   re-embedding for more than the document in hand, and the worker never
//!   runs more than its concurrency.
//! - **The end**: once no document is left, the earlier models' HNSW
//!   indexes are dropped (concurrently) and the run is finished.
//!
//! Search meanwhile ranks each model's vectors with a query vector of that
//! model and fuses the rankings by rank ([`crate::search`]), so a document
//! is found by its new vectors once re-embedded and by its earlier ones
//! until then; scores of different models are never compared.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Deps, StepError};
use crate::{jobs::Tier, worker::slots::Slots};

/// How often an idle worker looks for re-embedding work.
pub const POLL: Duration = Duration::from_secs(2);
/// How often a running re-embedding lists documents holding earlier
/// vectors again.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// The earlier models whose vectors an unfinished run still has, for
/// search to rank with their own query vectors.
pub async fn earlier_models(pool: &PgPool) -> sqlx::Result<Vec<super::vectors::Model>> {
    let rows = sqlx::query!(
        "SELECT m.id, m.name, m.dims FROM reembed_run r
         JOIN embedding_models m ON m.id = ANY(r.from_models)
         WHERE r.finished_at IS NULL ORDER BY m.id"
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|m| super::vectors::Model {
            id: m.id,
            name: m.name,
            dims: usize::try_from(m.dims).unwrap_or(0),
        })
        .collect())
}

/// A worker process's re-embedder: one document at a time, in a slot of
/// `slots` taken as `tier`'s work, while this process's model is the
/// deployment's choice.
pub async fn run(deps: Deps, tier: Tier, slots: Arc<Slots>, shutdown: CancellationToken) {
    loop {
        let worked = tokio::select! {
            _ = shutdown.cancelled() => return,
            worked = turn(&deps, tier, &slots) => worked,
        };
        match worked {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "re-embedding: will try again"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// One turn: plans the run, then re-embeds one document. Whether there
/// was a document.
async fn turn(deps: &Deps, tier: Tier, slots: &Arc<Slots>) -> anyhow::Result<bool> {
    let model = &deps.model;
    if deps.choice.chosen().await? != Some(model.id) {
        return Ok(false);
    }
    let Some(run) = plan(&deps.pool, model.id).await? else {
        return Ok(false);
    };
    if run.paused || run.finished {
        return Ok(false);
    }
    let _slot = slots.acquire(tier).await;
    let Some((document, attempts)) = claim(deps).await? else {
        finish_if_complete(&deps.pool, &run).await?;
        return Ok(false);
    };
    let outcome = reembed(deps, document).await;
    settle(deps, document, attempts, outcome).await?;
    Ok(true)
}

struct Run {
    from: Vec<i16>,
    paused: bool,
    finished: bool,
}

/// Starts a run for `model` when the chosen model changed, and lists the
/// documents holding earlier vectors when due.
async fn plan(pool: &PgPool, model: i16) -> sqlx::Result<Option<Run>> {
    let read = || {
        sqlx::query!(
            r#"SELECT model_id, from_models, paused, finished_at IS NOT NULL AS "finished!",
                      swept_at IS NULL OR swept_at < now() - make_interval(secs => $1) AS "sweep_due!"
               FROM reembed_run"#,
            SWEEP_EVERY.as_secs_f64()
        )
        .fetch_optional(pool)
    };
    let mut row = read().await?;
    if row.as_ref().is_none_or(|r| r.model_id != model) {
        start(pool, model).await?;
        row = read().await?;
    }
    let Some(run) = row.filter(|r| r.model_id == model) else {
        return Ok(None);
    };
    if run.sweep_due && !run.finished && !run.from_models.is_empty() {
        sweep(pool, model, &run.from_models).await?;
    }
    Ok(Some(Run {
        from: run.from_models,
        paused: run.paused,
        finished: run.finished,
    }))
}

/// A new choice: a run for `model`, replacing the models with vectors
/// stored. Only the process whose statement changes the row starts it.
async fn start(pool: &PgPool, model: i16) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let started = sqlx::query!(
        "INSERT INTO reembed_run (model_id, from_models)
         SELECT $1, ARRAY(SELECT m.id FROM embedding_models m
                          WHERE m.id <> $1 AND EXISTS (SELECT 1 FROM chunks c WHERE c.model_id = m.id)
                          ORDER BY m.id)
         ON CONFLICT (only_row) DO UPDATE
             SET model_id = EXCLUDED.model_id, from_models = EXCLUDED.from_models,
                 started_at = now(), swept_at = NULL, finished_at = NULL
             WHERE reembed_run.model_id <> EXCLUDED.model_id",
        model
    )
    .execute(&mut *tx)
    .await?;
    if started.rows_affected() > 0 {
        // The last run's documents are history; a first model has none.
        sqlx::query!(
            "DELETE FROM reembeds WHERE state = 'done' OR model_id <> $1",
            model
        )
        .execute(&mut *tx)
        .await?;
    }
    let from = sqlx::query_scalar!("SELECT from_models FROM reembed_run")
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    if started.rows_affected() > 0 && from.is_some_and(|f| !f.is_empty()) {
        tracing::info!("re-embedding: the deployment's model changed, starting a run");
    }
    Ok(())
}

/// Lists the documents holding vectors of `from`, when due (the caller
/// read that it is); one process sweeps at a time (the conditional update
/// claims the sweep).
async fn sweep(pool: &PgPool, model: i16, from: &[i16]) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let due = sqlx::query!(
        "UPDATE reembed_run SET swept_at = now()
         WHERE swept_at IS NULL OR swept_at < now() - make_interval(secs => $1)",
        SWEEP_EVERY.as_secs_f64()
    )
    .execute(&mut *tx)
    .await?;
    if due.rows_affected() == 0 {
        return Ok(());
    }
    let listed = sqlx::query!(
        "INSERT INTO reembeds (document_id, tenant_id, model_id)
         SELECT DISTINCT c.document_id, c.tenant_id, $1::smallint
         FROM chunks c WHERE c.model_id = ANY($2::smallint[])
         ON CONFLICT (document_id) DO UPDATE
             SET state = 'pending', attempts = 0, due_at = now(), last_error = NULL,
                 finished_at = NULL, model_id = EXCLUDED.model_id
             WHERE reembeds.state = 'done' OR reembeds.model_id <> EXCLUDED.model_id",
        model,
        from
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    if listed.rows_affected() > 0 {
        tracing::info!(
            documents = listed.rows_affected(),
            "re-embedding: documents with vectors of an earlier model listed"
        );
    }
    Ok(())
}

/// Claims the next due document for this worker: the document and the
/// runs started on it, this one included.
async fn claim(deps: &Deps) -> sqlx::Result<Option<(Uuid, i32)>> {
    let claimed = sqlx::query!(
        "UPDATE reembeds SET lease_owner = $1, lease_until = now() + make_interval(secs => $2),
             attempts = attempts + 1
         WHERE document_id = (
             SELECT document_id FROM reembeds
             WHERE state = 'pending' AND due_at <= now() AND model_id = $3
               AND (lease_until IS NULL OR lease_until < now())
               AND NOT EXISTS (SELECT 1 FROM reembed_run WHERE paused)
             ORDER BY due_at, document_id
             LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING document_id, attempts",
        deps.worker_id.as_ref(),
        deps.config.lease.as_secs_f64().max(1.0),
        deps.model.id
    )
    .fetch_optional(&deps.pool)
    .await?;
    Ok(claimed.map(|c| (c.document_id, c.attempts)))
}

/// Replaces `document`'s earlier vectors batch by batch; the chunks
/// re-embedded.
async fn reembed(deps: &Deps, document: Uuid) -> Result<i32, StepError> {
    if let Some(stored) = rechunk(deps, document).await? {
        return Ok(stored);
    }
    let model = &deps.model;
    let rows: Vec<(i32, String)> = sqlx::query!(
        "SELECT chunk_index, text FROM chunks
         WHERE document_id = $1 AND model_id IS NOT NULL AND model_id <> $2
         ORDER BY chunk_index",
        document,
        model.id
    )
    .map(|c| (c.chunk_index, c.text))
    .fetch_all(&deps.pool)
    .await?;
    let batch = usize::from(deps.config.embed_batch.max(1));
    let dim = i32::try_from(model.dims).unwrap_or(i32::MAX);
    let mut stored = 0;
    for part in rows.chunks(batch) {
        let (indexes, texts): (Vec<i32>, Vec<String>) = part.iter().cloned().unzip();
        let vectors =
            super::embedder::checked(deps.embedder.embed(&texts).await?, texts.len(), model.dims)?;
        let flat: Vec<f32> = vectors.concat();
        // Stored only while this worker holds the document, and the lease
        // renewed with each batch.
        let written = sqlx::query_scalar!(
            r#"WITH held AS (
                 UPDATE reembeds SET lease_until = now() + make_interval(secs => $6)
                 WHERE document_id = $1 AND lease_owner = $5 AND state = 'pending'
                 RETURNING document_id),
             stored AS (
                 UPDATE chunks c SET embedding = (($3::real[])[(v.n - 1) * $4 + 1 : v.n * $4])::vector,
                     model_id = $7
                 FROM unnest($2::int[]) WITH ORDINALITY AS v(i, n), held
                 WHERE c.document_id = held.document_id AND c.chunk_index = v.i
                   AND c.model_id IS NOT NULL AND c.model_id <> $7
                 RETURNING 1)
             SELECT (SELECT count(*) FROM stored)::int AS "count!" FROM held"#,
            document,
            &indexes,
            &flat,
            i64::from(dim),
            deps.worker_id.as_ref(),
            deps.config.lease.as_secs_f64().max(1.0),
            model.id
        )
        .fetch_optional(&deps.pool)
        .await?;
        stored += written.ok_or(StepError::LeaseLost)?;
    }
    Ok(stored)
}

/// With a model that sizes chunks in its own word pieces, a document
/// chunked otherwise (in characters for the local model, or for another
/// tokenizer) is chunked again from its parsed text, so that the model
/// reads every chunk to its end. The new chunks are embedded in memory
/// (the lease renewed with each batch) and swapped in with their vectors in
/// one transaction: search finds the document by its earlier chunks until
/// then, by the new ones after. A kill before the swap repeats the
/// document. `None` when its chunks stay as they are (the model has no
/// tokenizer, a chunk already has the model's vector, the chunking is the
/// same, or the parsed text is gone).
async fn rechunk(deps: &Deps, document: Uuid) -> Result<Option<i32>, StepError> {
    let model = &deps.model;
    if deps.embedder.tokenizer().is_none() {
        return Ok(None);
    }
    let (key, current, started) = sqlx::query!(
        r#"SELECT d.text_blob_key,
                  ARRAY(SELECT c.text FROM chunks c WHERE c.document_id = d.id ORDER BY c.chunk_index)
                      AS "texts!",
                  EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id AND c.model_id = $2)
                      AS "started!"
           FROM documents d WHERE d.id = $1"#,
        document,
        model.id
    )
    .map(|d| (d.text_blob_key, d.texts, d.started))
    .fetch_optional(&deps.pool)
    .await?
    .unwrap_or((None, Vec::new(), true));
    if started {
        return Ok(None);
    }
    let key = key.unwrap_or_else(|| crate::platform::blob::text_key(document));
    let text = match deps.blobs.get(&key).await {
        Ok(bytes) => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => text,
            Err(_) => return Ok(None),
        },
        Err(e) => {
            tracing::info!(%document, error = %e, "re-embedding without re-chunking: the parsed text is not there");
            return Ok(None);
        }
    };
    let (texts, pages) = super::steps::chunk_for(deps.embedder.clone(), text).await?;
    if texts.is_empty() || texts == current {
        return Ok(None);
    }
    let batch = usize::from(deps.config.embed_batch.max(1));
    let mut flat: Vec<f32> = Vec::with_capacity(texts.len() * model.dims);
    for part in texts.chunks(batch) {
        let vectors =
            super::embedder::checked(deps.embedder.embed(part).await?, part.len(), model.dims)?;
        flat.extend(vectors.into_iter().flatten());
        renew(deps, document).await?;
    }
    let dim = i32::try_from(model.dims).unwrap_or(i32::MAX);
    let mut tx = deps.pool.begin().await?;
    let tenant = sqlx::query_scalar!(
        "SELECT tenant_id FROM reembeds WHERE document_id = $1 AND lease_owner = $2 AND state = 'pending'
         FOR UPDATE",
        document,
        deps.worker_id.as_ref()
    )
    .fetch_optional(&mut *tx)
    .await?;
    let tenant = tenant.ok_or(StepError::LeaseLost)?;
    sqlx::query!("DELETE FROM chunks WHERE document_id = $1", document)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "INSERT INTO chunks (document_id, tenant_id, chunk_index, text, page, embedding, model_id)
         SELECT $1, $2, c.n - 1, c.t, ($4::int[])[c.n],
                (($5::real[])[(c.n - 1) * $6 + 1 : c.n * $6])::vector, $7
         FROM unnest($3::text[]) WITH ORDINALITY AS c(t, n)",
        document,
        tenant,
        &texts,
        pages.as_deref(),
        &flat,
        i64::from(dim),
        model.id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(i32::try_from(texts.len()).unwrap_or(i32::MAX)))
}

/// Renews this worker's lease on `document`.
async fn renew(deps: &Deps, document: Uuid) -> Result<(), StepError> {
    let held = sqlx::query!(
        "UPDATE reembeds SET lease_until = now() + make_interval(secs => $3)
         WHERE document_id = $1 AND lease_owner = $2 AND state = 'pending'",
        document,
        deps.worker_id.as_ref(),
        deps.config.lease.as_secs_f64().max(1.0)
    )
    .execute(&deps.pool)
    .await?;
    if held.rows_affected() == 0 {
        return Err(StepError::LeaseLost);
    }
    Ok(())
}

/// Records how a document's run (its `attempts`-th) ended.
async fn settle(
    deps: &Deps,
    document: Uuid,
    attempts: i32,
    outcome: Result<i32, StepError>,
) -> sqlx::Result<()> {
    let worker = deps.worker_id.as_ref();
    match outcome {
        Ok(chunks) => {
            sqlx::query!(
                "UPDATE reembeds SET state = 'done', finished_at = now(), chunks = chunks + $3,
                     lease_owner = NULL, lease_until = NULL, last_error = NULL
                 WHERE document_id = $1 AND lease_owner = $2",
                document,
                worker,
                chunks
            )
            .execute(&deps.pool)
            .await?;
        }
        Err(StepError::LeaseLost | StepError::Cancelled) => {}
        Err(StepError::Unavailable { until, message, .. }) => {
            // A dependency down: wait for it, spending no retry.
            sqlx::query!(
                "UPDATE reembeds SET due_at = $3, attempts = greatest(attempts - 1, 0), last_error = $4,
                     lease_owner = NULL, lease_until = NULL
                 WHERE document_id = $1 AND lease_owner = $2",
                document,
                worker,
                until as _,
                message
            )
            .execute(&deps.pool)
            .await?;
        }
        Err(e) => {
            let delays = &deps.config.retry_delays.0;
            let next = match &e {
                StepError::Permanent(..) => None,
                StepError::RetryAfter(wait, _) => Some(*wait),
                _ => usize::try_from(attempts - 1)
                    .ok()
                    .and_then(|n| delays.get(n))
                    .map(|d| d.mul_f64(rand::Rng::gen_range(&mut rand::thread_rng(), 0.8..1.2))),
            };
            let message = e.to_string();
            match next {
                Some(wait) => {
                    tracing::info!(%document, error = %message, "re-embedding a document failed; will retry");
                    sqlx::query!(
                        "UPDATE reembeds SET due_at = now() + make_interval(secs => $3), last_error = $4,
                             lease_owner = NULL, lease_until = NULL
                         WHERE document_id = $1 AND lease_owner = $2",
                        document,
                        worker,
                        wait.as_secs_f64(),
                        message
                    )
                    .execute(&deps.pool)
                    .await?;
                }
                None => {
                    tracing::warn!(%document, error = %message, "re-embedding a document failed for good");
                    sqlx::query!(
                        "UPDATE reembeds SET state = 'failed', finished_at = now(), last_error = $3,
                             lease_owner = NULL, lease_until = NULL
                         WHERE document_id = $1 AND lease_owner = $2",
                        document,
                        worker,
                        message
                    )
                    .execute(&deps.pool)
                    .await?;
                }
            }
        }
    }
    Ok(())
}

/// Ends the run once no document is left and no earlier vector remains:
/// the earlier models' indexes are dropped.
async fn finish_if_complete(pool: &PgPool, run: &Run) -> anyhow::Result<()> {
    let left = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM reembeds WHERE state <> 'done')
               OR EXISTS (SELECT 1 FROM chunks WHERE model_id = ANY($1::smallint[])) AS "left!""#,
        &run.from
    )
    .fetch_one(pool)
    .await?;
    if left {
        return Ok(());
    }
    for model in &run.from {
        super::vectors::drop_index(pool, *model).await?;
    }
    let finished = sqlx::query!(
        "UPDATE reembed_run SET finished_at = now() WHERE finished_at IS NULL AND from_models = $1",
        &run.from
    )
    .execute(pool)
    .await?;
    if finished.rows_affected() > 0 && !run.from.is_empty() {
        tracing::info!("re-embedding finished: the earlier models' vectors and indexes are gone");
    }
    Ok(())
}
