//! `spawn_app()` and the `TestApp` with one helper per endpoint.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use docflow::{
    platform::config::{Config, QueueArg},
    Application, Roles,
};
use lapin::{options::BasicGetOptions, Connection, ConnectionProperties};
use serde_json::Value;
use sqlx::PgPool;
use tokio::{net::TcpListener, sync::Mutex, task::JoinHandle};
use tokio_util::sync::CancellationToken;

pub const PASSWORD: &str = "test-password";

pub use crate::isolation::Isolation;

/// `GET url` with `client`, expecting 200 and JSON.
pub async fn get_json<T: serde::de::DeserializeOwned>(client: &reqwest::Client, url: String) -> T {
    let r = client.get(&url).send().await.expect("request");
    let status = r.status();
    let body = r.text().await.expect("body");
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
}

/// Sends `request` and returns the status code, for checks of the status alone.
pub async fn status(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.expect("send").status().as_u16()
}

/// How a test wants its docflow process.
pub struct Options {
    pub roles: Roles,
    pub amqp_port: u16,
    pub configure: Box<dyn FnOnce(&mut Config) + Send>,
    /// An embedder to use instead of the configured one.
    pub embedder: Option<Arc<dyn docflow::pipeline::embedder::Embedder>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            roles: Roles::web(),
            amqp_port: 5672,
            configure: Box::new(|_| {}),
            embedder: None,
        }
    }
}

/// A server function's name from its path: `/sfn/job_with_events12` →
/// `job_with_events`.
pub fn sfn_name(path: &str) -> &str {
    path.trim_start_matches("/sfn/")
        .trim_end_matches(|c: char| c.is_ascii_digit())
}

/// The path of server function `name`, as the registry lists it.
pub fn sfn_path(name: &str) -> String {
    leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.to_string())
        .find(|p| sfn_name(p) == name)
        .unwrap_or_else(|| panic!("no server function {name}"))
}

pub fn queues(spec: &[&str]) -> Vec<QueueArg> {
    spec.iter()
        .map(|s| s.parse().expect("queue spec"))
        .collect()
}

pub struct TestApp {
    pub base: String,
    pub pool: PgPool,
    /// Shared with the app's peers; the last one to go removes it.
    pub iso: Arc<Isolation>,
    pub data_dir: PathBuf,
    pub config: Config,
    /// The process's metrics (also for processes without HTTP).
    pub metrics: docflow::platform::metrics::Metrics,
    _tmp: tempfile::TempDir,
    shutdown: CancellationToken,
    handle: Mutex<Option<JoinHandle<anyhow::Result<()>>>>,
    /// Logged-in clients by email.
    clients: Mutex<Vec<(String, reqwest::Client)>>,
}

/// PostgreSQL connections one test process may hold, its listeners
/// included: six tests at once, each with a few processes, stay within the
/// server's 100.
pub const TEST_POOL: u32 = 10;

pub async fn spawn_app() -> TestApp {
    spawn_with(Options::default()).await
}

