//! The chunk step's splitting cost by the shape of the text: 20 MB of prose
//! against 20 MB of one line without a sentence end (a CSV export, a log,
//! minified HTML). With `--unblocked` it also times `text-splitter` fed the
//! whole text at once (docflow before it cut text into blocks) on shorter
//! lines, to show the quadratic growth that the blocks remove. Chunks are
//! sized in characters (the `local` and `openai` embedders) and, when the
//! model is in place (`scripts/fetch-model.sh`), in all-MiniLM-L6-v2's word
//! pieces (the default embedder).
//! Run: `cargo bench -p server --bench benches chunk [-- --unblocked]`.

use std::time::{Duration, Instant};

use docflow::pipeline::{
    minilm,
    steps::{split, Sizing, CHUNK_CHARS, OVERLAP_CHARS},
};
use text_splitter::{ChunkConfig, TextSplitter};

const SIZE: usize = 20_000_000;
const RUNS: usize = 3;

fn prose(size: usize) -> String {
    let mut text = String::with_capacity(size + 200);
    let mut i = 0;
    while text.len() < size {
        text.push_str(&format!(
            "Paragraph {i} explains how the ledger is balanced. It names the accounts involved, the dates, and who signs off. Nothing in it is unusual.\n\n"
        ));
        i += 1;
    }
    text
}

fn one_line(size: usize) -> String {
    let unit = "2026-12-01,acme,ledger,balance,4711,ok,signed,by,alice ";
    unit.repeat(size / unit.len() + 1)
}

fn time(f: impl Fn() -> usize) -> (Duration, usize) {
    let mut best = Duration::MAX;
    let mut chunks = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        chunks = f();
        best = best.min(t.elapsed());
    }
    (best, chunks)
}

pub fn main() {
    let unblocked = std::env::args().any(|a| a == "--unblocked");
    println!("chunk: docflow's split, best of {RUNS} runs");
    let tokenizer = minilm::MiniLm::load_tokenizer(&minilm::default_dir());
    let mut sizings = vec![("characters", Sizing::Chars, SIZE)];
    match &tokenizer {
        // Word pieces cost a tokenizer pass per candidate chunk: a tenth of
        // the text is enough to see the rate.
        Ok(t) => sizings.push((
            "word pieces",
            Sizing::Tokens {
                tokenizer: t,
                max: minilm::MAX_TOKENS - 2,
            },
            SIZE / 10,
        )),
        Err(e) => println!("  (no word-piece sizing: {e:#})"),
    }
    for (sizing_name, sizing, size) in sizings {
        println!(" sized in {sizing_name}:");
        let mut results = Vec::new();
        for (name, text) in [("prose", prose(size)), ("one line", one_line(size))] {
            let (took, chunks) = time(|| split(&text, sizing).len());
            println!(
                "  {name:>8}: {:.1} MB in {:>7.0} ms, {chunks} chunks, {:.1} MB/s",
                text.len() as f64 / 1e6,
                took.as_secs_f64() * 1e3,
                text.len() as f64 / 1e6 / took.as_secs_f64()
            );
            results.push(took);
        }
        println!(
            "  one line / prose: {:.2}x",
            results[1].as_secs_f64() / results[0].as_secs_f64()
        );
    }
    if unblocked {
        let config = ChunkConfig::new(CHUNK_CHARS)
            .with_overlap(OVERLAP_CHARS)
            .expect("overlap is smaller than the chunk size");
        let splitter = TextSplitter::new(config);
        println!("text-splitter on the whole text (before blocks), one line:");
        for size in [250_000, 500_000, 1_000_000] {
            let text = one_line(size);
            let t = Instant::now();
            let n = splitter.chunks(&text).count();
            println!(
                "  {:.2} MB: {:>7.0} ms, {n} chunks",
                text.len() as f64 / 1e6,
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}
