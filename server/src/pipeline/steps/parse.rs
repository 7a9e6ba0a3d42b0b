//! `parse`: the original file → plain text in the blob store (the upload
//! itself when it already is that text), in a parser child (see
//! [`crate::parser`]); the document's pages are counted here, reported as
//! they are read (a long PDF, a scan recognised page by page), and a long
//! document is handed over to the `slow` queue.

use app::dto::FailureCode;

use crate::{
    jobs::{machine, Tier},
    parser::{Kind, ParseError, Progress},
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
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel::<Progress>();
    let parsing = async {
        let report = report;
        let parsed = ctx
            .deps
            .parser
            .parse_reporting(kind, &bytes, &|p| {
                let _ = report.send(p);
            })
            .await;
        drop(report);
        parsed
    };
    // The child sends a few reports per document (every twentieth of its
    // pages, or one a second): each is recorded as it comes.
    let recording = async {
        while let Some(p) = reports.recv().await {
            ctx.carry().progressed_at = Some(tokio::time::Instant::now());
            if let Err(e) = record_progress(ctx, p).await {
                tracing::warn!(job = %ctx.job.id, error = %e, "parse progress not recorded");
            }
        }
    };
    let (parsed, ()) = tokio::join!(parsing, recording);
    let parsed = parsed.map_err(|e| match e {
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
    let message = match recognised(&parsed.ocr) {
        Some(ocr) => format!("parse done; {ocr} recognised by OCR"),
        None => "parse done".to_string(),
    };
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
            machine::pages_parsed(
                &mut tx,
                ctx.job.id,
                &ctx.deps.worker_id,
                pages.unwrap_or(0),
                pages.unwrap_or(0),
            )
            .await?
            .ok_or(StepError::LeaseLost)?;
            let done = ctx.event(&mut tx, None, &message).await?;
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
            ctx.finish(None, &message, output).await?;
            Next::Continue
        }
    };
    if next == Next::Continue {
        ctx.carry().text = Some(text);
    }
    Ok(next)
}

/// Records `p` as the job's pages parsed and as a job event
/// (`parse 120/300 pages`), while this worker holds the job.
async fn record_progress(ctx: &StepCtx<'_>, p: Progress) -> Result<(), StepError> {
    let done = i32::try_from(p.done).unwrap_or(i32::MAX);
    let total = i32::try_from(p.total).unwrap_or(i32::MAX);
    let mut tx = ctx.begin().await?;
    machine::pages_parsed(&mut tx, ctx.job.id, &ctx.deps.worker_id, done, total)
        .await?
        .ok_or(StepError::LeaseLost)?;
    let message = format!("parse {done}/{total} pages");
    let event = ctx.event(&mut tx, Some((done, total)), &message).await?;
    tx.commit().await?;
    ctx.deps.events.send(event);
    Ok(())
}

/// The pages recognised by OCR, in words: "page 4", "pages 3–9, 12".
fn recognised(ranges: &[(u32, u32)]) -> Option<String> {
    let pages: u32 = ranges.iter().map(|(a, b)| b.saturating_sub(*a) + 1).sum();
    let list = ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    match pages {
        0 => None,
        1 => Some(format!("page {list}")),
        _ => Some(format!("pages {list}")),
    }
}

#[cfg(test)]
mod tests {
    use super::recognised;

    #[test]
    fn ocr_pages_are_told_as_ranges() {
        assert_eq!(recognised(&[]), None);
        assert_eq!(recognised(&[(4, 4)]).as_deref(), Some("page 4"));
        assert_eq!(
            recognised(&[(3, 9), (12, 12)]).as_deref(),
            Some("pages 3–9, 12")
        );
    }
}