pub async fn spawn_with(opts: Options) -> TestApp {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    let iso = Arc::new(Isolation::demo(PASSWORD));
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut config = Config::local_defaults();
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.database_url = iso.database_url.clone();
    config.amqp_url = iso.amqp_url(opts.amqp_port);
    config.data_dir = tmp.path().join("data");
    config.retry_delays =
        docflow::platform::config::RetryDelays(vec![Duration::from_millis(200); 3]);
    config.lease = Duration::from_secs(5);
    config.shutdown_grace = Duration::from_secs(2);
    config.db_pool =
        TEST_POOL - docflow::platform::db::listeners(opts.roles.background, opts.roles.web);
    // In-process workers run this test binary; their parser children must
    // be docflow itself.
    config.parser_exe = Some(PathBuf::from(env!("CARGO_BIN_EXE_docflow")));
    (opts.configure)(&mut config);
    let mut app = Application::build(config.clone(), opts.roles)
        .await
        .expect("docflow builds");
    if let Some(embedder) = opts.embedder {
        app = app.with_embedder(embedder);
    }
    let addr = app.addr().expect("web role binds");
    let pool = app.state().pool.clone();
    let metrics = app.state().metrics.clone();
    docflow::demo::seed(&pool, PASSWORD).await.expect("seeding");
    let shutdown = app.shutdown_token();
    let handle = tokio::spawn(app.run());
    TestApp {
        base: format!("http://{addr}"),
        pool,
        iso,
        data_dir: config.data_dir.clone(),
        config,
        metrics,
        _tmp: tmp,
        shutdown,
        handle: Mutex::new(Some(handle)),
        clients: Mutex::new(Vec::new()),
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Calls server function `name` as `who` with form fields, as a page
    /// does: its status and its JSON answer (its text when not JSON).
    pub async fn server_fn(&self, who: &str, name: &str, args: &[(&str, &str)]) -> (u16, Value) {
        let r = self
            .client(who)
            .await
            .post(self.url(&sfn_path(name)))
            .form(args)
            .send()
            .await
            .expect("server function");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A client with a cookie jar, not logged in.
    pub fn anonymous(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .expect("client")
    }

    /// A client logged in as `email` (cached per email).
    pub async fn client(&self, email: &str) -> reqwest::Client {
        let mut clients = self.clients.lock().await;
        if let Some((_, c)) = clients.iter().find(|(e, _)| e == email) {
            return c.clone();
        }
        let c = self.anonymous();
        let r = c
            .post(self.url("/api/login"))
            .json(&serde_json::json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .expect("login request");
        assert_eq!(
            r.status(),
            200,
            "login as {email}: {}",
            r.text().await.unwrap_or_default()
        );
        clients.push((email.to_string(), c.clone()));
        c
    }

    /// Uploads `bytes` as `filename` for `email`.
    pub async fn upload(&self, email: &str, filename: &str, bytes: Vec<u8>) -> reqwest::Response {
        self.upload_with(email, filename, bytes, None).await
    }

    pub async fn upload_with(
        &self,
        email: &str,
        filename: &str,
        bytes: Vec<u8>,
        key: Option<&str>,
    ) -> reqwest::Response {
        let c = self.client(email).await;
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name(filename.to_string()),
        );
        let mut req = c.post(self.url("/api/documents")).multipart(form);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await.expect("upload request")
    }

    /// Uploads and returns the 202 body.
    pub async fn upload_ok(&self, email: &str, filename: &str, bytes: Vec<u8>) -> Value {
        let r = self.upload(email, filename, bytes).await;
        assert_eq!(
            r.status(),
            202,
            "upload {filename}: {}",
            r.text().await.unwrap_or_default()
        );
        r.json().await.expect("json")
    }

    /// `GET path` as `email`, expecting 200 and JSON.
    pub async fn get_json<T: serde::de::DeserializeOwned>(&self, email: &str, path: &str) -> T {
        get_json(&self.client(email).await, self.url(path)).await
    }

    pub async fn job(&self, email: &str, id: &str) -> Value {
        let r = self
            .client(email)
            .await
            .get(self.url(&format!("/api/jobs/{id}")))
            .send()
            .await
            .expect("get job");
        assert_eq!(r.status(), 200);
        r.json().await.expect("json")
    }

    /// Polls the job until `pred` holds or `timeout` passes.
    pub async fn wait_job(
        &self,
        email: &str,
        id: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let j = self.job(email, id).await;
            if pred(&j) {
                return j;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "job {id} did not get there in {timeout:?}; last: {j:#}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_state(&self, email: &str, id: &str, state: &str) -> Value {
        self.wait_job(email, id, Duration::from_secs(60), |j| j["state"] == state)
            .await
    }

    /// The messages of a job's timeline, oldest first.
    pub async fn timeline(&self, job_id: &str) -> Vec<String> {
        sqlx::query_scalar("SELECT message FROM job_events WHERE job_id = $1::uuid ORDER BY id")
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .expect("events")
    }

    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }

    /// The names of a document's blobs (`original`, `text.txt`), sorted.
    pub fn blobs_of(&self, document_id: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .blob_files()
            .iter()
            .filter(|p| p.parent().and_then(|d| d.file_name()) == Some(document_id.as_ref()))
            .filter_map(|p| p.file_name()?.to_str().map(String::from))
            .collect();
        names.sort();
        names
    }

    /// Files (not folders) under the blob store.
    pub fn blob_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.data_dir.join("blobs"), &mut out);
        out
    }

    pub async fn amqp(&self) -> Connection {
        Connection::connect(&self.iso.amqp_url(5672), ConnectionProperties::default())
            .await
            .expect("amqp connect")
    }

    /// Takes every message now on `queue` (acking them).
    pub async fn drain(&self, queue: &str) -> Vec<(Value, Option<String>)> {
        let conn = self.amqp().await;
        let ch = conn.create_channel().await.expect("channel");
        docflow::broker::declare_topology(&ch)
            .await
            .expect("topology");
        let mut out = Vec::new();
        while let Some(m) = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic_get")
        {
            let id = m
                .delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string());
            out.push((
                serde_json::from_slice(&m.delivery.data).expect("json body"),
                id,
            ));
        }
        out
    }

    /// Waits until `queue` holds `n` messages, then takes them.
    pub async fn wait_messages(
        &self,
        queue: &str,
        n: usize,
        timeout: Duration,
    ) -> Vec<(Value, Option<String>)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut got = Vec::new();
        while got.len() < n {
            got.extend(self.drain(queue).await);
            if got.len() >= n {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{queue}: {} of {n} messages after {timeout:?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        got
    }

    pub async fn stop(&self) {
        self.shutdown.cancel();
        if let Some(h) = self.handle.lock().await.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), h).await;
        }
    }
}

/// The accept loop of an open gate and the token that cuts its connections.
type Forwarding = (JoinHandle<()>, CancellationToken);

/// A TCP forwarder the test can cut and restore, standing between docflow
/// and a real server: "RabbitMQ is unreachable" without stopping RabbitMQ.
pub struct TcpGate {
    pub port: u16,
    upstream: SocketAddr,
    state: Arc<Mutex<Option<Forwarding>>>,
    /// Swallow every byte, both ways, on open connections.
    black_hole: Arc<AtomicBool>,
}

