//! `parse`: the original file → plain text in the blob store.

use crate::{
    blob,
    pipeline::{StepCtx, StepError},
    upload::Kind,
};

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let bytes = ctx.deps.blobs.get(&ctx.job.blob_key).await?;
    let kind = Kind::from_mime(&ctx.job.content_type).ok_or_else(|| {
        StepError::Permanent(format!("unsupported content type {}", ctx.job.content_type))
    })?;
    let (text, pages) = tokio::task::spawn_blocking(move || extract_text(kind, &bytes))
        .await
        .map_err(|e| StepError::Permanent(format!("the parser crashed on this file: {e}")))??;
    if text.trim().is_empty() {
        return Err(StepError::Permanent("the document contains no text".into()));
    }
    let key = blob::text_key(ctx.job.document_id);
    // Written before the checkpoint; a rerun overwrites it with the same text.
    ctx.deps.blobs.put(&key, text.into_bytes().into()).await?;
    let mut tx = ctx.begin().await?;
    sqlx::query(
        "UPDATE documents SET text_blob_key = $2, pages = coalesce($3, pages) WHERE id = $1",
    )
    .bind(ctx.job.document_id)
    .bind(&key)
    .bind(pages.map(|p| p as i32))
    .execute(&mut *tx)
    .await?;
    ctx.checkpoint(&mut tx).await?;
    let ev = ctx.event(&mut tx, None, "parse done").await?;
    tx.commit().await?;
    ctx.deps.events.send(ev);
    Ok(())
}

/// Text and (for PDFs) page count of a document. Corrupt, encrypted or
/// unreadable files are permanent errors: retrying cannot help.
pub fn extract_text(kind: Kind, bytes: &[u8]) -> Result<(String, Option<u32>), StepError> {
    match kind {
        Kind::Pdf => {
            let doc = lopdf::Document::load_mem(bytes)
                .map_err(|e| StepError::Permanent(format!("the PDF could not be read: {e}")))?;
            if doc.is_encrypted() {
                return Err(StepError::Permanent("the PDF is encrypted".into()));
            }
            let pages = doc.get_pages().len() as u32;
            // pdf-extract panics on some malformed files; treat that as corrupt.
            let bytes = bytes.to_vec();
            let text = std::panic::catch_unwind(move || pdf_extract::extract_text_from_mem(&bytes))
                .map_err(|_| StepError::Permanent("the PDF's text could not be extracted".into()))?
                .map_err(|e| {
                    StepError::Permanent(format!("the PDF's text could not be extracted: {e}"))
                })?;
            Ok((text, Some(pages)))
        }
        Kind::Text => Ok((utf8(bytes)?, None)),
        Kind::Markdown => Ok((markdown_text(&utf8(bytes)?), None)),
        Kind::Html => Ok((nanohtml2text::html2text(&utf8(bytes)?), None)),
    }
}

fn utf8(bytes: &[u8]) -> Result<String, StepError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| StepError::Permanent("the file is not valid UTF-8 text".into()))
}

/// The readable text of Markdown: headings and paragraphs on their own lines.
fn markdown_text(md: &str) -> String {
    use pulldown_cmark::{Event, Parser, TagEnd};
    let mut out = String::with_capacity(md.len());
    for ev in Parser::new(md) {
        match ev {
            Event::Text(t) | Event::Code(t) => out.push_str(&t),
            Event::SoftBreak => out.push(' '),
            Event::HardBreak => out.push('\n'),
            Event::End(
                TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::Item | TagEnd::CodeBlock,
            ) => out.push_str("\n\n"),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_html_become_plain_text() {
        let (md, _) =
            extract_text(Kind::Markdown, b"# Title\n\nSome *emphasis* and `code`.").expect("md");
        assert!(
            md.contains("Title") && md.contains("Some emphasis and code."),
            "{md}"
        );
        assert!(!md.contains('#') && !md.contains('*'));
        let (html, _) = extract_text(
            Kind::Html,
            b"<html><body><h1>Head</h1><p>Body <b>bold</b></p><script>x()</script></body></html>",
        )
        .expect("html");
        assert!(
            html.contains("Head") && html.contains("Body bold"),
            "{html}"
        );
        assert!(!html.contains('<'));
    }

    #[test]
    fn a_corrupt_pdf_is_a_permanent_error() {
        let err = extract_text(Kind::Pdf, b"%PDF-1.7\nthis is not a pdf").expect_err("corrupt");
        assert!(
            matches!(err, StepError::Permanent(ref m) if m.contains("PDF")),
            "{err:?}"
        );
    }
}
