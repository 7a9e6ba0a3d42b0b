//! Text → vector. Three implementations behind one trait: a real sentence
//! embedding model run in process ([`super::minilm`], the default), the
//! built-in local embedder (hashed words: deterministic, for tests and
//! benches of docflow's own overhead) and any OpenAI-compatible
//! `/v1/embeddings` endpoint (batched, with timeouts and rate limiting).

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use anyhow::Context;
use app::dto::FailureCode;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{vectors::ModelSpec, StepError};
use crate::{
    platform::config::{Config, EmbedderKind},
    platform::metrics::Metrics,
};

use crate::platform::config::LOCAL_DIMS;
/// The local embedder's model name, as its vectors record it.
pub const LOCAL_MODEL: &str = "docflow-local-hash";

/// What the local embedder's vectors are.
pub fn local_spec() -> ModelSpec {
    ModelSpec {
        name: LOCAL_MODEL.into(),
        dims: LOCAL_DIMS,
    }
}

#[async_trait::async_trait]
pub trait Embedder: Send + Sync {
    /// One L2-normalised vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError>;

    /// A search query's vector. An embedder that queues documents' batches
    /// lets queries pass them, so that a search answers while documents
    /// are being embedded.
    async fn embed_query(&self, query: &str) -> Result<Vec<f32>, StepError> {
        let mut v = self.embed(&[query.to_string()]).await?;
        v.pop()
            .ok_or_else(|| StepError::Transient("the embedder returned no vector".into()))
    }

    /// The model whose vectors this embedder makes.
    fn model(&self) -> ModelSpec;

    /// The model's tokenizer and the most tokens it reads, when chunks are
    /// to be sized in its tokens.
    fn tokenizer(&self) -> Option<(&tokenizers::Tokenizer, usize)> {
        None
    }

    /// Whether a call reaches an outside service (it costs money or
    /// quota): the embed step then starts only from durable checkpoints.
    fn calls_out(&self) -> bool {
        true
    }
}

/// `DOCFLOW_EMBED_RPS` for the whole deployment: each request takes the
/// next slot of a GCRA kept in PostgreSQL (`docflow_rate_slot`, one round
/// trip), so the slots are `1/rps` apart whichever worker process takes
/// them, however many run and as they come and go. A slot is reserved
/// before the wait, so waiting callers queue in order. While PostgreSQL
/// cannot be asked (the worker then cannot run steps anyway), the process
/// paces itself alone at the full rate.
pub struct Pacer {
    shared: Option<(sqlx::PgPool, i64)>,
    local: DefaultDirectRateLimiter,
}

impl Pacer {
    pub fn new(rps: NonZeroU32, pool: Option<sqlx::PgPool>) -> Self {
        let interval_us = 1_000_000 / i64::from(rps.get());
        Self {
            shared: pool.map(|p| (p, interval_us.max(1))),
            local: RateLimiter::direct(Quota::per_second(rps)),
        }
    }

    pub async fn until_ready(&self) {
        if let Some((pool, interval_us)) = &self.shared {
            let slot = sqlx::query_scalar!(
                r#"SELECT docflow_rate_slot('embed', $1) AS "wait_us!""#,
                interval_us
            )
            .fetch_one(pool)
            .await;
            match slot {
                Ok(wait_us) => {
                    let wait = Duration::from_micros(u64::try_from(wait_us).unwrap_or(0));
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "shared rate limit unavailable; pacing locally")
                }
            }
        }
        self.local.until_ready().await;
    }
}

/// The configured embedder; with `pool`, `DOCFLOW_EMBED_RPS` holds for the
/// whole deployment (see [`Pacer`]), without it for this process.
pub fn from_config(
    config: &Config,
    metrics: &Metrics,
    pool: Option<sqlx::PgPool>,
) -> anyhow::Result<Arc<dyn Embedder>> {
    let limiter = config
        .embed_rps
        .and_then(NonZeroU32::new)
        .map(|rps| Arc::new(Pacer::new(rps, pool)));
    let inner: Arc<dyn Embedder> = match config.embedder {
        EmbedderKind::Minilm => Arc::new(MiniLmEmbedder::load(
            &config.model_dir.join(super::minilm::MODEL_NAME),
            config.embed_threads(),
            limiter,
        )?),
        EmbedderKind::Local => Arc::new(LocalEmbedder { limiter }),
        EmbedderKind::Openai => {
            let base = config
                .embed_url
                .as_deref()
                .context("DOCFLOW_EMBED_URL is required with DOCFLOW_EMBEDDER=openai")?;
            let dims = config
                .embed_dims
                .or_else(|| known_dims(&config.embed_model))
                .with_context(|| {
                    format!(
                        "DOCFLOW_EMBED_DIMS is required with DOCFLOW_EMBED_MODEL={}: \
                         the vectors' dimensions",
                        config.embed_model
                    )
                })?;
            Arc::new(OpenAiEmbedder::new(
                base,
                ModelSpec {
                    name: config.embed_model.clone(),
                    dims,
                },
                config.embed_api_key.clone(),
                limiter,
            )?)
        }
    };
    Ok(Arc::new(Counted {
        inner,
        requests: metrics.embed_requests_total.clone(),
        seconds: metrics.embed_seconds.clone(),
    }))
}

