//! Login flood: the memory of one `docflow web` process while
//! `FLOOD_REQUESTS` (default 500) wrong-password logins arrive at once.
//! Each password check (argon2) holds 19 MiB, so 500 at once would need
//! 9.3 GiB; the throttle (`server/src/identity/throttle.rs`) lets a few run at a time
//! and refuses the rest with 429 once the account's or the address's
//! failures are over their limit.
//!
//! docflow runs as a child process (the `docflow` binary of the same build),
//! so `/proc/<pid>/status` is the server's memory alone: `VmRSS` is sampled
//! every 10 ms during the flood, and `VmHWM` (the process's high-water mark)
//! is read when the last answer is in. Two scenarios, each on a fresh
//! process (fresh throttle state and high-water mark):
//!
//! - one account (`alice@acme.test`), one client address;
//! - a different made-up e-mail per request, one client address, so the
//!   per-account limit never applies and only the per-address limit and
//!   the hashing semaphore hold the flood back.
//!
//! The flood comes from 127.0.0.2; after it, the correct password of
//! another account (`bob@globex.test`), from 127.0.0.1, must still log in.
//! Reports baseline RSS (idle, before any password check), peak RSS,
//! peak − baseline (the larger of the sampled peak and `VmHWM`), RSS a
//! second later, the answers (401 / 429 with `Retry-After` / other) and the
//! wall time; fails, after printing, on any other answer or if that login
//! is refused.
//!
//! Run: `cargo bench -p server --bench benches login_flood` (`FLOOD_REQUESTS`,
//! default 500). `FLOOD_REQUESTS=20 cargo test -p server --bench
//! login_flood` runs it small in the debug build.

use crate::common;

use std::{
    net::IpAddr,
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

/// Where the flood comes from; the legitimate login comes from 127.0.0.1.
const FLOOD_FROM: [u8; 4] = [127, 0, 0, 2];
const FLOODED_ACCOUNT: &str = "alice@acme.test";
const OTHER_ACCOUNT: &str = "bob@globex.test";
/// Memory an argon2 check holds while it runs (`m_cost` 19,456 KiB).
const ARGON2_KIB: u64 = 19 * 1024;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

/// Runs the `docflow` binary of this build with the bench's database.
fn docflow(iso: &common::Isolation, data_dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_docflow"));
    cmd.env("DATABASE_URL", &iso.database_url)
        .env("AMQP_URL", iso.amqp_url(5672))
        .env("DOCFLOW_DATA_DIR", data_dir)
        // The password checks' memory alone: no embedding model loaded.
        .env("DOCFLOW_EMBEDDER", "local")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

/// A `docflow web` child process, stopped when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(iso: &common::Isolation, data_dir: &std::path::Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = docflow(iso, data_dir)
            .arg("web")
            .env("DOCFLOW_LISTEN", format!("127.0.0.1:{port}"))
            .spawn()
            .expect("docflow web starts");
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let probe = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = probe
                .get(format!("{}/readyz", server.base))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "docflow web not ready in 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The largest `VmRSS` seen every 10 ms until stopped, on a thread of its
/// own so the flood's tasks cannot delay it.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, usize)>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut peak, mut samples) = (0, 0);
            while !flag.load(Ordering::Relaxed) {
                if let Some(kb) = status_kb(pid, "VmRSS") {
                    peak = peak.max(kb);
                    samples += 1;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (peak, samples)
        });
        Self { stop, thread }
    }

    /// The peak RSS in KiB and the number of samples.
    fn finish(self) -> (u64, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread")
    }
}

/// A client whose connections come from `from`.
fn client(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(from))
        .timeout(Duration::from_secs(600))
        .build()
        .expect("client")
}

