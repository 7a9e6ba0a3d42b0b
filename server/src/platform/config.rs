//! Command line and environment configuration: one `Config` tree, every flag
//! also an environment variable, defaults that serve a local run.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Dimensions of the local embedder's vectors (`--embedder local`, the
/// default of `local_defaults`).
pub const LOCAL_DIMS: usize = 384;

/// docflow: document ingestion jobs with an operations dashboard.
#[derive(Debug, Parser)]
#[command(name = "docflow", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Everything in one process: web, outbox relay, workers, dead-letter keeper, sweepers.
    Run {
        #[command(flatten)]
        config: Config,
        #[command(flatten)]
        demo: DemoArgs,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// Everything but workers: HTTP, SSE, outbox relay, dead-letter keeper, sweepers.
    Web {
        #[command(flatten)]
        config: Config,
        #[command(flatten)]
        demo: DemoArgs,
    },
    /// A worker group consuming the given queues.
    Worker {
        #[command(flatten)]
        config: Config,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// Create the database if missing and apply migrations.
    Migrate {
        #[command(flatten)]
        config: Config,
    },
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage API tokens (`Authorization: Bearer`).
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// A parser child, started by a worker (not for people to run).
    #[command(name = "parse-child", hide = true)]
    ParseChild {
        /// Address-space limit in bytes.
        #[arg(long)]
        memory: u64,
        /// Tesseract's languages.
        #[arg(long, default_value = crate::parser::ocr::DEFAULT_LANGUAGES, value_parser = parse_languages)]
        ocr_languages: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user (and its tenant if new). The password is read from
    /// `DOCFLOW_PASSWORD` or asked for on standard input.
    Add {
        #[command(flatten)]
        config: Config,
        #[arg(long)]
        email: String,
        /// Tenant slug; created with `--plan` if it does not exist.
        #[arg(long)]
        tenant: String,
        #[arg(long, value_enum, default_value_t = RoleArg::Member)]
        role: RoleArg,
        /// Plan of a tenant created by this command.
        #[arg(long, value_enum, default_value_t = PlanArg::Free)]
        plan: PlanArg,
        #[arg(long, env = "DOCFLOW_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
    /// Set a user's password (read from `DOCFLOW_PASSWORD` or standard
    /// input). Every session of the user ends, and its open event streams
    /// with them.
    Password {
        #[command(flatten)]
        config: Config,
        #[arg(long)]
        email: String,
        #[arg(long, env = "DOCFLOW_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token for a user; prints the secret once (it is not stored).
    Create {
        #[command(flatten)]
        config: Config,
        #[arg(long)]
        email: String,
        /// A name to tell the user's tokens apart (`ci`, `backup script`).
        #[arg(long, default_value = "cli")]
        name: String,
        /// How long the token works, e.g. `90days`; without it, until revoked.
        #[arg(long, value_parser = parse_duration)]
        expires_in: Option<Duration>,
    },
    /// List a user's tokens: name, id, created, last used, expiry, state.
    List {
        #[command(flatten)]
        config: Config,
        #[arg(long)]
        email: String,
    },
    /// Revoke a user's token (by the id `list` shows, or every token with
    /// `--all`); requests and event streams using it are refused at once.
    Revoke {
        #[command(flatten)]
        config: Config,
        #[arg(long)]
        email: String,
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        id: Option<uuid::Uuid>,
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Admin,
    Member,
    /// Sees what admins see; every action is refused.
    Viewer,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PlanArg {
    Free,
    Paid,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Seed demo tenants and users when the database has no users.
    #[arg(long)]
    pub demo: bool,
    /// Password of the demo users.
    #[arg(
        long,
        env = "DOCFLOW_DEMO_PASSWORD",
        default_value = "docflow-demo",
        hide_env_values = true
    )]
    pub demo_password: String,
}

/// What a worker process consumes and how many jobs it runs at once.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// A queue to consume and the slots reserved for it: `--queue high=4
    /// --queue normal=2`. `high` and `normal` share the group's slots
    /// (`--slots`), paid first; a queue given without `=N` reserves none.
    /// `slow` is a group of its own with `N` slots (1 when not given).
    #[arg(long = "queue", env = "DOCFLOW_QUEUES", value_delimiter = ',', default_values = ["high", "normal=1", "slow=1"])]
    pub queues: Vec<QueueArg>,
    /// Jobs of `high` and `normal` run at once by this process. A free slot
    /// goes to `high` first, then `normal`, leaving each queue its reserved
    /// slots; when the reservations add up to more, they are the total
    /// (`--queue high=4 --queue normal=2 --slots 6` is a fixed split).
    #[arg(long, env = "DOCFLOW_SLOTS", default_value_t = 6)]
    pub slots: u16,
}

/// A `--queue name[=reserved slots]` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueArg {
    pub tier: crate::jobs::Tier,
    /// Slots reserved for the queue (for `slow`: its group's slots).
    pub concurrency: u16,
}

impl std::str::FromStr for QueueArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, n) = s.split_once('=').unwrap_or((s, ""));
        let tier: crate::jobs::Tier = name.parse()?;
        let own_group = tier == crate::jobs::Tier::Slow;
        let concurrency: u16 = match n {
            "" => u16::from(own_group),
            n => n
                .parse()
                .map_err(|_| format!("slots of queue `{name}` must be a number, got `{n}`"))?,
        };
        if own_group && concurrency == 0 {
            return Err(format!("queue `{name}` needs at least 1 slot"));
        }
        Ok(Self { tier, concurrency })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// all-MiniLM-L6-v2 run in process on the CPU (its files in
    /// `DOCFLOW_MODEL_DIR`, fetched by `scripts/setup.sh`).
    Minilm,
    /// Hashed words: deterministic, offline, for tests and benches of
    /// docflow's own overhead; it matches words, not meaning.
    Local,
    /// Any OpenAI-compatible `/v1/embeddings` endpoint.
    Openai,
}

