//! `chunk`: text → overlapping chunks of about 500 tokens (≈ 2,000
//! characters), upserted by `(document_id, chunk_index)`.

use text_splitter::{ChunkConfig, TextSplitter};

use crate::pipeline::{StepCtx, StepError};

/// Characters per chunk (about 4 per token).
pub const CHUNK_CHARS: std::ops::Range<usize> = 1_600..2_000;
/// Characters shared by neighbouring chunks.
pub const OVERLAP_CHARS: usize = 200;

/// Longest piece of text the splitter sees at once.
///
/// `text-splitter` looks, for every chunk, for the next boundary of each
/// fallback level in all the text that remains; in a run with no sentence
/// boundary (a CSV export, a log, minified HTML) that search reads to the
/// end of the text each time, so splitting is quadratic in the run's length
/// (563 s for a 20 MB line). Cutting the text into blocks first bounds every
/// such search by the block: the work is linear in the text, whatever its
/// shape. Blocks end at a paragraph break where the text has one, so prose
/// is chunked as before.
pub const BLOCK_BYTES: usize = 32 * 1024;

/// Splits text at the largest semantic boundary that fits.
pub fn split(text: &str) -> Vec<String> {
    let config = ChunkConfig::new(CHUNK_CHARS)
        .with_overlap(OVERLAP_CHARS)
        .expect("overlap is smaller than the chunk size");
    let splitter = TextSplitter::new(config);
    blocks(text, BLOCK_BYTES)
        .flat_map(|block| splitter.chunks(block))
        .map(str::to_string)
        .collect()
}

/// `text` in consecutive blocks of at most `max` bytes (or one character,
/// when a character is longer), each ending at the strongest boundary in its
/// second half: a paragraph break, a line break, a sentence end, a space, or
/// else anywhere between characters.
fn blocks(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        if rest.len() <= max {
            return Some(std::mem::take(&mut rest));
        }
        let mut limit = max;
        while !rest.is_char_boundary(limit) {
            limit -= 1;
        }
        if limit == 0 {
            limit = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let window = &rest[..limit];
        let cut = ["\n\n", "\n", ". ", " "]
            .iter()
            .find_map(|sep| {
                window
                    .rfind(sep)
                    .map(|i| i + sep.len())
                    .filter(|end| *end > limit / 2)
            })
            .unwrap_or(limit);
        let (block, tail) = rest.split_at(cut);
        rest = tail;
        Some(block)
    })
}

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    let key = sqlx::query_scalar::<_, Option<String>>(
        "SELECT text_blob_key FROM documents WHERE id = $1",
    )
    .bind(ctx.job.document_id)
    .fetch_one(&ctx.deps.pool)
    .await?
    .ok_or_else(|| StepError::Transient("parse left no text (checkpoint without output)".into()))?;
    let text = ctx.deps.blobs.get(&key).await?;
    let text = String::from_utf8(text.to_vec())
        .map_err(|_| StepError::Permanent("parsed text is not UTF-8".into()))?;
    let chunks = tokio::task::spawn_blocking(move || split(&text))
        .await
        .map_err(|e| StepError::Transient(format!("chunking failed: {e}")))?;
    if chunks.is_empty() {
        return Err(StepError::Permanent("the document contains no text".into()));
    }
    let n = chunks.len() as i32;
    let indexes: Vec<i32> = (0..n).collect();
    let mut tx = ctx.begin().await?;
    sqlx::query(
        "INSERT INTO chunks (document_id, tenant_id, chunk_index, text)
         SELECT $1, $2, i, t FROM unnest($3::int[], $4::text[]) AS c(i, t)
         ON CONFLICT (document_id, chunk_index) DO UPDATE SET text = EXCLUDED.text, embedding = NULL",
    )
    .bind(ctx.job.document_id)
    .bind(ctx.job.tenant_id)
    .bind(&indexes)
    .bind(&chunks)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM chunks WHERE document_id = $1 AND chunk_index >= $2")
        .bind(ctx.job.document_id)
        .bind(n)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE jobs SET chunks_total = $2, chunks_embedded = 0 WHERE id = $1")
        .bind(ctx.job.id)
        .bind(n)
        .execute(&mut *tx)
        .await?;
    ctx.checkpoint(&mut tx).await?;
    let ev = ctx
        .event(&mut tx, Some((0, n)), &format!("chunk done: {n} chunks"))
        .await?;
    tx.commit().await?;
    ctx.deps.events.send(ev);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_within_the_size_limit() {
        let para = "Sentence number one of the paragraph. ".repeat(30);
        let text = (0..10)
            .map(|i| format!("Paragraph {i}. {para}"))
            .collect::<Vec<_>>()
            .join("\n\n");
        let chunks = split(&text);
        assert!(chunks.len() >= 6, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.chars().count() <= CHUNK_CHARS.end));
        for i in 0..10 {
            assert!(
                chunks
                    .iter()
                    .any(|c| c.contains(&format!("Paragraph {i}."))),
                "paragraph {i} lost"
            );
        }
        assert_eq!(split("short"), vec!["short".to_string()]);
    }

    #[test]
    fn blocks_cover_the_text_and_end_at_the_strongest_boundary() {
        let text = format!("{}\n\n{}", "a".repeat(700), "word ".repeat(300));
        let parts: Vec<&str> = blocks(&text, 1_000).collect();
        assert_eq!(parts.concat(), text, "nothing lost or repeated");
        assert!(parts[0].ends_with("\n\n"), "{:?}", &parts[0][690..]);
        assert!(parts.iter().all(|p| p.len() <= 1_000));
        // No boundary at all: cut between characters, never inside one.
        let dense = "é".repeat(1_000);
        let parts: Vec<&str> = blocks(&dense, 101).collect();
        assert_eq!(parts.concat(), dense);
        assert!(parts.iter().all(|p| p.len() <= 101));
    }

    #[test]
    fn a_line_without_sentence_ends_is_chunked_within_the_size_limit() {
        let line = "lorem ipsum dolor sit amet consectetur ".repeat(5_000);
        let chunks = split(&line);
        assert!(chunks.iter().all(|c| c.chars().count() <= CHUNK_CHARS.end));
        let covered: usize = chunks.iter().map(|c| c.len()).sum();
        assert!(covered >= line.trim().len(), "{covered} of {}", line.len());
    }
}
