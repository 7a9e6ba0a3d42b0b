//! Services a test or benchmark runs for itself: a RabbitMQ node and a
//! PostgreSQL cluster on their own ports, stopped and started at will
//! without disturbing the shared servers. Shared with the benchmarks.

#![allow(dead_code)]

use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use uuid::Uuid;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port()
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A RabbitMQ node of the test's own: own name, ports and data folder.
pub struct RabbitNode {
    pub name: String,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RabbitNode {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = &Uuid::new_v4().simple().to_string()[..8];
        let name = format!("docflow-t-{id}@localhost");
        let port = free_port();
        let dist = free_port();
        let base: PathBuf = dir.path().to_path_buf();
        // Our own listener: the machine's rabbitmq.conf names 5672.
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .expect("config");
        // The server drops to the rabbitmq user, which must own its folders.
        run(Command::new("chown")
            .args(["-R", "rabbitmq:rabbitmq"])
            .arg(&base));
        run(Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &name)
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_PID_FILE", base.join("node.pid"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq.conf")));
        let node = Self {
            name,
            port,
            _dir: dir,
        };
        node.wait_ready(Duration::from_secs(90));
        node
    }

    pub fn ctl(&self, args: &[&str]) -> String {
        run(Command::new("rabbitmqctl")
            .arg("-q")
            .arg("-n")
            .arg(&self.name)
            .args(args))
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let started = Instant::now();
        loop {
            let ok = Command::new("rabbitmqctl")
                .args(["-q", "-n", &self.name, "await_startup", "--timeout", "5"])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "RabbitMQ node {} did not start",
                self.name
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn start_app(&self) {
        self.ctl(&["start_app"]);
        self.wait_ready(Duration::from_secs(60));
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name, "stop"])
            .output();
    }
}

/// A PostgreSQL cluster of the test's own, on its own port, trust auth.
pub struct PgCluster {
    version: String,
    name: String,
    port: u16,
}

impl PgCluster {
    pub fn start() -> Self {
        let version = std::fs::read_dir("/etc/postgresql")
            .expect("Debian PostgreSQL")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .max_by_key(|v| v.parse::<u32>().unwrap_or(0))
            .expect("a PostgreSQL version");
        let name = format!("dft{}", &Uuid::new_v4().simple().to_string()[..8]);
        let port = free_port();
        run(Command::new("pg_createcluster").args([
            &version,
            &name,
            "-p",
            &port.to_string(),
            "--",
            "--auth=trust",
        ]));
        let c = Self {
            version,
            name,
            port,
        };
        c.start_again();
        c
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/docflow", self.port)
    }

    pub fn stop(&self) {
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &self.version,
            &self.name,
            "stop",
            "-m",
            "fast",
        ]));
    }

    pub fn start_again(&self) {
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &self.version,
            &self.name,
            "start",
        ]));
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "cluster did not start"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .output();
    }
}
