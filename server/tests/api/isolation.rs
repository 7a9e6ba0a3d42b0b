//! A database and a RabbitMQ vhost of its own for each test and bench, so
//! they run in parallel; and `rabbitmqctl` with a deadline: a broker that
//! cannot answer fails the caller with the likely cause instead of hanging
//! the whole run. Shared by the tests and (by path) the benches.
//!
//! Setting up is the part every test repeats, so it is made cheap: the
//! database is a copy of a template that was migrated (and, for tests that
//! want them, given the demo users) once per run, and the vhost is made
//! through the management HTTP API instead of two `rabbitmqctl` processes,
//! each of which boots an Erlang VM.

use std::{future::Future, process::Command, time::Duration};

use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

/// How long one `rabbitmqctl` call may take (it usually takes under a second).
const DEADLINE_S: &str = "60";
/// The PostgreSQL server every test database lives on.
const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432";
/// RabbitMQ's management HTTP API (`scripts/setup.sh` enables the plugin).
const MANAGEMENT: &str = "http://127.0.0.1:15672/api";

/// Runs `rabbitmqctl -q <args>`; panics with its error output on failure.
pub fn rabbitmqctl(args: &[&str]) {
    let out = Command::new("timeout")
        .args([DEADLINE_S, "rabbitmqctl", "-q"])
        .args(args)
        .output()
        .expect("timeout and rabbitmqctl run");
    assert!(
        out.status.code() != Some(124),
        "rabbitmqctl {args:?} did not answer in {DEADLINE_S} s. RabbitMQ blocks vhost \
         operations when it runs out of file handles; `rabbitmqctl status` shows them, and \
         scripts/clean-test-state.sh removes the vhosts earlier runs left behind"
    );
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `work` to completion on a runtime of its own, in a thread of its
/// own, so that callers may be synchronous or inside another runtime.
fn block_on<F: Future + Send>(work: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for test set-up")
                    .block_on(work)
            })
            .join()
            .expect("test set-up thread")
    })
}

/// What a test's database holds when it starts.
#[derive(Clone, Copy)]
enum Contents<'a> {
    /// Migrated, no users.
    Migrated,
    /// Migrated, with the demo tenants and users, all with this password.
    Demo(&'a str),
}

impl Contents<'_> {
    /// The template's name: a fingerprint of the migrations, the seeding
    /// code and the password, so that a change to any of them makes a new
    /// template instead of reusing a stale one.
    fn template(&self) -> String {
        let mut hash = Sha256::new();
        for migration in docflow::platform::db::MIGRATOR.iter() {
            hash.update(migration.version.to_le_bytes());
            hash.update(&migration.checksum);
        }
        hash.update(include_str!("../../src/demo.rs"));
        match self {
            Contents::Migrated => hash.update("migrated"),
            Contents::Demo(password) => {
                hash.update("demo");
                hash.update(password);
            }
        }
        format!("docflow_tpl_{}", &hex::encode(hash.finalize())[..16])
    }
}

/// Makes `database` a copy of the template for `contents`, building the
/// template first if no test has yet. Concurrent test processes (nextest
/// runs each test in its own) build it once: the first takes an advisory
/// lock, builds under a temporary name and renames it when complete, so a
/// template that exists is whole.
async fn create_database(database: &str, contents: Contents<'_>) {
    let template = contents.template();
    let mut admin = PgConnection::connect(&format!("{POSTGRES}/postgres"))
        .await
        .expect("PostgreSQL answers at 127.0.0.1:5432");
    if !exists(&mut admin, &template).await {
        // A key of its own per template; held only while one is built.
        let key = i64::from_le_bytes(Sha256::digest(&template)[..8].try_into().expect("8 bytes"));
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut admin)
            .await
            .expect("template lock");
        if !exists(&mut admin, &template).await {
            let building = format!("{template}_building");
            sqlx::query(&format!(
                "DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)"
            ))
            .execute(&mut admin)
            .await
            .expect("dropping a half-built template");
            let pool =
                docflow::platform::db::connect_and_migrate(&format!("{POSTGRES}/{building}"), 2)
                    .await
                    .expect("the template migrates");
            if let Contents::Demo(password) = contents {
                docflow::demo::seed(&pool, password)
                    .await
                    .expect("the template's demo users");
            }
            pool.close().await;
            sqlx::query(&format!(
                "ALTER DATABASE \"{building}\" RENAME TO \"{template}\""
            ))
            .execute(&mut admin)
            .await
            .expect("publishing the template");
        }
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(key)
            .execute(&mut admin)
            .await
            .expect("template unlock");
    }
    sqlx::query(&format!(
        "CREATE DATABASE \"{database}\" TEMPLATE \"{template}\""
    ))
    .execute(&mut admin)
    .await
    .unwrap_or_else(|e| panic!("CREATE DATABASE {database} TEMPLATE {template}: {e}"));
    let _ = admin.close().await;
}

async fn exists(admin: &mut PgConnection, database: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(database)
        .fetch_one(admin)
        .await
        .expect("pg_database")
}

/// One call to the management API; `None` when the API is not there (the
/// plugin is off), so the caller falls back to `rabbitmqctl`.
async fn management(
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> Option<()> {
    let mut request = reqwest::Client::new()
        .request(method.clone(), format!("{MANAGEMENT}{path}"))
        .basic_auth("guest", Some("guest"))
        .timeout(Duration::from_secs(60));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() => return None,
        Err(e) => panic!("RabbitMQ management API {method} {path}: {e}"),
    };
    let status = response.status();
    assert!(
        status.is_success() || (method == reqwest::Method::DELETE && status == 404),
        "RabbitMQ management API {method} {path}: {status} {}",
        response.text().await.unwrap_or_default()
    );
    Some(())
}

