//! `chunk`: text → overlapping chunks, upserted by `(document_id,
//! chunk_index)`. With a model that reads a limited number of word pieces
//! (all-MiniLM-L6-v2: 254 besides [CLS] and [SEP]) chunks are sized in the
//! model's own word pieces, so that it reads every chunk to its end;
//! otherwise in characters (about 500 tokens, ≈ 2,000 characters).

use app::dto::FailureCode;
use text_splitter::{ChunkConfig, ChunkSizer, TextSplitter};
use tokenizers::Tokenizer;

use crate::{
    jobs::machine,
    pipeline::{Pending, StepCtx, StepError},
    platform::blob,
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

/// How chunks are measured.
#[derive(Clone, Copy)]
pub enum Sizing<'a> {
    /// In characters: [`CHUNK_CHARS`], [`OVERLAP_CHARS`] shared.
    Chars,
    /// In the model's word pieces: at most `max` (a quarter less at least),
    /// an eighth of it shared.
    Tokens {
        tokenizer: &'a Tokenizer,
        max: usize,
    },
}

/// A tokenizer as the splitter's measure: word pieces without the special
/// tokens. A text the tokenizer cannot read counts as one piece per byte
/// (an overestimate, so the chunk still fits).
struct WordPieces<'a>(&'a Tokenizer);

impl ChunkSizer for WordPieces<'_> {
    fn size(&self, chunk: &str) -> usize {
        self.0
            .encode_fast(chunk, false)
            .map_or(chunk.len(), |e| e.len())
    }
}

/// Splits text at the largest semantic boundary that fits. Each chunk is a
/// slice of `text` (so its place in it is known), trimmed.
pub fn split<'t>(text: &'t str, sizing: Sizing<'_>) -> Vec<&'t str> {
    match sizing {
        Sizing::Chars => {
            let config = ChunkConfig::new(CHUNK_CHARS)
                .with_overlap(OVERLAP_CHARS)
                .expect("overlap is smaller than the chunk size");
            let splitter = TextSplitter::new(config);
            // A block that fits one chunk is that chunk, as the splitter
            // would make it (trimmed); asking the splitter costs a
            // segmenter pass.
            split_blocks(
                text,
                |b| b.len() <= CHUNK_CHARS.end,
                |b| splitter.chunks(b).collect(),
            )
        }
        Sizing::Tokens { tokenizer, max } => {
            let max = max.max(8);
            let sizer = WordPieces(tokenizer);
            let config = ChunkConfig::new(max - max / 4..max)
                .with_overlap(max / 8)
                .expect("overlap is smaller than the chunk size")
                .with_sizer(WordPieces(tokenizer));
            let splitter = TextSplitter::new(config);
            // A word piece is at least one byte: a block of at most `max`
            // bytes fits without counting.
            split_blocks(
                text,
                |b| b.len() <= max || (b.len() <= RUN_BYTES && sizer.size(b) <= max),
                |b| splitter.chunks(b).collect(),
            )
        }
    }
}

/// The chunks of each block of `text`: the block itself (trimmed) where
/// `fits`, else what `split` makes of it.
fn split_blocks<'t>(
    text: &'t str,
    fits: impl Fn(&str) -> bool,
    split: impl Fn(&'t str) -> Vec<&'t str>,
) -> Vec<&'t str> {
    let mut chunks = Vec::new();
    for block in blocks(text, BLOCK_BYTES, RUN_BYTES) {
        let trimmed = block.trim();
        if trimmed.is_empty() {
            continue;
        }
        if fits(trimmed) {
            chunks.push(trimmed);
        } else {
            chunks.extend(split(block));
        }
    }
    chunks
}

/// Between the pages of a PDF's text (see `parser::extract`).
pub const PAGE_BREAK: char = '\u{c}';

/// The page each chunk of `text` starts on, from 1, when `text` has page
/// breaks; `chunks` are slices of `text` in order.
fn pages_of(text: &str, chunks: &[&str]) -> Option<Vec<i32>> {
    if !text.contains(PAGE_BREAK) {
        return None;
    }
    let base = text.as_ptr() as usize;
    let (mut page, mut seen) = (1i32, 0usize);
    let mut pages = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        let start = (chunk.as_ptr() as usize)
            .saturating_sub(base)
            .min(text.len());
        // Chunks overlap but never start before the one before them.
        if start > seen {
            let between = text.get(seen..start).unwrap_or("");
            page = page.saturating_add(
                i32::try_from(between.matches(PAGE_BREAK).count()).unwrap_or(i32::MAX),
            );
            seen = start;
        }
        pages.push(page);
    }
    Some(pages)
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

