//! docflow's benchmarks, in one binary: `cargo bench -p server --bench
//! benches NAME` runs the bench NAME (each module's own documentation says
//! what it measures and how it is sized); without a name it lists them.
//! One binary rather than one per bench: every build, the test command's
//! included, links the server and its dependencies once for all of them.

mod chunk;
mod common;
mod drain;
mod embed;
mod login_flood;
mod parse;
mod pipeline;
mod reembed;
mod scale;
mod search;
mod soak;
mod sse;
mod test_setup;
mod upload;

// Test helpers some benches share with the integration tests.
#[path = "../tests/api/mock_embedder.rs"]
mod mock_embedder;
#[path = "../tests/api/office_files.rs"]
#[allow(dead_code)]
mod office_files;
#[path = "../tests/api/sample_pdf.rs"]
mod sample_pdf;
#[path = "../tests/api/scans.rs"]
#[allow(dead_code)]
mod scans;
#[path = "../tests/api/services.rs"]
mod services;

/// Every bench by name, with what it measures in a few words.
const BENCHES: &[(&str, fn(), &str)] = &[
    (
        "chunk",
        chunk::main,
        "the chunker's split, by characters and by word pieces",
    ),
    (
        "drain",
        drain::main,
        "queued documents drained by workers: jobs/s, cost per job",
    ),
    (
        "embed",
        embed::main,
        "the embedding model beside its onnxruntime reference",
    ),
    (
        "login_flood",
        login_flood::main,
        "a web process's memory under a flood of bad logins",
    ),
    ("parse", parse::main, "parse throughput by document shape"),
    (
        "pipeline",
        pipeline::main,
        "2,000 documents through the pipeline in one process",
    ),
    (
        "reembed",
        reembed::main,
        "re-embedding every chunk for a new model",
    ),
    (
        "scale",
        scale::main,
        "reads with 1,000,000 jobs: /metrics, stats, /admin",
    ),
    (
        "search",
        search::main,
        "search over 1,000,000 chunks among ten tenants",
    ),
    (
        "soak",
        soak::main,
        "workers killed at random: jobs lost or run twice",
    ),
    (
        "sse",
        sse::main,
        "1,000 event-stream clients: delivery latency, memory",
    ),
    (
        "test_setup",
        test_setup::main,
        "what an integration test's set-up costs",
    ),
    (
        "upload",
        upload::main,
        "uploads: 202 latency, commits and CPU per upload",
    ),
];

fn main() {
    // `cargo bench` adds `--bench`; a bench's own flags start with `--` too.
    let name = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    match name
        .as_deref()
        .and_then(|n| BENCHES.iter().find(|(b, ..)| *b == n))
    {
        Some((_, run, _)) => run(),
        None => {
            if let Some(n) = &name {
                eprintln!("no bench named {n:?}");
            }
            eprintln!("usage: cargo bench -p server --bench benches NAME, NAME one of:");
            for (bench, _, what) in BENCHES {
                eprintln!("  {bench:<12} {what}");
            }
            std::process::exit(2);
        }
    }
}