/// Settings shared by every process kind.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// HTTP address to listen on.
    #[arg(long, env = "DOCFLOW_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// PostgreSQL; the database is created and migrated if missing.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/docflow"
    )]
    pub database_url: String,
    /// RabbitMQ, with the vhost in the path.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub amqp_url: String,
    /// Root of the local blob store.
    #[arg(long, env = "DOCFLOW_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// S3-compatible blob store URL (e.g. `s3://bucket/prefix`); overrides the data dir.
    #[arg(long, env = "DOCFLOW_BLOB_URL")]
    pub blob_url: Option<String>,
    /// Embedder: `minilm` (a real model, in process), `local` (hashed
    /// words, for tests) or `openai`.
    #[arg(long, env = "DOCFLOW_EMBEDDER", value_enum, default_value_t = EmbedderKind::Minilm)]
    pub embedder: EmbedderKind,
    /// Where `scripts/fetch-model.sh` put the model files
    /// (`<dir>/all-minilm-l6-v2/`).
    #[arg(long, env = "DOCFLOW_MODEL_DIR", default_value = "./models")]
    pub model_dir: PathBuf,
    /// Threads for in-process inference per process (default: the cores).
    #[arg(long, env = "DOCFLOW_EMBED_THREADS")]
    pub embed_threads: Option<usize>,
    /// Dimensions of an OpenAI-compatible model's vectors (known for
    /// OpenAI's own models).
    #[arg(long, env = "DOCFLOW_EMBED_DIMS")]
    pub embed_dims: Option<usize>,
    /// Base URL of an OpenAI-compatible API (`…/v1/embeddings` is appended if missing).
    #[arg(long, env = "DOCFLOW_EMBED_URL")]
    pub embed_url: Option<String>,
    /// Embedding model name sent to the API.
    #[arg(
        long,
        env = "DOCFLOW_EMBED_MODEL",
        default_value = "text-embedding-3-small"
    )]
    pub embed_model: String,
    /// API key for the embedding endpoint.
    #[arg(long, env = "DOCFLOW_EMBED_API_KEY", hide_env_values = true)]
    pub embed_api_key: Option<String>,
    /// Chunks per embedding request; each batch is persisted when it returns.
    #[arg(long, env = "DOCFLOW_EMBED_BATCH", default_value_t = 32)]
    pub embed_batch: u16,
    /// The cosine similarity from which a passage counts as near the query
    /// in meaning: a passage holding none of the query's words is a result
    /// only from there. Default: 0.25 with `minilm` (a question and the
    /// passage it means score about 0.3 to 0.6, unrelated text below 0.2),
    /// 0.12 with `local` (which also wants a near spelling of a query
    /// word), 0.3 with an OpenAI-compatible model.
    #[arg(long, env = "DOCFLOW_SEARCH_MIN_SCORE")]
    pub search_min_score: Option<f32>,
    /// Embedding requests per second for the whole deployment, shared by
    /// every worker process through PostgreSQL (unlimited when unset).
    #[arg(long, env = "DOCFLOW_EMBED_RPS")]
    pub embed_rps: Option<u32>,
    /// One delay per retry; their count is the retry limit.
    #[arg(long, env = "DOCFLOW_RETRY_DELAYS", default_value = "1s,4s,16s", value_parser = parse_delays)]
    pub retry_delays: RetryDelays,
    /// Let webhook URLs reach loopback, link-local and private addresses
    /// (refused otherwise, so webhooks cannot probe the internal network).
    #[arg(long, env = "DOCFLOW_WEBHOOK_ALLOW_PRIVATE", default_value_t = false)]
    pub webhook_allow_private: bool,
    /// Let webhook URLs use plain `http` (on with `--demo`).
    #[arg(long, env = "DOCFLOW_WEBHOOK_ALLOW_HTTP", default_value_t = false)]
    pub webhook_allow_http: bool,
    /// The first retry of a failed webhook delivery waits this long; each
    /// next one twice as long (at most an hour), ±20 % jitter.
    #[arg(long, env = "DOCFLOW_WEBHOOK_BACKOFF", default_value = "10s", value_parser = parse_duration)]
    pub webhook_backoff: Duration,
    /// The longest wait between two attempts of a webhook delivery.
    #[arg(long, env = "DOCFLOW_WEBHOOK_BACKOFF_MAX", default_value = "1h", value_parser = parse_duration)]
    pub webhook_backoff_max: Duration,
    /// How long a webhook delivery is retried before it is given up.
    #[arg(long, env = "DOCFLOW_WEBHOOK_RETRY_FOR", default_value = "24h", value_parser = parse_duration)]
    pub webhook_retry_for: Duration,
    /// Page count above which a document goes to the `slow` queue.
    #[arg(long, env = "DOCFLOW_SLOW_PAGES", default_value_t = 200)]
    pub slow_pages: u32,
    /// Larger uploads get 413.
    #[arg(long, env = "DOCFLOW_MAX_UPLOAD_BYTES", default_value_t = 52_428_800)]
    pub max_upload_bytes: u64,
    /// Unfinished jobs above which uploads get 503.
    #[arg(long, env = "DOCFLOW_MAX_BACKLOG", default_value_t = 10_000)]
    pub max_backlog: i64,
    /// Job lease, renewed by heartbeat while a worker runs the job.
    #[arg(long, env = "DOCFLOW_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub lease: Duration,
    /// Time running steps get to finish on shutdown before their leases are released.
    #[arg(long, env = "DOCFLOW_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Age of a queue's oldest unfinished job past which the dashboard shows
    /// the queue in warning colour.
    #[arg(long, env = "DOCFLOW_AGE_WARN", default_value = "5m", value_parser = parse_duration)]
    pub age_warn: Duration,
    /// How often gauges and the dashboard's time series are sampled.
    #[arg(long, env = "DOCFLOW_SAMPLE_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub sample_interval: Duration,
    /// Address for `/metrics` and `/healthz` in processes without the web role
    /// (`docflow worker`); unset means none.
    #[arg(long, env = "DOCFLOW_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Folder with the built site (`pkg/docflow.js`, `.wasm`, `.css`).
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "DOCFLOW_LOG_JSON")]
    pub log_json: bool,
    /// Memory (address space) of each parser child, e.g. `512MB`.
    #[arg(long, env = "DOCFLOW_PARSE_MEMORY", default_value = "512MB", value_parser = parse_size)]
    pub parse_memory: u64,
    /// Wall-clock time, and CPU time, for parsing one document.
    #[arg(long, env = "DOCFLOW_PARSE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub parse_timeout: Duration,
    /// Largest text one document may yield, e.g. `32MB`; more fails the document.
    #[arg(long, env = "DOCFLOW_MAX_TEXT_BYTES", default_value = "32MB", value_parser = parse_size)]
    pub max_text_bytes: u64,
    /// Most pages a PDF may have (declared or found).
    #[arg(long, env = "DOCFLOW_MAX_PAGES", default_value_t = 10_000)]
    pub max_pages: u32,
    /// Languages OCR recognises, as Tesseract names them joined by `+`
    /// (`eng`, `eng+deu`); each needs its `tesseract-ocr-<lang>` package.
    #[arg(long, env = "DOCFLOW_OCR_LANGUAGES", default_value = crate::parser::ocr::DEFAULT_LANGUAGES, value_parser = parse_languages)]
    pub ocr_languages: String,
    /// Most pixels a page is recognised at: a scanned PDF page is drawn at
    /// up to 300 dpi within it, a larger image is refused.
    #[arg(long, env = "DOCFLOW_OCR_MAX_PIXELS", default_value_t = 40_000_000)]
    pub ocr_max_pixels: u64,
    /// Most pages of one document recognised by OCR (scanned PDF pages,
    /// TIFF pages); a document with more fails.
    #[arg(long, env = "DOCFLOW_OCR_MAX_PAGES", default_value_t = 1_000)]
    pub ocr_max_pages: u32,
    /// Parser children per worker process (default: the number of CPUs).
    #[arg(long, env = "DOCFLOW_PARSERS")]
    pub parsers: Option<usize>,
    /// Program run as the parser child (default: this docflow binary).
    #[arg(long, env = "DOCFLOW_PARSER_EXE")]
    pub parser_exe: Option<PathBuf>,
    /// Deadline of one step; a step past it is abandoned and counts as a failure.
    #[arg(long, env = "DOCFLOW_STEP_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub step_timeout: Duration,
    /// Worker deaths during one job after which it is dead-lettered as `crashed`.
    #[arg(long, env = "DOCFLOW_MAX_CRASHES", default_value_t = 2)]
    pub max_crashes: i32,
    /// Consecutive transient failures of a dependency (the embedding
    /// provider) that open its circuit breaker.
    #[arg(long, env = "DOCFLOW_BREAKER_FAILURES", default_value_t = 5)]
    pub breaker_failures: u32,
    /// First probe interval of an open breaker; doubles after each failed probe.
    #[arg(long, env = "DOCFLOW_BREAKER_PROBE", default_value = "2s", value_parser = parse_duration)]
    pub breaker_probe: Duration,
    /// Longest probe interval of an open breaker.
    #[arg(long, env = "DOCFLOW_BREAKER_PROBE_MAX", default_value = "60s", value_parser = parse_duration)]
    pub breaker_probe_max: Duration,
    /// How long a job may wait for its message before the reconciler
    /// re-publishes it (a purged queue, a lost broker node).
    #[arg(long, env = "DOCFLOW_RECONCILE_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub reconcile_grace: Duration,
    /// How long job events, read notifications and dashboard samples are kept.
    #[arg(long, env = "DOCFLOW_RETENTION", default_value = "30days", value_parser = parse_duration)]
    pub retention: Duration,
    /// When set, `GET /metrics` needs `Authorization: Bearer <this token>`.
    #[arg(long, env = "DOCFLOW_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Percentage of `DOCFLOW_MAX_BACKLOG` one tenant may hold unfinished;
    /// past it, that tenant's uploads get 429 while others' go on.
    #[arg(long, env = "DOCFLOW_TENANT_SHARE", default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub tenant_share: u8,
    /// Unfinished documents a tenant on the free plan may have at once;
    /// past it, its uploads get 429. A tenant's own limit
    /// (`tenants.max_unfinished_jobs`) takes precedence. Unset: only the
    /// fair share applies.
    #[arg(long, env = "DOCFLOW_FREE_MAX_UNFINISHED")]
    pub free_max_unfinished: Option<u32>,
    /// The same for tenants on the paid plan.
    #[arg(long, env = "DOCFLOW_PAID_MAX_UNFINISHED")]
    pub paid_max_unfinished: Option<u32>,
    /// Event streams (SSE) one user may have open per web process; one more
    /// gets 429 `too_many_streams`.
    #[arg(long, env = "DOCFLOW_SSE_PER_USER", default_value_t = 20)]
    pub sse_per_user: usize,
    /// The site's public origin (`https://docs.example.com`), when it is not
    /// `DOCFLOW_LISTEN` (behind a proxy). With `https`, session cookies are
    /// `Secure` and named `__Host-docflow_session`, and pages send HSTS;
    /// cross-site checks accept this origin.
    #[arg(long, env = "DOCFLOW_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// How long a session lasts after login, however active it is; then
    /// its user logs in again.
    #[arg(long, env = "DOCFLOW_SESSION_MAX", default_value = "7days", value_parser = parse_duration)]
    pub session_max: Duration,
    /// How long a session lasts without a request.
    #[arg(long, env = "DOCFLOW_SESSION_IDLE", default_value = "1day", value_parser = parse_duration)]
    pub session_idle: Duration,
    /// Largest PostgreSQL pool size for queries; the process's `LISTEN`
    /// connections (four at most, see `db::listeners`) come on top.
    #[arg(long, env = "DOCFLOW_DB_POOL", default_value_t = 20)]
    pub db_pool: u32,
}

