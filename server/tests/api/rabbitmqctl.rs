//! `rabbitmqctl` for the tests and benches, with a deadline: a broker that
//! cannot answer fails the caller with the likely cause instead of hanging
//! the whole run.

use std::process::Command;

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
