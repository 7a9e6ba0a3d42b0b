//! An OpenAI-compatible `/v1/embeddings` server that counts calls and can
//! fail or hang on demand: a real local HTTP server standing in for a
//! third-party API. Shared with the benchmarks.

#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::post, Json, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

/// How the mock embedding endpoint behaves.
#[derive(Default)]
pub struct EmbedBehaviour {
    /// Answer 503 to this many calls first.
    pub fail_first: usize,
    /// Answer 503 to every call while true.
    pub always_fail: bool,
    /// The call with this number (1-based) hangs until `release()`.
    pub hang_at: Option<usize>,
    /// Every call hangs until `release()`.
    pub hold: bool,
    /// Answer 400 (a permanent refusal).
    pub refuse: bool,
    /// Take this long to answer (a slow endpoint).
    pub delay: Option<Duration>,
    /// Answer 429 with `Retry-After: n` (seconds) to every call while set.
    pub rate_limit: Option<u64>,
}

/// An OpenAI-compatible `/v1/embeddings` server that counts calls.
#[derive(Clone)]
pub struct MockEmbedder {
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    /// When each call arrived, in order.
    times: Arc<Mutex<Vec<std::time::Instant>>>,
    inputs: Arc<AtomicUsize>,
    /// How often each input text was embedded.
    texts: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    behaviour: Arc<Mutex<EmbedBehaviour>>,
    release: Arc<Notify>,
    arrived: Arc<Notify>,
}

impl MockEmbedder {
    pub async fn start(behaviour: EmbedBehaviour) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let me = Self {
            addr: listener.local_addr().expect("addr"),
            calls: Arc::default(),
            times: Arc::default(),
            inputs: Arc::default(),
            texts: Arc::default(),
            behaviour: Arc::new(Mutex::new(behaviour)),
            release: Arc::new(Notify::new()),
            arrived: Arc::new(Notify::new()),
        };
        let app = Router::new()
            .route("/v1/embeddings", post(embed))
            .with_state(me.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.expect("mock serves") });
        me
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// How often each text was embedded, by text.
    pub fn text_counts(&self) -> std::collections::HashMap<String, usize> {
        self.texts.lock().expect("lock").clone()
    }

    /// When each call arrived, in order.
    pub fn times(&self) -> Vec<std::time::Instant> {
        self.times.lock().expect("lock").clone()
    }

    /// Waits until call number `n` has arrived.
    pub async fn wait_calls(&self, n: usize) {
        tokio::time::timeout(Duration::from_secs(60), async {
            while self.calls() < n {
                let notified = self.arrived.notified();
                if self.calls() >= n {
                    break;
                }
                let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
            }
        })
        .await
        .expect("embedding calls arrive");
    }

    pub fn set(&self, f: impl FnOnce(&mut EmbedBehaviour)) {
        f(&mut self.behaviour.lock().expect("lock"));
    }

    /// Lets the hanging call (and later ones) through.
    pub fn release(&self) {
        self.set(|b| {
            b.hang_at = None;
            b.hold = false;
        });
        self.release.notify_waiters();
    }
}

async fn embed(State(m): State<MockEmbedder>, Json(body): Json<Value>) -> axum::response::Response {
    let n = {
        let mut times = m.times.lock().expect("lock");
        times.push(std::time::Instant::now());
        m.calls.fetch_add(1, Ordering::SeqCst) + 1
    };
    m.arrived.notify_waiters();
    let (hang, fail, refuse, delay, rate_limit) = {
        let b = m.behaviour.lock().expect("lock");
        (
            b.hold || b.hang_at == Some(n),
            b.always_fail || n <= b.fail_first,
            b.refuse,
            b.delay,
            b.rate_limit,
        )
    };
    if let Some(secs) = rate_limit {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(axum::http::header::RETRY_AFTER, secs.to_string())],
            Json(json!({"error": {"message": "rate limited"}})),
        )
            .into_response();
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if hang {
        // `release()` clears the behaviour before it wakes waiters; a call
        // that checks in between sees it cleared.
        loop {
            let released = m.release.notified();
            let still = {
                let b = m.behaviour.lock().expect("lock");
                b.hold || b.hang_at == Some(n)
            };
            if !still {
                break;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), released).await;
        }
    }
    if refuse {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "model not found"}})),
        )
            .into_response();
    }
    if fail {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"message": "overloaded"}})),
        )
            .into_response();
    }
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    m.inputs.fetch_add(inputs.len(), Ordering::SeqCst);
    {
        let mut texts = m.texts.lock().expect("lock");
        for t in &inputs {
            *texts.entry(t.clone()).or_default() += 1;
        }
    }
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": docflow::pipeline::embedder::local_embedding(t)}))
        .collect();
    (
        StatusCode::OK,
        Json(json!({"object": "list", "data": data, "model": body["model"]})),
    )
        .into_response()
}