/// Delays between retries; `len()` is the retry limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryDelays(pub Vec<Duration>);

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration like 30s or 500ms: {e}"))
}

/// A Tesseract language list (`eng`, `eng+deu`).
fn parse_languages(s: &str) -> Result<String, String> {
    if crate::parser::ocr::valid_languages(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a Tesseract language list (names such as eng or chi_sim joined by +)"
        ))
    }
}

/// A size in bytes: `1048576`, `512KB`, `512MB`, `2GB` (binary multiples;
/// `MiB` and friends are accepted too).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a size like 512MB"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("`{s}` has an unknown unit; use KB, MB or GB")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

fn parse_delays(s: &str) -> Result<RetryDelays, String> {
    if s.trim().is_empty() {
        return Ok(RetryDelays(Vec::new()));
    }
    s.split(',')
        .map(parse_duration)
        .collect::<Result<_, _>>()
        .map(RetryDelays)
}

impl Config {
    /// Whether the site is served over https (`DOCFLOW_PUBLIC_URL`).
    pub fn https(&self) -> bool {
        self.public_url
            .as_deref()
            .is_some_and(|u| u.trim().to_ascii_lowercase().starts_with("https://"))
    }

    /// Threads for in-process inference.
    pub fn embed_threads(&self) -> usize {
        self.embed_threads
            .filter(|n| *n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from))
    }

    /// The similarity from which a passage is near a query in meaning:
    /// `DOCFLOW_SEARCH_MIN_SCORE`, else the embedder's default.
    pub fn search_min_score(&self) -> f32 {
        self.search_min_score.unwrap_or(match self.embedder {
            EmbedderKind::Minilm => 0.25,
            EmbedderKind::Local => 0.12,
            EmbedderKind::Openai => 0.3,
        })
    }

    /// Defaults for a local run, as if no flag or variable were set (the
    /// shell's `DOCFLOW_*` variables are not read: a developer's
    /// environment does not change what a test runs with), but for what
    /// tests and benches want: the hashed `local` embedder (a test that
    /// wants the real model says so; its files are in the workspace's
    /// `models/`), and 384-dimensional vectors from an OpenAI-compatible
    /// mock.
    pub fn local_defaults() -> Self {
        use clap::{CommandFactory, FromArgMatches};
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            config: Config,
        }
        let matches = Wrap::command()
            .mut_args(|arg| arg.env(None))
            .get_matches_from(["docflow"]);
        let mut config = Wrap::from_arg_matches(&matches)
            .unwrap_or_else(|e| e.exit())
            .config;
        config.embedder = EmbedderKind::Local;
        config.embed_dims = Some(LOCAL_DIMS);
        config.model_dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models"));
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_defaults_ignore_the_shells_variables() {
        let before = Config::local_defaults();
        // Each test runs in a process of its own (nextest): nothing else
        // reads the environment meanwhile.
        std::env::set_var("DOCFLOW_LEASE", "3s");
        std::env::set_var("DOCFLOW_EMBED_BATCH", "3");
        let after = Config::local_defaults();
        assert_eq!(after.lease, before.lease);
        assert_ne!(after.lease, Duration::from_secs(3));
        assert_eq!(after.embed_batch, before.embed_batch);
    }

    #[test]
    fn retry_delays_parse_in_order() {
        let d = parse_delays("1s,4s,16s").expect("valid");
        assert_eq!(
            d.0,
            vec![
                Duration::from_secs(1),
                Duration::from_secs(4),
                Duration::from_secs(16)
            ]
        );
        assert!(parse_delays("1s,soon").is_err());
        assert_eq!(parse_delays("").expect("empty").0.len(), 0);
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_size("64 KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MB").is_err());
    }

    #[test]
    fn queue_args_name_a_tier_and_a_concurrency() {
        let q: QueueArg = "high=4".parse().expect("valid");
        assert_eq!(q.concurrency, 4);
        let shared = |s: &str| s.parse::<QueueArg>().expect(s).concurrency;
        assert_eq!(shared("high=0"), 0, "shared slots only");
        assert_eq!(shared("normal"), 0, "no reservation");
        assert_eq!(shared("slow"), 1, "slow is a group of its own");
        assert!("slow=0".parse::<QueueArg>().is_err());
        assert!("high=many".parse::<QueueArg>().is_err());
        assert!("urgent=1".parse::<QueueArg>().is_err());
    }
}