impl TcpGate {
    /// A gate on a free port, closed (connections refused) until `open()`.
    pub async fn new(upstream: SocketAddr) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        drop(l);
        Self {
            port,
            upstream,
            state: Arc::new(Mutex::new(None)),
            black_hole: Arc::default(),
        }
    }

    /// Keeps connections open but swallows every byte both ways: a peer that
    /// stops answering without closing anything. A side that closes is
    /// still passed on.
    pub fn black_hole(&self) {
        self.black_hole.store(true, Ordering::SeqCst);
    }

    pub async fn open(&self) {
        let mut st = self.state.lock().await;
        if st.is_some() {
            return;
        }
        let listener = bind_retry(self.port).await;
        let cut = CancellationToken::new();
        let upstream = self.upstream;
        let black_hole = self.black_hole.clone();
        let token = cut.clone();
        let task = tokio::spawn(async move {
            loop {
                let (inbound, _) = tokio::select! {
                    _ = token.cancelled() => return,
                    r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
                };
                let token = token.clone();
                let black_hole = black_hole.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (from_client, to_client) = inbound.into_split();
                    let (from_server, to_server) = outbound.into_split();
                    // Either side closing ends both.
                    tokio::select! {
                        _ = token.cancelled() => {},
                        _ = pump(from_client, to_server, black_hole.clone()) => {},
                        _ = pump(from_server, to_client, black_hole) => {},
                    }
                });
            }
        });
        *st = Some((task, cut));
    }

    /// Refuses new connections and cuts the open ones.
    pub async fn close(&self) {
        if let Some((task, cut)) = self.state.lock().await.take() {
            cut.cancel();
            let _ = task.await;
        }
    }
}

/// Copies bytes one way until either end closes, dropping them while
/// `black_hole` is set.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    black_hole: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if black_hole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

async fn bind_retry(port: u16) -> TcpListener {
    for _ in 0..50 {
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("port {port} stayed busy");
}

/// A second docflow web process on the same database, vhost and blob store.
pub async fn spawn_peer(app: &TestApp) -> TestApp {
    spawn_peer_with(app, Roles::web(), |_| {}).await
}

/// Another docflow process with `roles` on the same database, vhost and
/// blob store, its configuration changed by `configure`. A process without
/// the web role serves no HTTP (its `base` is empty).
pub async fn spawn_peer_with(
    app: &TestApp,
    roles: Roles,
    configure: impl FnOnce(&mut Config),
) -> TestApp {
    let mut config = app.config.clone();
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.db_pool = TEST_POOL - docflow::platform::db::listeners(roles.background, roles.web);
    configure(&mut config);
    let peer = Application::build(config.clone(), roles)
        .await
        .expect("peer builds");
    let addr = peer
        .addr()
        .map_or_else(String::new, |a| format!("http://{a}"));
    let pool = peer.state().pool.clone();
    let metrics = peer.state().metrics.clone();
    let shutdown = peer.shutdown_token();
    let handle = tokio::spawn(peer.run());
    TestApp {
        base: addr,
        pool,
        iso: app.iso.clone(),
        data_dir: app.data_dir.clone(),
        config,
        metrics,
        _tmp: tempfile::tempdir().expect("tempdir"),
        shutdown,
        handle: Mutex::new(Some(handle)),
        clients: Mutex::new(Vec::new()),
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

/// Reads an SSE response event by event, with `eventsource-stream`'s
/// parser (the WHATWG rules, written apart from docflow's own framing, so
/// a framing bug of the server shows here).
pub struct SseReader {
    events: std::pin::Pin<
        Box<
            dyn futures::Stream<
                    Item = Result<
                        eventsource_stream::Event,
                        eventsource_stream::EventStreamError<reqwest::Error>,
                    >,
                > + Send,
        >,
    >,
}

impl SseReader {
    pub async fn open(client: &reqwest::Client, url: &str, last_event_id: Option<i64>) -> Self {
        use eventsource_stream::Eventsource;
        let mut req = client.get(url).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let resp = req.send().await.expect("sse request");
        assert_eq!(resp.status(), 200, "{url}");
        Self {
            events: Box::pin(resp.bytes_stream().eventsource()),
        }
    }

    /// The next event, or `None` when the stream ended; comments and
    /// events without data are skipped. `id` is the stream's last event id
    /// as a browser's `EventSource` keeps it.
    pub async fn next(&mut self) -> Option<SseEvent> {
        use futures::StreamExt;
        loop {
            let event = tokio::time::timeout(Duration::from_secs(60), self.events.next())
                .await
                .expect("an event within 60 s")?
                .expect("a well-formed event stream");
            if event.data.is_empty() {
                continue;
            }
            return Some(SseEvent {
                id: event.id.parse().ok(),
                event: event.event,
                data: serde_json::from_str(&event.data).expect("event data is json"),
            });
        }
    }
}
