//! `parse`: the original file → plain text in the blob store (the upload
//! itself when it already is that text), in a parser child (see
//! [`crate::parser`]); the document's pages are counted here, and
//! a long document is handed over to the `slow` queue.

use app::dto::FailureCode;

use crate::{
    jobs::{machine, Tier},
    parser::{Kind, ParseError},
    pipeline::{StepCtx, StepError},
    platform::blob,
};

use super::Next;

pub async fn run(ctx: &StepCtx<'_>) -> Result<Next, StepError> {
    let bytes = ctx.deps.blobs.get(&ctx.job.blob_key).await?;
    let kind = Kind::from_mime(&ctx.job.content_type).ok_or_else(|| {
        StepError::Permanent(
            FailureCode::UnsupportedType,
            format!("unsupported content type {}", ctx.job.content_type),
        )
    })?;
    let parsed = ctx
        .deps
        .parser
        .parse(kind, &bytes)
        .await
        .map_err(|e| match e {
            ParseError::Rejected(r) => StepError::Permanent(r.code, r.message),
            ParseError::Unsafe(m) => StepError::Permanent(FailureCode::Unsafe, m),
            ParseError::Unavailable(m) => StepError::Transient(m),
        })?;
    let (key, text) = if parsed.text.as_bytes() == bytes.as_ref() {
        // A UTF-8 text file is its own text: the checkpoint names the
        // upload, and no copy is written (a new file costs the worker more
        // than the rest of the step).
        (ctx.job.blob_key.clone(), bytes)
    } else {
        drop(bytes);
        let key = blob::text_key(ctx.job.document_id);
        // Written before the checkpoint; a rerun overwrites it with the same text.
        let text = bytes::Bytes::from(parsed.text.into_bytes());
        ctx.deps.blobs.put(&key, text.clone()).await?;
        (key, text)
    };
    let pages = parsed.pages.map(|p| i32::try_from(p).unwrap_or(i32::MAX));
    let long = parsed
        .pages
        .filter(|p| *p > ctx.deps.config.slow_pages && ctx.job.queue != Tier::Slow);
    let next = match long {
        Some(pages_long) => {
            let mut tx = ctx.begin().await?;
            sqlx::query!(
                "UPDATE documents SET text_blob_key = $2, pages = $3 WHERE id = $1",
                ctx.job.document_id,
                &key,
                pages as _
            )
            .execute(&mut *tx)
            .await?;
            ctx.checkpoint(&mut tx).await?;
            let done = ctx.event(&mut tx, None, "parse done").await?;
            let why = format!("{pages_long} pages (over {})", ctx.deps.config.slow_pages);
            let moved =
                machine::hand_over(&mut tx, ctx.job.id, &ctx.deps.worker_id, Tier::Slow, &why)
                    .await?
                    .ok_or(StepError::LeaseLost)?;
            tx.commit().await?;
            ctx.deps.events.send_all(vec![done, moved]);
            Next::HandedOver
        }
        None => {
            let output = machine::Output::Text { key, pages };
            ctx.finish(None, "parse done", output).await?;
            Next::Continue
        }
    };
    if next == Next::Continue {
        ctx.carry().text = Some(text);
    }
    Ok(next)
}
