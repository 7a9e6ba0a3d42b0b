//! Test inputs and stand-ins: real multi-page PDFs, a counting embedding
//! endpoint (a real local HTTP server), and separate `docflow worker` processes.

use clap::ValueEnum;
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::helpers::TestApp;
pub use crate::mock_embedder::{EmbedBehaviour, MockEmbedder};
pub use crate::sample_pdf::pdf;
/// The demo users every test process seeds (see `docflow::demo`).
pub use docflow::demo::{ADMIN, ALICE, BOB, VIEWER};

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

/// A Markdown file: a heading over [`prose`], whose parsed text differs
/// from its bytes.
pub fn markdown(seed: &str, sentences: usize) -> Vec<u8> {
    format!("# Notes {seed}\n\n{}", prose(seed, sentences)).into_bytes()
}

/// A separate `docflow worker` process against the test's database and vhost.
pub struct WorkerProcess {
    child: Child,
    /// Its log (stdout), in the test's temporary folder.
    log: PathBuf,
}

impl WorkerProcess {
    pub fn start(app: &TestApp, queues: &str, env: &[(&str, String)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_docflow"));
        cmd.arg("worker")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("DATABASE_URL", &app.iso.database_url)
            .env("AMQP_URL", &app.config.amqp_url)
            .env("DOCFLOW_DATA_DIR", &app.data_dir)
            .env("DOCFLOW_QUEUES", queues)
            .env("DOCFLOW_LEASE", "2s")
            .env("DOCFLOW_SHUTDOWN_GRACE", "2s")
            .env("DOCFLOW_RETRY_DELAYS", "200ms,200ms,200ms")
            // The test's own embedder and model folder.
            .env(
                "DOCFLOW_EMBEDDER",
                app.config
                    .embedder
                    .to_possible_value()
                    .expect("a named embedder")
                    .get_name(),
            )
            .env("DOCFLOW_MODEL_DIR", &app.config.model_dir)
            .stderr(Stdio::inherit());
        if let Some(dims) = app.config.embed_dims {
            cmd.env("DOCFLOW_EMBED_DIMS", dims.to_string());
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let dir = app.data_dir.parent().unwrap_or(&app.data_dir);
        let log = dir.join(format!("worker-{}.log", uuid::Uuid::new_v4().simple()));
        let file = std::fs::File::create(&log).expect("worker log file");
        cmd.stdout(file);
        Self {
            child: cmd.spawn().expect("worker process starts"),
            log,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The end of the process's log, for assertion messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGTERM, then waits up to `timeout` for the process to exit.
    pub fn terminate_and_wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
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