/// Embedders of earlier models, built when first asked for: while
/// documents are re-embedded after a model change, search ranks their
/// earlier vectors with a query vector of the same model. Only models this
/// process can run itself are built (the local one, all-MiniLM-L6-v2 when
/// its files are here); a provider's earlier model is not called.
#[derive(Default)]
pub struct Earlier {
    built: std::sync::Mutex<std::collections::HashMap<i16, Option<Arc<dyn Embedder>>>>,
    /// The models a running re-embedding replaces, and when they were read.
    models: std::sync::Mutex<Option<(std::time::Instant, Vec<super::vectors::Model>)>>,
}

impl Earlier {
    /// How long the list of earlier models is trusted: a search reads it
    /// at most this often, not once per query.
    pub const FRESH: Duration = super::vectors::Choice::FRESH;

    /// The earlier models whose vectors an unfinished re-embedding still
    /// has (see [`super::reembed::earlier_models`]), read again at most
    /// every [`Earlier::FRESH`].
    pub async fn models(&self, pool: &sqlx::PgPool) -> sqlx::Result<Vec<super::vectors::Model>> {
        if let Some((at, models)) = &*self.models.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < Self::FRESH {
                return Ok(models.clone());
            }
        }
        let models = super::reembed::earlier_models(pool).await?;
        *self.models.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((std::time::Instant::now(), models.clone()));
        Ok(models)
    }

    /// `model`'s embedder, when this process can run it.
    pub fn get(&self, config: &Config, model: &super::vectors::Model) -> Option<Arc<dyn Embedder>> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        built
            .entry(model.id)
            .or_insert_with(|| {
                let embedder: Option<Arc<dyn Embedder>> = match model.name.as_str() {
                    LOCAL_MODEL if model.dims == LOCAL_DIMS => Some(Arc::new(LocalEmbedder::new())),
                    super::minilm::MODEL_NAME => MiniLmEmbedder::load(
                        &config.model_dir.join(super::minilm::MODEL_NAME),
                        1,
                        None,
                    )
                    .map_err(|e| tracing::warn!(error = %e, "the earlier embedding model cannot be loaded"))
                    .ok()
                    .map(|m| Arc::new(m) as Arc<dyn Embedder>),
                    _ => None,
                };
                if embedder.is_none() {
                    tracing::warn!(
                        model = %model.name,
                        "search cannot embed queries with the earlier model: documents not yet \
                         re-embedded are found by their words"
                    );
                }
                embedder
            })
            .clone()
    }
}

/// `vectors` when there is one of `dims` dimensions for each of `texts`
/// texts: an answer of other dimensions fails the call (it is retried).
pub fn checked(
    vectors: Vec<Vec<f32>>,
    texts: usize,
    dims: usize,
) -> Result<Vec<Vec<f32>>, StepError> {
    if vectors.len() != texts || vectors.iter().any(|v| v.len() != dims) {
        return Err(StepError::Transient(format!(
            "the embedder returned {} vectors for {texts} texts, not all of the model's {dims} dimensions",
            vectors.len(),
        )));
    }
    Ok(vectors)
}

/// The dimensions of well-known provider models' vectors.
fn known_dims(model: &str) -> Option<usize> {
    match model {
        "text-embedding-3-small" | "text-embedding-ada-002" => Some(1536),
        "text-embedding-3-large" => Some(3072),
        _ => None,
    }
}

/// Counts every embedding request by outcome (`docflow_embed_requests_total`)
/// and times each batch (`docflow_embed_seconds`).
struct Counted {
    inner: Arc<dyn Embedder>,
    requests: prometheus::IntCounterVec,
    seconds: prometheus::Histogram,
}