async fn login(client: &reqwest::Client, base: &str, email: &str, password: &str) -> Answer {
    let sent = client
        .post(format!("{base}/api/login"))
        .json(&serde_json::json!({"email": email, "password": password}))
        .send()
        .await;
    match sent {
        Ok(r) if r.status() == 401 => Answer::Unauthorized,
        Ok(r) if r.status() == 429 && r.headers().contains_key("retry-after") => Answer::Throttled,
        Ok(r) => Answer::Other(format!("{}", r.status())),
        Err(e) => Answer::Other(format!("no answer: {e}")),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Unauthorized,
    /// 429 with `Retry-After`.
    Throttled,
    /// Anything else (a 429 without `Retry-After` included).
    Other(String),
}

struct Outcome {
    scenario: &'static str,
    baseline_kb: u64,
    peak_kb: u64,
    hwm_kb: u64,
    after_kb: u64,
    samples: usize,
    unauthorized: usize,
    throttled: usize,
    other: Vec<String>,
    wall: Duration,
    legit: u16,
}

/// One flood against a fresh `docflow web`: `emails(i)` is the e-mail of
/// the `i`th request, each with a wrong password.
async fn flood(
    scenario: &'static str,
    iso: &common::Isolation,
    data_dir: &std::path::Path,
    requests: usize,
    emails: impl Fn(usize) -> String,
) -> Outcome {
    let server = Server::start(iso, data_dir).await;
    // Let start-up work settle before the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline_kb = status_kb(server.pid(), "VmRSS").expect("server's VmRSS");
    let sampler = Sampler::start(server.pid());
    let attacker = client(FLOOD_FROM);
    let started = Instant::now();
    let tasks: Vec<_> = (0..requests)
        .map(|i| {
            let (attacker, base, email) = (attacker.clone(), server.base.clone(), emails(i));
            tokio::spawn(async move { login(&attacker, &base, &email, "wrong-password").await })
        })
        .collect();
    let mut answers = Vec::with_capacity(requests);
    for t in tasks {
        answers.push(t.await.expect("flood task"));
    }
    let wall = started.elapsed();
    let hwm_kb = status_kb(server.pid(), "VmHWM").expect("server's VmHWM");
    let (peak_kb, samples) = sampler.finish();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_kb = status_kb(server.pid(), "VmRSS").expect("server's VmRSS");
    let legit = client([127, 0, 0, 1])
        .post(format!("{}/api/login", server.base))
        .json(&serde_json::json!({"email": OTHER_ACCOUNT, "password": common::PASSWORD}))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16());
    drop(server);
    let count = |a: &Answer| answers.iter().filter(|b| *b == a).count();
    Outcome {
        scenario,
        baseline_kb,
        peak_kb,
        hwm_kb,
        after_kb,
        samples,
        unauthorized: count(&Answer::Unauthorized),
        throttled: count(&Answer::Throttled),
        other: answers
            .iter()
            .filter_map(|a| match a {
                Answer::Other(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        wall,
        legit,
    }
}

#[tokio::main]
pub async fn main() {
    let requests = env_usize("FLOOD_REQUESTS", 500);
    let iso = common::Isolation::new();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    // Users are added by separate processes, so the measured server has
    // hashed no password before the flood.
    for (email, tenant) in [(FLOODED_ACCOUNT, "acme"), (OTHER_ACCOUNT, "globex")] {
        let status = docflow(&iso, &data_dir)
            .args(["user", "add", "--email", email, "--tenant", tenant])
            .env("DOCFLOW_PASSWORD", common::PASSWORD)
            .status()
            .expect("docflow user add runs");
        assert!(
            status.success(),
            "docflow user add --email {email}: {status}"
        );
    }
    let account = flood(
        "one account, one address",
        &iso,
        &data_dir,
        requests,
        |_| FLOODED_ACCOUNT.to_string(),
    )
    .await;
    let accounts = flood(
        "a made-up e-mail per request, one address",
        &iso,
        &data_dir,
        requests,
        |i| format!("nobody-{i}@flood.test"),
    )
    .await;
    let checks = std::thread::available_parallelism().map_or(2, usize::from);

    println!(
        "login flood: {requests} concurrent wrong-password logins against one `docflow web` \
         process ({checks} password checks of {} at once, one per CPU)",
        mib(ARGON2_KIB)
    );
    println!(
        "| scenario | baseline RSS | peak RSS (sampled / VmHWM) | peak − baseline | RSS 1 s after | 401 | 429 | other | wall |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for o in [&account, &accounts] {
        let peak = o.peak_kb.max(o.hwm_kb);
        println!(
            "| {} | {} | {} / {} | **{}** | {} | {} | {} | {} | {:.2} s |",
            o.scenario,
            mib(o.baseline_kb),
            mib(o.peak_kb),
            mib(o.hwm_kb),
            mib(peak.saturating_sub(o.baseline_kb)),
            mib(o.after_kb),
            o.unauthorized,
            o.throttled,
            o.other.len(),
            o.wall.as_secs_f64(),
        );
    }
    for o in [&account, &accounts] {
        println!(
            "  {}: {} RSS samples; then {OTHER_ACCOUNT} with its correct password from \
             another address: {}",
            o.scenario, o.samples, o.legit
        );
        if let Some(first) = o.other.first() {
            println!("  {}: first other answer: {first}", o.scenario);
        }
    }
    // Checked after printing, so a failed run still shows its numbers.
    for o in [&account, &accounts] {
        assert!(
            o.other.is_empty(),
            "{}: answers other than 401 and 429 with Retry-After",
            o.scenario
        );
        assert_eq!(
            o.legit, 200,
            "{}: {OTHER_ACCOUNT} could not log in after the flood",
            o.scenario
        );
    }
}
