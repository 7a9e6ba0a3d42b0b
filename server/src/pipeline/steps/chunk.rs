//! `chunk`: text → overlapping chunks of about 500 tokens (≈ 2,000
//! characters), upserted by `(document_id, chunk_index)`.

use text_splitter::{ChunkConfig, TextSplitter};

use crate::{
    blob,
    jobs::machine,
    pipeline::{Pending, StepCtx, StepError},
};

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
/// (563 s for a 20 MB line). docflow therefore cuts the text itself first,
/// in one linear pass: into blocks of at most `BLOCK_BYTES` ending at the
/// strongest boundary (a paragraph break where there is one, so prose is
/// chunked as before), and a line longer than [`RUN_BYTES`] into pieces that
/// each fit one chunk, cut at a sentence end or a space. The splitter then
/// never searches further than one block.
pub const BLOCK_BYTES: usize = 32 * 1024;
/// Longest stretch without a line break handed to the splitter; longer
/// lines are cut into pieces of at most this many bytes, one chunk each.
pub const RUN_BYTES: usize = CHUNK_CHARS.end;

/// Splits text at the largest semantic boundary that fits.
pub fn split(text: &str) -> Vec<String> {
    let config = ChunkConfig::new(CHUNK_CHARS)
        .with_overlap(OVERLAP_CHARS)
        .expect("overlap is smaller than the chunk size");
    let splitter = TextSplitter::new(config);
    let mut chunks = Vec::new();
    for block in blocks(text, BLOCK_BYTES, RUN_BYTES) {
        // A block that fits one chunk is that chunk, as the splitter would
        // make it (trimmed); asking the splitter costs a segmenter pass.
        if block.len() <= CHUNK_CHARS.end {
            let trimmed = block.trim();
            if !trimmed.is_empty() {
                chunks.push(trimmed.to_string());
            }
        } else {
            chunks.extend(splitter.chunks(block).map(str::to_string));
        }
    }
    chunks
}

/// `text` in consecutive blocks (see [`BLOCK_BYTES`]), found in one pass.
fn blocks(text: &str, max: usize, run: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (block, tail) = rest.split_at(next_cut(rest, max, run));
        rest = tail;
        Some(block)
    })
}

/// Where the next block of `text` ends: at most `max` bytes in, and before
/// any stretch of more than `run` bytes without a line break gets longer.
/// The cut is at the strongest boundary in the second half of the block (or
/// of the run): paragraph break, line break, sentence end, space; else
/// between two characters. Always at least one character.
fn next_cut(text: &str, max: usize, run: usize) -> usize {
    let b = text.as_bytes();
    // End offsets of the last boundary of each strength seen so far.
    let (mut para, mut line, mut sentence, mut space) = (0, 0, 0, 0);
    let mut line_start = 0;
    for i in 0..b.len() {
        if i >= max {
            let half = max / 2;
            return [para, line, sentence, space]
                .into_iter()
                .find(|&end| end > half)
                .unwrap_or_else(|| char_floor(text, max));
        }
        if i - line_start >= run {
            let half = line_start + run / 2;
            return [sentence, space]
                .into_iter()
                .find(|&end| end > half)
                .unwrap_or_else(|| char_floor(text, i));
        }
        match b[i] {
            b'\n' => {
                if i > 0 && b[i - 1] == b'\n' {
                    para = i + 1;
                }
                line = i + 1;
                line_start = i + 1;
            }
            b' ' => {
                if i > 0 && matches!(b[i - 1], b'.' | b'!' | b'?' | b';' | b',') {
                    sentence = i + 1;
                }
                space = i + 1;
            }
            _ => {}
        }
    }
    b.len()
}

/// The largest character boundary at or below `at`, but past the first character.
fn char_floor(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    if at == 0 {
        text.chars().next().map_or(text.len(), char::len_utf8)
    } else {
        at
    }
}

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    // The text parse produced in this run, or its blob from an earlier one.
    let carried = ctx.carry().text.take();
    let text = match carried {
        Some(t) => t,
        None => {
            // The blob parse's checkpoint named: its own, or the upload.
            let key = ctx
                .job
                .text_blob_key
                .clone()
                .unwrap_or_else(|| blob::text_key(ctx.job.document_id));
            ctx.deps.blobs.get(&key).await?
        }
    };
    let text = String::from_utf8(text.to_vec())
        .map_err(|_| StepError::Permanent("parsed text is not UTF-8".into()))?;
    let chunks = crate::pipeline::cpu_bound(text.len(), move || split(&text))
        .await
        .map_err(|e| StepError::Transient(format!("chunking failed: {e}")))?;
    if chunks.is_empty() {
        return Err(StepError::Permanent("the document contains no text".into()));
    }
    let n = i32::try_from(chunks.len()).unwrap_or(i32::MAX);
    let texts: std::sync::Arc<[String]> = chunks.into();
    let output = machine::Output::Chunks {
        texts: texts.clone(),
    };
    ctx.finish(Some((0, n)), &format!("chunk done: {n} chunks"), output)
        .await?;
    ctx.carry().chunks = Some(Pending {
        indexes: (0..n).collect(),
        texts,
    });
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
        let parts: Vec<&str> = blocks(&text, 1_000, 2_000).collect();
        assert_eq!(parts.concat(), text, "nothing lost or repeated");
        assert!(parts[0].ends_with("\n\n"), "{:?}", &parts[0][690..]);
        assert!(parts.iter().all(|p| p.len() <= 1_000));
        // A long line is cut at a sentence end, else a space, within `run`.
        let line = "Short sentence here. ".repeat(50) + &"word ".repeat(400);
        let parts: Vec<&str> = blocks(&line, 100_000, 500).collect();
        assert_eq!(parts.concat(), line);
        assert!(parts.iter().all(|p| p.len() <= 500), "{parts:?}");
        assert!(parts[0].ends_with("here. "), "{:?}", parts[0]);
        assert!(parts.last().is_some_and(|p| p.ends_with("word ")));
        // No boundary at all: cut between characters, never inside one.
        let dense = "é".repeat(1_000);
        let parts: Vec<&str> = blocks(&dense, 101, 1_000).collect();
        assert_eq!(parts.concat(), dense);
        assert!(parts.iter().all(|p| p.len() <= 101));
        let parts: Vec<&str> = blocks(&dense, 10_000, 101).collect();
        assert_eq!(parts.concat(), dense);
        assert!(parts.iter().all(|p| p.len() <= 101));
    }

    #[test]
    fn a_line_without_sentence_ends_is_chunked_within_the_size_limit() {
        let line = "lorem ipsum dolor sit amet consectetur ".repeat(5_000);
        let chunks = split(&line);
        assert!(chunks.iter().all(|c| c.chars().count() <= CHUNK_CHARS.end));
        // Each piece of the line is one chunk: every word once, in order.
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&chunks.join(" ")), words(&line));
    }
}