#[async_trait::async_trait]
impl Embedder for Counted {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError> {
        let started = std::time::Instant::now();
        let r = self.inner.embed(texts).await;
        self.seconds.observe(started.elapsed().as_secs_f64());
        let outcome = match &r {
            Ok(_) => "ok",
            Err(StepError::RetryAfter(..)) => "rate_limited",
            Err(StepError::Permanent(..)) => "permanent",
            Err(_) => "transient",
        };
        self.requests.with_label_values(&[outcome]).inc();
        r
    }

    async fn embed_query(&self, query: &str) -> Result<Vec<f32>, StepError> {
        self.inner.embed_query(query).await
    }

    fn model(&self) -> ModelSpec {
        self.inner.model()
    }

    fn tokenizer(&self) -> Option<(&tokenizers::Tokenizer, usize)> {
        self.inner.tokenizer()
    }

    fn calls_out(&self) -> bool {
        self.inner.calls_out()
    }
}

/// all-MiniLM-L6-v2 in this process ([`super::minilm`]). Documents' batches
/// run one at a time on its thread pool (`DOCFLOW_EMBED_THREADS`), off the
/// async runtime; a search query does not queue behind them.
pub struct MiniLmEmbedder {
    model: Arc<super::minilm::MiniLm>,
    batches: tokio::sync::Semaphore,
    limiter: Option<Arc<Pacer>>,
}

impl MiniLmEmbedder {
    pub fn load(
        dir: &std::path::Path,
        threads: usize,
        limiter: Option<Arc<Pacer>>,
    ) -> anyhow::Result<Self> {
        let started = std::time::Instant::now();
        let model = super::minilm::MiniLm::load(dir, threads)?;
        tracing::info!(
            dir = %dir.display(),
            threads,
            ms = started.elapsed().as_millis() as u64,
            "embedding model loaded"
        );
        Ok(Self {
            model: Arc::new(model),
            batches: tokio::sync::Semaphore::new(1),
            limiter,
        })
    }

    async fn run(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, StepError> {
        let model = self.model.clone();
        tokio::task::spawn_blocking(move || model.embed(&texts))
            .await
            .map_err(|e| StepError::Transient(format!("embedding task failed: {e}")))?
            .map_err(|e| StepError::Transient(format!("the embedding model failed: {e:#}")))
    }
}

#[async_trait::async_trait]
impl Embedder for MiniLmEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError> {
        if let Some(l) = &self.limiter {
            l.until_ready().await;
        }
        let _turn = self
            .batches
            .acquire()
            .await
            .map_err(|_| StepError::Transient("the embedding model is closed".into()))?;
        self.run(texts.to_vec()).await
    }

    async fn embed_query(&self, query: &str) -> Result<Vec<f32>, StepError> {
        let mut v = self.run(vec![query.to_string()]).await?;
        v.pop()
            .ok_or_else(|| StepError::Transient("the embedding model returned no vector".into()))
    }

    fn model(&self) -> ModelSpec {
        ModelSpec {
            name: super::minilm::MODEL_NAME.into(),
            dims: super::minilm::DIMS,
        }
    }

    fn tokenizer(&self) -> Option<(&tokenizers::Tokenizer, usize)> {
        // [CLS] and [SEP] take two of the model's word pieces.
        Some((self.model.tokenizer(), super::minilm::MAX_TOKENS - 2))
    }

    fn calls_out(&self) -> bool {
        false
    }
}

/// Feature hashing of words, word pairs and character trigrams into 384
/// signed buckets, L2-normalised: texts sharing words score high.
pub struct LocalEmbedder {
    limiter: Option<Arc<Pacer>>,
}

impl LocalEmbedder {
    pub fn new() -> Self {
        Self { limiter: None }
    }
}

impl Default for LocalEmbedder {
    fn default() -> Self {
        Self::new()
    }
}

/// A feature's bucket and sign, from the SHA-256 of its text.
fn bucket(digest: &[u8]) -> (usize, f32) {
    let n = u64::from_le_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ]);
    (
        (n % LOCAL_DIMS as u64) as usize,
        if digest[8] & 1 == 0 { 1.0 } else { -1.0 },
    )
}

/// One distinct feature of a text.
struct Feature {
    bucket: usize,
    sign: f32,
    weight: f32,
    count: u32,
}

/// The distinct features of a text and how often each occurs. A feature is
/// the concatenation of its parts (`"w:" + word`), taken as one byte stream
/// and never built as a string: an occurrence costs a short hash and a map
/// probe, and only a feature's first one its SHA-256.
#[derive(Default)]
struct Features(std::collections::HashMap<u64, Feature>);

