//! all-MiniLM-L6-v2, a sentence-embedding model, run in process on the CPU
//! with candle: word pieces from the model's own tokenizer, BERT, mean
//! pooling over the attention mask, L2 normalisation (what
//! sentence-transformers does for this model).
//!
//! The files come from `scripts/fetch-model.sh`. Inference runs in a rayon
//! pool of its own, so its thread count bounds the CPU it takes; calls
//! block (run them with `spawn_blocking`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// Dimensions of the model's vectors.
pub const DIMS: usize = 384;
/// Longest input the model reads, in word pieces with [CLS] and [SEP].
pub const MAX_TOKENS: usize = 256;
/// Directory name under DOCFLOW_MODEL_DIR.
pub const MODEL_NAME: &str = "all-minilm-l6-v2";

/// Texts run through the model together; each batch pads to its longest.
const BATCH: usize = 8;
/// What to do about missing or bad model files.
const FETCH_HINT: &str = "scripts/fetch-model.sh fetches the model: run it";

/// The loaded model: its weights, its tokenizer and the threads it runs on.
pub struct MiniLm {
    model: BertModel,
    /// Truncates at [`MAX_TOKENS`], never pads: what the model reads.
    truncating: Tokenizer,
    /// The same without truncation, for sizing chunks.
    tokenizer: Tokenizer,
    /// Where inference runs, candle's matrix products included.
    pool: rayon::ThreadPool,
}

// The embedder shares one model between tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<MiniLm>();
};

impl MiniLm {
    /// Loads model.safetensors, config.json, tokenizer.json from `dir`; clear anyhow errors naming the missing/bad file and saying to run scripts/fetch-model.sh.
    pub fn load(dir: &Path, threads: usize) -> anyhow::Result<Self> {
        let config: Config = serde_json::from_slice(&read(dir, "config.json")?)
            .with_context(|| bad(dir, "config.json"))?;
        if config.hidden_size != DIMS {
            bail!(
                "{} describes a model of {} dimensions, not {DIMS}; {FETCH_HINT}",
                dir.join("config.json").display(),
                config.hidden_size
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

        // Read into memory: a mapped file would need `unsafe`.
        let weights = read(dir, "model.safetensors")?;
        let model = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .and_then(|vb| BertModel::load(vb, &config))
            .with_context(|| bad(dir, "model.safetensors"))?;

        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("minilm-{i}"))
            .build()
            .context("starting the embedding model's threads")?;
        Ok(Self {
            model,
            truncating,
            tokenizer,
            pool,
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
        self.pool.install(|| {
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
                let batch_encodings: Vec<&Encoding> =
                    batch.iter().map(|&i| &encodings[i]).collect();
                for (&i, vector) in batch.iter().zip(self.forward(&batch_encodings)?) {
                    vectors[i] = vector;
                }
            }
            Ok(vectors)
        })
    }

    /// One batch through the model: padded to its longest, mean-pooled over
    /// the real word pieces, normalised.
    fn forward(&self, batch: &[&Encoding]) -> anyhow::Result<Vec<Vec<f32>>> {
        let longest = batch.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = vec![0u32; batch.len() * longest];
        let mut mask = vec![0u32; batch.len() * longest];
        for (row, encoding) in batch.iter().enumerate() {
            let start = row * longest;
            ids[start..start + encoding.len()].copy_from_slice(encoding.get_ids());
            mask[start..start + encoding.len()].fill(1);
        }
        let shape = (batch.len(), longest);
        let ids = Tensor::from_vec(ids, shape, &Device::Cpu)?;
        let mask = Tensor::from_vec(mask, shape, &Device::Cpu)?;
        let token_types = ids.zeros_like()?;
        let hidden = self.model.forward(&ids, &token_types, Some(&mask))?;

        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let sum = hidden.broadcast_mul(&mask)?.sum(1)?;
        let mean = sum.broadcast_div(&mask.sum(1)?)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.maximum(1e-12)?;
        Ok(mean.broadcast_div(&norm)?.to_vec2::<f32>()?)
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
