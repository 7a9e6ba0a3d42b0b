//! `store`: makes the document's chunks searchable and marks it indexed;
//! its commit makes the job `done`.

use crate::{
    jobs::machine,
    pipeline::{StepCtx, StepError},
};

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    // Checked unless `embed` just stored every vector in this run.
    let known_complete = ctx.carry().all_embedded;
    let missing: i64 = if known_complete {
        0
    } else {
        sqlx::query_scalar!(
            r#"SELECT count(*) AS "missing!" FROM chunks WHERE document_id = $1 AND embedding IS NULL"#,
            ctx.job.document_id
        )
        .fetch_one(&ctx.deps.pool)
        .await?
    };
    if missing > 0 {
        return Err(StepError::Transient(format!(
            "{missing} chunks have no embedding yet"
        )));
    }
    ctx.finish(None, "store done", machine::Output::Indexed)
        .await
}