/// `text`'s chunks as `embedder` wants them sized (see [`Sizing`]), page
/// breaks made line breaks, with the page each starts on when `text` has
/// pages. Off the async runtime when `text` is large.
pub async fn chunk_for(
    embedder: std::sync::Arc<dyn crate::pipeline::embedder::Embedder>,
    text: String,
) -> Result<(Vec<String>, Option<Vec<i32>>), StepError> {
    crate::pipeline::cpu_bound(text.len(), move || {
        let sizing = match embedder.tokenizer() {
            Some((tokenizer, max)) => Sizing::Tokens { tokenizer, max },
            None => Sizing::Chars,
        };
        let chunks = split(&text, sizing);
        let pages = pages_of(&text, &chunks);
        let texts: Vec<String> = chunks
            .into_iter()
            .map(|c| c.replace(PAGE_BREAK, "\n"))
            .collect();
        (texts, pages)
    })
    .await
    .map_err(|e| StepError::Transient(format!("chunking failed: {e}")))
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
    let text = String::from_utf8(text.to_vec()).map_err(|_| {
        StepError::Permanent(FailureCode::NotUtf8, "parsed text is not UTF-8".into())
    })?;
    let (chunks, pages) = chunk_for(ctx.deps.embedder.clone(), text).await?;
    if chunks.is_empty() {
        return Err(StepError::Permanent(
            FailureCode::NoText,
            "the document contains no text".into(),
        ));
    }
    let n = i32::try_from(chunks.len()).unwrap_or(i32::MAX);
    let texts: std::sync::Arc<[String]> = chunks.into();
    let output = machine::Output::Chunks {
        texts: texts.clone(),
        pages: pages.map(Into::into),
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
        let chunks = split(&text, Sizing::Chars);
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
        assert_eq!(split("short", Sizing::Chars), vec!["short"]);
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
        let chunks = split(&line, Sizing::Chars);
        assert!(chunks.iter().all(|c| c.chars().count() <= CHUNK_CHARS.end));
        // Each piece of the line is one chunk: every word once, in order.
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words(&chunks.join(" ")), words(&line));
    }

    /// The model's tokenizer, as the embedder gives it.
    fn tokenizer() -> Tokenizer {
        let dir = crate::pipeline::minilm::default_dir();
        crate::pipeline::minilm::MiniLm::load_tokenizer(&dir).unwrap_or_else(|e| panic!("{e:#}"))
    }

    #[test]
    fn chunks_sized_in_word_pieces_fit_the_model_and_lose_nothing() {
        let tokenizer = tokenizer();
        let max = 254;
        let sizing = Sizing::Tokens {
            tokenizer: &tokenizer,
            max,
        };
        // Prose, numbers (many word pieces per character) and a line with
        // no sentence end at all.
        let prose = (0..40)
            .map(|i| {
                format!(
                    "Paragraph {i}. {}",
                    "The tugboat hums at dawn near the pier. ".repeat(12)
                )
            })
            .collect::<Vec<_>>()
            .join("\n\n");
        let numbers = (0..3_000)
            .map(|i| format!("{}", i * 7919))
            .collect::<Vec<_>>()
            .join(", ");
        let line = "lorem ipsum dolor sit amet consectetur ".repeat(3_000);
        for text in [&prose, &numbers, &line] {
            let chunks = split(text, sizing);
            let pieces = |c: &str| tokenizer.encode(c, false).expect("tokenizes").len();
            assert!(chunks.len() > 1);
            for c in &chunks {
                assert!(pieces(c) <= max, "{} word pieces: {c:.80}", pieces(c));
            }
            // Overlap repeats words but loses none, and keeps their order.
            let words: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
                .collect();
            let mut at = 0;
            for c in &chunks {
                for w in c
                    .split(|c: char| c.is_whitespace() || c == ',')
                    .filter(|w| !w.is_empty())
                {
                    if words.get(at) == Some(&w) {
                        at += 1;
                    }
                }
            }
            assert!(
                at >= words.len() * 99 / 100,
                "{at} of {} words in order",
                words.len()
            );
        }
        for i in 0..40 {
            let p = format!("Paragraph {i}.");
            assert!(
                split(&prose, sizing).iter().any(|c| c.contains(&p)),
                "{p} lost"
            );
        }
    }

    #[test]
    fn each_chunk_names_the_page_it_starts_on() {
        // Every sentence names its page; a chunk's first sentence is on the
        // page the chunk is said to start on.
        let pages: Vec<String> = (1..=5)
            .map(|p| {
                (0..40)
                    .map(|i| format!("On page {p} sits sentence {i}."))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let text = pages.join("\n\n\u{c}");
        let chunks = split(&text, Sizing::Chars);
        let numbers = pages_of(&text, &chunks).expect("pages");
        assert_eq!(numbers.len(), chunks.len());
        assert!(chunks.len() >= 5);
        for (chunk, page) in chunks.iter().zip(&numbers) {
            let first: i32 = chunk
                .split("On page ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("a sentence");
            let starts_whole = chunk.starts_with("On page ");
            assert!(
                first == *page || (!starts_whole && first == page + 1),
                "chunk said to start on page {page}: {chunk:.60}"
            );
        }
        assert_eq!(numbers.first(), Some(&1));
        assert_eq!(numbers.last(), Some(&5));
        assert_eq!(pages_of("no breaks", &["no breaks"]), None);
    }
}