/// Creates `vhost` with every permission for `guest`.
async fn create_vhost(vhost: &str) {
    let path = format!("/vhosts/{vhost}");
    if management(reqwest::Method::PUT, &path, None)
        .await
        .is_none()
    {
        rabbitmqctl(&["add_vhost", vhost]);
        rabbitmqctl(&["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]);
        return;
    }
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    management(
        reqwest::Method::PUT,
        &format!("/permissions/{vhost}/guest"),
        Some(everything),
    )
    .await
    .expect("the management API answered a moment ago");
}

async fn delete_vhost(vhost: &str) {
    if management(reqwest::Method::DELETE, &format!("/vhosts/{vhost}"), None)
        .await
        .is_none()
    {
        rabbitmqctl(&["delete_vhost", vhost]);
    }
}

/// A fresh database and vhost, named after a random id. Both are removed
/// when the test passes; a failed test leaves them to look at, and the next
/// `scripts/test.sh` removes them (`scripts/clean-test-state.sh`).
pub struct Isolation {
    pub database: String,
    pub database_url: String,
    pub vhost: String,
}

impl Isolation {
    /// A migrated database with no users, and an empty vhost.
    pub fn new() -> Self {
        Self::with(Contents::Migrated)
    }

    /// A migrated database with the demo tenants and users (all with
    /// `password`), and an empty vhost.
    pub fn demo(password: &str) -> Self {
        Self::with(Contents::Demo(password))
    }

    fn with(contents: Contents<'_>) -> Self {
        let id = Uuid::new_v4().simple().to_string()[..12].to_string();
        let vhost = format!("docflow-t-{id}");
        let database = format!("docflow_t_{id}");
        block_on(async {
            tokio::join!(create_vhost(&vhost), create_database(&database, contents));
        });
        Self {
            database_url: format!("{POSTGRES}/{database}"),
            database,
            vhost,
        }
    }

    pub fn amqp_url(&self, port: u16) -> String {
        format!("amqp://guest:guest@127.0.0.1:{port}/{}", self.vhost)
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "kept for a look: database {}, vhost {}",
                self.database, self.vhost
            );
            return;
        }
        // Every vhost holds file handles in RabbitMQ: left behind by the
        // hundred, they exhaust its limit and vhost creation hangs.
        block_on(async {
            let drop_database = async {
                if let Ok(mut admin) = PgConnection::connect(&format!("{POSTGRES}/postgres")).await
                {
                    let sql = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.database);
                    let _ = sqlx::query(&sql).execute(&mut admin).await;
                    let _ = admin.close().await;
                }
            };
            tokio::join!(drop_database, delete_vhost(&self.vhost));
        });
    }
}

/// Runs `scripts/cluster.sh args…` and returns what it printed.
pub fn cluster_sh(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster.sh");
    let out = Command::new("timeout")
        .arg("300")
        .arg(script)
        .args(args)
        .output()
        .expect("scripts/cluster.sh runs");
    assert!(
        out.status.success(),
        "cluster.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`cluster_sh`] on the blocking pool. A node takes seconds to stop and
/// many more to start and rejoin; on the test's runtime thread that would
/// stand the test's docflow processes still meanwhile, and a worker unheard
/// of for longer than its lease rightly loses its jobs to another, which
/// repeats their last embedding batch. That is a paused process, not what
/// a broker node's failure does to docflow.
pub async fn cluster_sh_off_thread(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        cluster_sh(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("cluster.sh ran")
}

/// A vhost on the three-node cluster of `scripts/cluster.sh` (started if
/// it is not up); the cluster goes when its user is done, unless it panicked.
pub struct ClusterVhost(pub String);

impl ClusterVhost {
    pub fn new() -> Self {
        cluster_sh(&["up"]);
        let name = format!(
            "docflow-c-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        cluster_sh(&["ctl", "1", "-q", "add_vhost", &name]);
        cluster_sh(&[
            "ctl",
            "1",
            "-q",
            "set_permissions",
            "-p",
            &name,
            "guest",
            ".*",
            ".*",
            ".*",
        ]);
        Self(name)
    }

    /// `AMQP_URL` naming the nodes in `order`.
    pub fn url(&self, order: [u16; 3]) -> String {
        order
            .iter()
            .map(|n| format!("amqp://guest:guest@127.0.0.1:{}/{}", 5680 + n, self.0))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node (1-3) leading `queue`, asked of a running node.
    pub async fn leader(&self, queue: &str, ask: u16) -> u16 {
        let out = cluster_sh_off_thread(&[
            "ctl",
            &ask.to_string(),
            "-q",
            "list_queues",
            "-p",
            &self.0,
            "name",
            "leader",
        ])
        .await;
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(queue))
            .unwrap_or_else(|| panic!("{queue} listed: {out}"));
        let leader = line.split_whitespace().nth(1).expect("leader column");
        leader
            .strip_prefix("docflow")
            .and_then(|r| r.split('@').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a node name: {line}"))
    }
}

impl Drop for ClusterVhost {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/cluster.sh");
        if std::thread::panicking() {
            // Kept for a look (`scripts/cluster.sh status`); the next
            // `scripts/test.sh` removes it.
            eprintln!("cluster kept: vhost {}", self.0);
            return;
        }
        // Three Erlang VMs are no small thing on a test machine. A run that
        // uses the cluster again later (scripts/test.sh: the drain bench on
        // it) keeps it up and takes it down itself, sparing a second start.
        if std::env::var_os("DOCFLOW_CLUSTER_KEEP").is_some() {
            cluster_sh(&["ctl", "1", "-q", "delete_vhost", &self.0]);
            return;
        }
        let _ = Command::new(script).arg("down").output();
    }
}
