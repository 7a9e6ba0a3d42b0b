//! A database and a RabbitMQ vhost of its own for each test and bench, so
//! they run in parallel; and `rabbitmqctl` with a deadline: a broker that
//! cannot answer fails the caller with the likely cause instead of hanging
//! the whole run. Shared by the tests and (by path) the benches.

use std::process::Command;

use uuid::Uuid;

/// How long one `rabbitmqctl` call may take (it usually takes under a second).
const DEADLINE_S: &str = "60";

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

/// A fresh database and vhost, named after a random id. Both are removed
/// when the test passes; a failed test leaves them to look at, and the next
/// `scripts/test.sh` removes them (`scripts/clean-test-state.sh`).
pub struct Isolation {
    pub database: String,
    pub database_url: String,
    pub vhost: String,
}

impl Isolation {
    pub fn new() -> Self {
        let id = Uuid::new_v4().simple().to_string()[..12].to_string();
        let vhost = format!("docflow-t-{id}");
        rabbitmqctl(&["add_vhost", &vhost]);
        rabbitmqctl(&["set_permissions", "-p", &vhost, "guest", ".*", ".*", ".*"]);
        let database = format!("docflow_t_{id}");
        Self {
            database_url: format!("postgres://postgres@127.0.0.1:5432/{database}"),
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
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-qc"])
            .arg(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.database
            ))
            .output();
        rabbitmqctl(&["delete_vhost", &self.vhost]);
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
    pub fn leader(&self, queue: &str, ask: u16) -> u16 {
        let out = cluster_sh(&[
            "ctl",
            &ask.to_string(),
            "-q",
            "list_queues",
            "-p",
            &self.0,
            "name",
            "leader",
        ]);
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
        // Three Erlang VMs are no small thing on a test machine.
        let _ = Command::new(script).arg("down").output();
    }
}