impl Features {
    fn add(&mut self, parts: &[&[u8]], weight: f32) {
        use std::hash::Hasher;
        let mut key = std::hash::DefaultHasher::new();
        parts.iter().for_each(|p| key.write(p));
        self.0
            .entry(key.finish())
            .or_insert_with(|| {
                let mut digest = Sha256::new();
                parts.iter().for_each(|p| digest.update(p));
                let (bucket, sign) = bucket(&digest.finalize());
                Feature {
                    bucket,
                    sign,
                    weight,
                    count: 0,
                }
            })
            .count += 1;
    }
}

/// The words of a text as the local embedder reads them: runs of letters
/// and digits.
pub fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The local embedding of one text: its words (`w:`), the character
/// trigrams of each word padded with a space on both sides (`c:`) and its
/// word pairs (`b:`), lower-cased. Term counts are damped (1 + ln n) so a
/// phrase repeated throughout a chunk does not drown its rarer words.
pub fn local_embedding(text: &str) -> Vec<f32> {
    let mut features = Features::default();
    let (mut word, mut previous) = (String::new(), String::new());
    let mut padded: Vec<char> = Vec::new();
    let mut first = true;
    for w in words(text) {
        word.clear();
        if w.is_ascii() {
            word.extend(w.chars().map(|c| c.to_ascii_lowercase()));
        } else {
            // Context-dependent rules (a word-final sigma) need the whole word.
            word.push_str(&w.to_lowercase());
        }
        features.add(&[b"w:", word.as_bytes()], 2.0);
        padded.clear();
        padded.push(' ');
        padded.extend(word.chars());
        padded.push(' ');
        for t in padded.windows(3) {
            let mut buf = [0u8; 12];
            let mut len = 0;
            for c in t {
                len += c.encode_utf8(&mut buf[len..]).len();
            }
            features.add(&[b"c:", &buf[..len]], 0.5);
        }
        if !first {
            features.add(&[b"b:", previous.as_bytes(), b" ", word.as_bytes()], 1.5);
        }
        first = false;
        std::mem::swap(&mut word, &mut previous);
    }
    let mut v = vec![0f32; LOCAL_DIMS];
    for f in features.0.values() {
        v[f.bucket] += f.sign * f.weight * (1.0 + (f.count as f32).ln());
    }
    normalise(&mut v);
    v
}

pub fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity of two L2-normalised vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[async_trait::async_trait]
impl Embedder for LocalEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError> {
        if let Some(l) = &self.limiter {
            l.until_ready().await;
        }
        let bytes = texts.iter().map(String::len).sum();
        let texts = texts.to_vec();
        super::cpu_bound(bytes, move || {
            texts.iter().map(|t| local_embedding(t)).collect()
        })
        .await
        .map_err(|e| StepError::Transient(format!("embedding task failed: {e}")))
    }

    fn model(&self) -> ModelSpec {
        local_spec()
    }

    fn calls_out(&self) -> bool {
        false
    }
}

/// Any OpenAI-compatible `/v1/embeddings` endpoint.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    model: ModelSpec,
    api_key: Option<String>,
    limiter: Option<Arc<Pacer>>,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    pub fn new(
        base: &str,
        model: ModelSpec,
        api_key: Option<String>,
        limiter: Option<Arc<Pacer>>,
    ) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/');
        let url = if base.ends_with("/embeddings") {
            base.to_string()
        } else if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            client,
            url,
            model,
            api_key,
            limiter,
        })
    }
}

