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
