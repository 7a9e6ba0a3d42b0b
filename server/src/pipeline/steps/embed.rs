//! `embed`: vectors for every chunk, in batches of `DOCFLOW_EMBED_BATCH`.
//! Each batch is committed when it returns, so the step resumes after the
//! last committed batch: a crash repeats at most one batch of calls. The
//! last batch's commit is also the step's checkpoint. Chunks come from
//! `chunk` in memory when it ran in this run, else from the table. An
//! embedder that calls out starts only once the chunks are durable.

use crate::{
    jobs::machine,
    pipeline::{Pending, StepCtx, StepError},
};

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let batch = usize::from(ctx.deps.config.embed_batch.max(1));
    let carried = ctx.carry().chunks.take();
    let (pending, total) = match carried {
        Some(chunks) => {
            let total = i32::try_from(chunks.texts.len()).unwrap_or(i32::MAX);
            (chunks, total)
        }
        None => unembedded(ctx).await?,
    };
    if pending.texts.is_empty() {
        // Every vector was committed by an earlier run.
        let mut tx = ctx.begin().await?;
        let done = count(ctx, &mut tx).await?;
        let events = ctx
            .complete(
                &mut *tx,
                Some((done, total)),
                "embed done",
                &machine::Output::None,
            )
            .await?;
        tx.commit().await?;
        ctx.deps.events.send_all(events);
        return Ok(());
    }
    chosen(ctx).await?;
    if ctx.deps.embedder.calls_out() {
        // An outside service is paid only for chunks that are durable, by
        // a worker whose claim is.
        ctx.durable().await?;
    }
    let mut batches = pending
        .indexes
        .chunks(batch)
        .zip(pending.texts.chunks(batch))
        .peekable();
    while let Some((indexes, texts)) = batches.next() {
        ctx.check_cancel()?;
        let model = &ctx.deps.model;
        let dim = model.dims;
        let vectors = crate::pipeline::embedder::checked(
            ctx.deps.embedder.embed(texts).await?,
            indexes.len(),
            dim,
        )?;
        let flat: Vec<f32> = vectors.concat();
        let dim = i32::try_from(dim).unwrap_or(i32::MAX);
        if batches.peek().is_none() {
            // The last batch: its commit is the step's checkpoint, and
            // afterwards every chunk has its vector.
            let output = machine::Output::Vectors {
                indexes: indexes.to_vec(),
                flat,
                dim,
                model_id: model.id,
            };
            let message = format!("embed {total}/{total} done");
            ctx.finish(Some((total, total)), &message, output).await?;
        } else {
            let mut tx = ctx.begin().await?;
            let done = machine::store_vectors(
                &mut tx,
                ctx.job,
                &ctx.deps.worker_id,
                indexes,
                &flat,
                dim,
                model.id,
            )
            .await?
            .ok_or(StepError::LeaseLost)?;
            let message = format!("embed {done}/{total}");
            let event = ctx.event(&mut tx, Some((done, total)), &message).await?;
            tx.commit().await?;
            ctx.deps.events.send(event);
        }
    }
    ctx.carry().all_embedded = true;
    Ok(())
}

/// Fails with [`StepError::Unavailable`] unless this worker's model is the
/// deployment's choice (settings of an earlier deploy): the job then waits,
/// without spending its retries, for a worker with the chosen model.
async fn chosen(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let model = &ctx.deps.model;
    match ctx.deps.choice.chosen().await? {
        Some(id) if id != model.id => Err(StepError::Unavailable {
            dependency: "embedder",
            until: chrono::Utc::now() + WAIT_FOR_CHOSEN,
            message: format!(
                "this worker embeds with {}, which the deployment no longer stores; \
                 a worker with the chosen model takes the job",
                model.name
            ),
        }),
        _ => Ok(()),
    }
}

/// How long a job waits for a worker with the deployment's model.
const WAIT_FOR_CHOSEN: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The chunks still without a vector (the cursor is the data itself), and
/// how many chunks the document has, in one statement: one row per
/// unembedded chunk in key order (sorted once), or one row without a chunk
/// when every vector is committed.
async fn unembedded(ctx: &StepCtx<'_>) -> Result<(Pending, i32), StepError> {
    let rows: Vec<(i32, Option<i32>, Option<String>)> = sqlx::query!(
        r#"SELECT t.total AS "total!", c.chunk_index AS "chunk_index?", c.text AS "text?"
           FROM (SELECT count(*)::int AS total FROM chunks WHERE document_id = $1) t
           LEFT JOIN LATERAL (
               SELECT chunk_index, text FROM chunks
               WHERE document_id = $1 AND embedding IS NULL
               ORDER BY chunk_index
           ) c ON true"#,
        ctx.job.document_id
    )
    .map(|r| (r.total, r.chunk_index, r.text))
    .fetch_all(&ctx.deps.pool)
    .await?;
    let total = rows.first().map_or(0, |(total, _, _)| *total);
    let (indexes, texts): (Vec<i32>, Vec<String>) = rows
        .into_iter()
        .filter_map(|(_, index, text)| index.zip(text))
        .unzip();
    Ok((
        Pending {
            indexes,
            texts: texts.into(),
        },
        total,
    ))
}

/// The embedded count, guarded by the lease.
async fn count(ctx: &StepCtx<'_>, tx: &mut sqlx::PgConnection) -> Result<i32, StepError> {
    machine::count_embedded(tx, ctx.job.id, ctx.job.document_id, &ctx.deps.worker_id)
        .await?
        .ok_or(StepError::LeaseLost)
}
