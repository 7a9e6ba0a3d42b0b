//! What an integration test pays before and after it checks anything: its
//! own database and vhost, a migrated schema, the demo users, a docflow
//! process, a login, and the teardown. Built like the tests (`cargo test
//! -p server --bench benches test_setup`, the dev profile), so that it measures what
//! they pay; `SETUP_RUNS` (default 10) set-ups run one after another and
//! each part's median and range are printed.

use crate::common;

use std::time::{Duration, Instant};

use docflow::{platform::config::Config, Application, Roles};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The parts of one set-up and teardown, in the order they run.
const PARTS: [&str; 6] = [
    "database and vhost",
    "schema migrated",
    "demo users",
    "docflow started",
    "one login",
    "stopped and removed",
];

#[tokio::main]
pub async fn main() {
    let runs = env_usize("SETUP_RUNS", 10);
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); PARTS.len()];
    let mut cpu: [Vec<Duration>; 3] = Default::default();
    for _ in 0..runs {
        let cpu_before = cpu_now();
        let mut lap = Instant::now();
        let mut record = |part: usize| {
            samples[part].push(lap.elapsed());
            lap = Instant::now();
        };
        let iso = common::Isolation::demo(common::PASSWORD);
        record(0);
        let pool = docflow::platform::db::connect_and_migrate(&iso.database_url, 2)
            .await
            .expect("migrates");
        record(1);
        docflow::demo::seed(&pool, common::PASSWORD)
            .await
            .expect("demo users");
        pool.close().await;
        record(2);
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut config = Config::local_defaults();
        config.listen = "127.0.0.1:0".parse().expect("addr");
        config.database_url = iso.database_url.clone();
        config.amqp_url = iso.amqp_url(5672);
        config.data_dir = tmp.path().join("data");
        config.db_pool = 10;
        let app = Application::build(config, Roles::web())
            .await
            .expect("docflow builds");
        let base = format!("http://{}", app.addr().expect("web"));
        let shutdown = app.shutdown_token();
        let handle = tokio::spawn(app.run());
        record(3);
        let client = reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .expect("client");
        let r = client
            .post(format!("{base}/api/login"))
            .json(&serde_json::json!({"email": "alice@acme.test", "password": common::PASSWORD}))
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 200, "login");
        record(4);
        shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), handle).await;
        drop(iso);
        record(5);
        for (all, (now, before)) in cpu.iter_mut().zip(cpu_now().into_iter().zip(cpu_before)) {
            all.push(now.saturating_sub(before));
        }
    }
    println!("{runs} set-ups, one after another (median, min-max):");
    let mut total = Duration::ZERO;
    for (part, times) in PARTS.iter().zip(&mut samples) {
        times.sort();
        total += common::quantile(times, 0.5);
        println!(
            "  {part:<22} {:>9}  ({} - {})",
            common::ms(common::quantile(times, 0.5)),
            common::ms(times[0]),
            common::ms(times[times.len() - 1])
        );
    }
    println!("  {:<22} {:>9}", "sum of medians", common::ms(total));
    println!("CPU per set-up and teardown (median):");
    for (who, all) in ["this process and its children", "PostgreSQL", "RabbitMQ"]
        .iter()
        .zip(&mut cpu)
    {
        all.sort();
        println!("  {who:<30} {:>9}", common::ms(common::quantile(all, 0.5)));
    }
}

/// CPU used so far by this process (with the children it waited for, such
/// as `rabbitmqctl`), by PostgreSQL and by RabbitMQ.
fn cpu_now() -> [Duration; 3] {
    let tick = |ticks: u64| Duration::from_secs_f64(ticks as f64 / common::cost::clk_tck());
    let (own, children) = common::cost::ticks(std::process::id()).unwrap_or_default();
    [
        tick(own + children),
        tick(common::cost::cpu_of("postgres")),
        tick(common::cost::cpu_of("beam.smp")),
    ]
}
