//! `embed`: vectors for every chunk, in batches of `DOCFLOW_EMBED_BATCH`.
//! Each batch is committed when it returns, so the step resumes after the
//! last committed batch: a crash repeats at most one batch of calls.

use crate::pipeline::{StepCtx, StepError};

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let batch = i64::from(ctx.deps.config.embed_batch.max(1));
    let total: i32 = sqlx::query_scalar("SELECT count(*)::int FROM chunks WHERE document_id = $1")
        .bind(ctx.job.document_id)
        .fetch_one(&ctx.deps.pool)
        .await?;
    loop {
        ctx.check_cancel()?;
        // The cursor is the data itself: chunks still without a vector.
        let rows: Vec<(i32, String)> = sqlx::query_as(
            "SELECT chunk_index, text FROM chunks WHERE document_id = $1 AND embedding IS NULL ORDER BY chunk_index LIMIT $2",
        )
        .bind(ctx.job.document_id)
        .bind(batch)
        .fetch_all(&ctx.deps.pool)
        .await?;
        if rows.is_empty() {
            break;
        }
        let (indexes, texts): (Vec<i32>, Vec<String>) = rows.into_iter().unzip();
        let vectors = ctx.deps.embedder.embed(&texts).await?;
        let mut tx = ctx.begin().await?;
        for (i, v) in indexes.iter().zip(&vectors) {
            sqlx::query(
                "UPDATE chunks SET embedding = $3 WHERE document_id = $1 AND chunk_index = $2",
            )
            .bind(ctx.job.document_id)
            .bind(i)
            .bind(v)
            .execute(&mut *tx)
            .await?;
        }
        let done =
            crate::jobs::machine::count_embedded(&mut tx, ctx.job.id, ctx.job.document_id).await?;
        let ev = ctx
            .event(
                &mut tx,
                Some((done, total)),
                &format!("embed {done}/{total}"),
            )
            .await?;
        tx.commit().await?;
        ctx.deps.events.send(ev);
    }
    let mut tx = ctx.begin().await?;
    ctx.checkpoint(&mut tx).await?;
    let ev = ctx
        .event(&mut tx, Some((total, total)), "embed done")
        .await?;
    tx.commit().await?;
    ctx.deps.events.send(ev);
    Ok(())
}
