//! Shared set-up for the benchmarks: a docflow process on its own database,
//! vhost and blob folder, with the demo users.

#![allow(dead_code)]

use std::time::Duration;

use docflow::{platform::config::Config, Application, Roles};

pub const PASSWORD: &str = "bench-password";

pub struct Bench {
    pub base: String,
    pub pool: sqlx::PgPool,
    pub config: Config,
    pub shutdown: tokio_util::sync::CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Removed when the bench is dropped.
    pub iso: Isolation,
    _tmp: tempfile::TempDir,
}

pub mod cost;
pub mod reference;

#[path = "../tests/api/isolation.rs"]
pub mod isolation;
pub use isolation::Isolation;

pub async fn start(roles: Roles, configure: impl FnOnce(&mut Config)) -> Bench {
    let iso = Isolation::demo(PASSWORD);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut config = Config::local_defaults();
    config.listen = "127.0.0.1:0".parse().expect("addr");
    config.database_url = iso.database_url.clone();
    config.amqp_url = iso.amqp_url(5672);
    config.data_dir = tmp.path().join("data");
    config.max_backlog = 1_000_000;
    config.lease = Duration::from_secs(30);
    // In-process workers run this bench binary; their parser children must
    // be docflow itself.
    config.parser_exe = Some(env!("CARGO_BIN_EXE_docflow").into());
    configure(&mut config);
    let app = Application::build(config.clone(), roles)
        .await
        .expect("docflow builds");
    let base = format!("http://{}", app.addr().expect("web"));
    let pool = app.state().pool.clone();
    docflow::demo::seed(&pool, PASSWORD).await.expect("seed");
    let shutdown = app.shutdown_token();
    let handle = tokio::spawn(app.run());
    Bench {
        base,
        pool,
        config,
        shutdown,
        handle,
        iso,
        _tmp: tmp,
    }
}

impl Bench {
    pub async fn login(&self, email: &str) -> reqwest::Client {
        self.login_at(&self.base, email).await
    }

    /// Logs in at another docflow process on the same database.
    pub async fn login_at(&self, base: &str, email: &str) -> reqwest::Client {
        let c = reqwest::Client::builder()
            .cookie_store(true)
            .pool_max_idle_per_host(64)
            .build()
            .expect("client");
        let r = c
            .post(format!("{base}/api/login"))
            .json(&serde_json::json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 200);
        c
    }

    /// Stops docflow, then removes its database and vhost.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.handle).await;
        self.pool.close().await;
    }
}

/// Uploads `bytes` as `name` through `POST /api/documents`; expects 202.
pub async fn upload(client: &reqwest::Client, base: &str, name: String, bytes: Vec<u8>) {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name),
    );
    let r = client
        .post(format!("{base}/api/documents"))
        .multipart(form)
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
}

/// The value at quantile `q` (0..=1) of sorted samples.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Waits until the relay has published every outbox row; returns how many
/// times it asked (each a commit, for benches that count them).
pub async fn until_outbox_sent(pool: &sqlx::PgPool) -> i64 {
    let mut polls = 0;
    loop {
        polls += 1;
        let unsent: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE sent_at IS NULL")
            .fetch_one(pool)
            .await
            .expect("unsent outbox rows");
        if unsent == 0 {
            return polls;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