/// The longest `Retry-After` docflow honours; a provider asking for more
/// is asked again after this long.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// A `Retry-After` value in its delta-seconds form, at most [`MAX_RETRY_AFTER`].
fn retry_after(value: &str) -> Option<Duration> {
    let secs = value.trim().parse::<u64>().ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, StepError> {
        if let Some(l) = &self.limiter {
            l.until_ready().await;
        }
        let mut req = self
            .client
            .post(&self.url)
            .json(&serde_json::json!({"model": self.model.name, "input": texts}));
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req
            .send()
            .await
            // Without the URL: the message reaches users.
            .map_err(|e| {
                StepError::Transient(format!("embedding request failed: {}", e.without_url()))
            })?;
        let status = resp.status();
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let wait = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after)
                .unwrap_or(Duration::from_secs(5));
            return Err(StepError::RetryAfter(
                wait,
                "the embedding endpoint is rate limiting (429)".into(),
            ));
        }
        if status.is_server_error() || status == reqwest::StatusCode::REQUEST_TIMEOUT {
            return Err(StepError::Transient(format!(
                "the embedding endpoint answered {status}"
            )));
        }
        if !status.is_success() {
            // What the provider said is for operators (it may name accounts
            // or keys), read up to 1 KB; users see the status.
            let mut body = Vec::new();
            let mut resp = resp;
            while let Ok(Some(chunk)) = resp.chunk().await {
                body.extend_from_slice(&chunk[..chunk.len().min(1024 - body.len())]);
                if body.len() >= 1024 {
                    break;
                }
            }
            tracing::warn!(%status, body = %String::from_utf8_lossy(&body), "the embedding endpoint refused a request");
            return Err(StepError::Permanent(
                FailureCode::Refused,
                format!("the embedding endpoint refused the request ({status})"),
            ));
        }
        let body: EmbeddingResponse = resp
            .json()
            .await
            .map_err(|e| StepError::Transient(format!("unreadable embedding response: {e}")))?;
        if body.data.len() != texts.len() {
            return Err(StepError::Transient(format!(
                "asked for {} embeddings, got {}",
                texts.len(),
                body.data.len()
            )));
        }
        let mut out = vec![Vec::new(); texts.len()];
        for item in body.data {
            let slot = out
                .get_mut(item.index)
                .ok_or_else(|| StepError::Transient("embedding index out of range".into()))?;
            let mut v = item.embedding;
            if v.len() != self.model.dims {
                // Every vector would be refused alike: not worth a retry.
                return Err(StepError::Permanent(
                    FailureCode::Refused,
                    format!(
                        "the embedding endpoint returned vectors of {} dimensions; docflow is \
                         configured for {} (DOCFLOW_EMBED_DIMS)",
                        v.len(),
                        self.model.dims
                    ),
                ));
            }
            normalise(&mut v);
            *slot = v;
        }
        Ok(out)
    }

    fn model(&self) -> ModelSpec {
        self.model.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_seconds_and_bounded() {
        assert_eq!(retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(retry_after("99999999999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&u64::MAX.to_string()), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("Wed, 21 Oct 2026 07:28:00 GMT"), None);
    }

    /// The local embedder as first written, building every feature as a
    /// string: vectors stored by it must stay comparable with new ones.
    fn embedding_with_feature_strings(text: &str) -> Vec<f32> {
        let mut features: std::collections::HashMap<String, (f32, u32)> =
            std::collections::HashMap::new();
        let mut add = |f: String, weight: f32| features.entry(f).or_insert((weight, 0)).1 += 1;
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        for w in &words {
            add(format!("w:{w}"), 2.0);
            let chars: Vec<char> = format!(" {w} ").chars().collect();
            for t in chars.windows(3) {
                add(format!("c:{}", t.iter().collect::<String>()), 0.5);
            }
        }
        for pair in words.windows(2) {
            add(format!("b:{} {}", pair[0], pair[1]), 1.5);
        }
        let mut v = vec![0f32; LOCAL_DIMS];
        for (f, (weight, n)) in features {
            let (i, sign) = bucket(&Sha256::digest(f.as_bytes()));
            v[i] += sign * weight * (1.0 + (n as f32).ln());
        }
        normalise(&mut v);
        v
    }

    #[test]
    fn local_embeddings_match_the_ones_already_stored() {
        for text in [
            "The quarterly revenue grew by twelve percent; the revenue grew.",
            "ΟΔΟΣ Σίσυφος ΣΑΣ — Straße İstanbul ǅemal, naïve café 東京 42x",
            "a",
            "one two one two one two three",
            "",
        ] {
            let new = local_embedding(text);
            let old = embedding_with_feature_strings(text);
            let gap = new
                .iter()
                .zip(&old)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(gap < 1e-6, "{text:?}: differs by {gap}");
        }
    }

    #[test]
    fn local_embeddings_are_deterministic_normalised_and_similarity_aware() {
        let a = local_embedding("The quarterly revenue grew by twelve percent");
        assert_eq!(
            a,
            local_embedding("The quarterly revenue grew by twelve percent")
        );
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        let near = local_embedding("quarterly revenue grew");
        let far = local_embedding("penguins waddle across antarctic ice");
        assert!(
            cosine(&a, &near) > cosine(&a, &far) + 0.2,
            "{} vs {}",
            cosine(&a, &near),
            cosine(&a, &far)
        );
        assert_eq!(a.len(), LOCAL_DIMS);
        assert!(local_embedding("").iter().all(|x| *x == 0.0));
    }
}
