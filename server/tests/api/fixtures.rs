//! Test inputs and stand-ins: real multi-page PDFs, a counting embedding
//! endpoint (a real local HTTP server), and separate `docflow worker` processes.

use std::{
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::post, Json, Router};
use lopdf::{
    content::{Content, Operation},
    dictionary, Document, Object, Stream,
};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::helpers::TestApp;

/// A real PDF with one page per entry, each page holding its lines.
pub fn pdf(pages: &[Vec<String>]) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(
        dictionary! {"Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica"},
    );
    let resources_id = doc.add_object(dictionary! {"Font" => dictionary! {"F1" => font_id}});
    let mut kids: Vec<Object> = Vec::new();
    for lines in pages {
        let mut ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 11.into()]),
            Operation::new("TL", vec![14.into()]),
            Operation::new("Td", vec![40.into(), 800.into()]),
        ];
        for line in lines {
            ops.push(Operation::new(
                "Tj",
                vec![Object::string_literal(line.as_str())],
            ));
            ops.push(Operation::new("T*", vec![]));
        }
        ops.push(Operation::new("ET", vec![]));
        let content = Content { operations: ops };
        let content_id = doc.add_object(Stream::new(
            dictionary! {},
            content.encode().expect("encode"),
        ));
        kids.push(
            doc.add_object(
                dictionary! {"Type" => "Page", "Parent" => pages_id, "Contents" => content_id},
            )
            .into(),
        );
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("save pdf");
    out
}

/// Filler prose that differs per `seed`, so documents do not look alike.
pub fn prose(seed: &str, sentences: usize) -> String {
    (0..sentences)
        .map(|i| {
            format!(
                "Section {seed} note {i} describes ordinary operational matters in plain words."
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How the mock embedding endpoint behaves.
#[derive(Default)]
pub struct EmbedBehaviour {
    /// Answer 503 to this many calls first.
    pub fail_first: usize,
    /// Answer 503 to every call while true.
    pub always_fail: bool,
    /// The call with this number (1-based) hangs until `release()`.
    pub hang_at: Option<usize>,
    /// Answer 400 (a permanent refusal).
    pub refuse: bool,
}

/// An OpenAI-compatible `/v1/embeddings` server that counts calls.
#[derive(Clone)]
pub struct MockEmbedder {
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    inputs: Arc<AtomicUsize>,
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
            inputs: Arc::default(),
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
        self.set(|b| b.hang_at = None);
        self.release.notify_waiters();
    }
}

async fn embed(State(m): State<MockEmbedder>, Json(body): Json<Value>) -> impl IntoResponse {
    let n = m.calls.fetch_add(1, Ordering::SeqCst) + 1;
    m.arrived.notify_waiters();
    let (hang, fail, refuse) = {
        let b = m.behaviour.lock().expect("lock");
        (
            b.hang_at == Some(n),
            b.always_fail || n <= b.fail_first,
            b.refuse,
        )
    };
    if hang {
        m.release.notified().await;
    }
    if refuse {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "model not found"}})),
        );
    }
    if fail {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"message": "overloaded"}})),
        );
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
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": docflow::pipeline::embedder::local_embedding(t)}))
        .collect();
    (
        StatusCode::OK,
        Json(json!({"object": "list", "data": data, "model": body["model"]})),
    )
}

/// A separate `docflow worker` process against the test's database and vhost.
pub struct WorkerProcess {
    child: Child,
}

impl WorkerProcess {
    pub fn start(app: &TestApp, queues: &str, env: &[(&str, String)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_docflow"));
        cmd.arg("worker")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .env("DATABASE_URL", &app.iso.database_url)
            .env("AMQP_URL", &app.config.amqp_url)
            .env("DOCFLOW_DATA_DIR", &app.data_dir)
            .env("DOCFLOW_QUEUES", queues)
            .env("DOCFLOW_LEASE", "2s")
            .env("DOCFLOW_SHUTDOWN_GRACE", "2s")
            .env("DOCFLOW_RETRY_DELAYS", "200ms,200ms,200ms")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self {
            child: cmd.spawn().expect("worker process starts"),
        }
    }

    /// SIGKILL: no shutdown, no acks, no lease release.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
