//! The embedding model's own cost: `EMBED_CHUNKS` chunks (default 512) of
//! prose, cut by docflow's chunker in the model's word pieces (about 250
//! each, as documents are), embedded by docflow's all-MiniLM-L6-v2 with 1
//! thread and with 2, in the batches the pipeline uses (32 chunks a call,
//! 8 a forward pass). Chunks per second and CPU milliseconds per chunk
//! (this process's, from `getrusage`).
//!
//! Beside it, the same texts through the reference (`common::reference`:
//! the same model at the same precision in Python onnxruntime) with the
//! same threads and batch size, and the two sets of vectors compared
//! (cosine); without the reference's Python only docflow's numbers are
//! printed.
//! Run: `cargo bench -p server --bench benches embed`.

use crate::common;

use std::time::Instant;

use docflow::pipeline::{
    minilm::{self, MiniLm},
    steps::{split, Sizing},
};
use nix::sys::resource::{getrusage, UsageWho};

/// CPU seconds this process has used.
fn cpu_s() -> f64 {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

/// Prose on many subjects, in paragraphs.
fn prose(paragraphs: usize) -> String {
    let subjects = [
        "the harbour office",
        "a tugboat crew",
        "the quarterly budget",
        "engine maintenance",
        "the night train",
        "a bakery's ovens",
        "the city council",
        "river flooding",
    ];
    (0..paragraphs)
        .map(|p| {
            (0..6)
                .map(|s| {
                    format!(
                        "In report {p}, section {s}, {} reviewed what changed since the last inspection and noted {} open items for the coming weeks.",
                        subjects[(p + s) % subjects.len()],
                        (p * 7 + s * 3) % 19 + 1
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

pub fn main() {
    let n: usize = std::env::var("EMBED_CHUNKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let dir = minilm::default_dir();
    let tokenizer = MiniLm::load_tokenizer(&dir).expect("the model (scripts/fetch-model.sh)");
    let text = prose(n * 2);
    let sizing = Sizing::Tokens {
        tokenizer: &tokenizer,
        max: minilm::MAX_TOKENS - 2,
    };
    let chunks: Vec<String> = split(&text, sizing)
        .into_iter()
        .take(n)
        .map(str::to_string)
        .collect();
    assert_eq!(chunks.len(), n, "not enough prose for {n} chunks");
    let pieces: usize = chunks
        .iter()
        .map(|c| tokenizer.encode(c.as_str(), true).map_or(0, |e| e.len()))
        .sum();
    println!(
        "embed: {n} chunks of {:.0} word pieces on average, all-MiniLM-L6-v2 float32, 32 chunks a call",
        pieces as f64 / n as f64
    );

    let python = common::reference::python();
    for threads in [1, 2] {
        let model = MiniLm::load(&dir, threads).expect("the model");
        // Warm up: the first call pays for page faults and thread start.
        model.embed(&chunks[..8]).expect("warm-up");
        let (t, c) = (Instant::now(), cpu_s());
        let mut vectors = Vec::with_capacity(n);
        for batch in chunks.chunks(32) {
            vectors.extend(model.embed(batch).expect("embedding"));
        }
        let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_s() - c);
        println!(
            "  docflow, {threads} thread(s): {:.1} chunks/s, {:.1} ms CPU per chunk ({wall:.1} s)",
            n as f64 / wall,
            cpu * 1e3 / n as f64
        );
        let Some(python) = &python else {
            continue;
        };
        let theirs = common::reference::run(python, &chunks, threads, 8);
        println!(
            "  reference (onnxruntime), {threads} thread(s): {:.1} chunks/s, {:.1} ms CPU per chunk; docflow/reference {:.2}x; vectors agree to cosine ≥ {:.5}",
            theirs.chunks_per_s,
            theirs.cpu_ms_per_chunk,
            n as f64 / wall / theirs.chunks_per_s,
            common::reference::min_cosine(&vectors, &theirs.vectors)
        );
    }
}
