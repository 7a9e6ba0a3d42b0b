//! The embedding model's yardstick: the same model at the same precision
//! (float32) in Python onnxruntime, from the ONNX graph built from the same
//! weights (`scripts/reference/`), run on given texts by
//! `scripts/reference/throughput.py`. `EMBED_REFERENCE_PYTHON` names the
//! Python that has onnxruntime (default `/tmp/minilm-ref/bin/python`, made
//! as `scripts/reference/README.md` says).

use std::{path::PathBuf, process::Command};

/// What the reference made of the texts.
pub struct Reference {
    pub chunks_per_s: f64,
    pub cpu_ms_per_chunk: f64,
    /// One per text, in order.
    pub vectors: Vec<Vec<f32>>,
}

/// The Python with onnxruntime, when there is one; says so when there is
/// none.
pub fn python() -> Option<String> {
    let python = std::env::var("EMBED_REFERENCE_PYTHON")
        .unwrap_or_else(|_| "/tmp/minilm-ref/bin/python".into());
    if std::path::Path::new(&python).exists() {
        Some(python)
    } else {
        println!("  (no reference: {python} not found; see scripts/reference/README.md)");
        None
    }
}

/// `texts` embedded by the reference in `python` (from [`python`]) on
/// `threads` threads in batches of `batch`.
pub fn run(python: &str, texts: &[String], threads: usize, batch: usize) -> Reference {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (input, output) = (
        dir.join("reference-texts.json"),
        dir.join("reference-vectors.json"),
    );
    std::fs::write(&input, serde_json::to_vec(texts).expect("json")).expect("texts file");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/reference/throughput.py"
    );
    let run = Command::new(python)
        .arg(script)
        .arg(&input)
        .args(["--threads", &threads.to_string()])
        .args(["--batch", &batch.to_string()])
        .arg("--vectors")
        .arg(&output)
        .output()
        .expect("the reference runs");
    assert!(
        run.status.success(),
        "the reference failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let line = String::from_utf8_lossy(&run.stdout);
    let result: serde_json::Value =
        serde_json::from_str(line.lines().last().unwrap_or("")).expect("the reference's JSON line");
    let vectors = serde_json::from_slice(&std::fs::read(&output).expect("reference vectors"))
        .expect("vectors");
    Reference {
        chunks_per_s: result["chunks_per_s"].as_f64().unwrap_or(0.0),
        cpu_ms_per_chunk: result["cpu_ms_per_chunk"].as_f64().unwrap_or(0.0),
        vectors,
    }
}

/// The smallest cosine between two lists of unit vectors, pair by pair.
pub fn min_cosine(ours: &[Vec<f32>], theirs: &[Vec<f32>]) -> f32 {
    ours.iter()
        .zip(theirs)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())
        .fold(f32::MAX, f32::min)
}
