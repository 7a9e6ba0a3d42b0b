//! `store`: makes the document's chunks searchable and marks it indexed;
//! its commit makes the job `done`.

use crate::pipeline::{StepCtx, StepError};

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let mut tx = ctx.begin().await?;
    // Checked unless `embed` just stored every vector in this run.
    let known_complete = ctx.carry().all_embedded;
    let missing: i64 = if known_complete {
        0
    } else {
        sqlx::query_scalar(
            "SELECT count(*) FROM chunks WHERE document_id = $1 AND embedding IS NULL",
        )
        .bind(ctx.job.document_id)
        .fetch_one(&mut *tx)
        .await?
    };
    if missing > 0 {
        return Err(StepError::Transient(format!(
            "{missing} chunks have no embedding yet"
        )));
    }
    sqlx::query("UPDATE documents SET indexed_at = now() WHERE id = $1")
        .bind(ctx.job.document_id)
        .execute(&mut *tx)
        .await?;
    let events = ctx.complete(&mut tx, None, "store done").await?;
    tx.commit().await?;
    ctx.deps.events.send_all(events);
    Ok(())
}
