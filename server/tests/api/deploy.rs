//! The deployment files in `deploy/` are read by the tools that run them:
//! `systemd-analyze verify` for the unit files, `promtool check config` for
//! the Prometheus configuration with its alert rules, and `amtool
//! check-config` for the Alertmanager route.

use std::{path::Path, process::Command};

fn deploy(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Runs a checker; it must succeed and say nothing on stderr.
fn check(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd:?} failed: {stdout}{stderr}");
    stdout + &stderr
}

#[test]
fn systemd_accepts_the_unit_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The units name /usr/local/bin/docflow; verify checks that it runs.
    let docflow = env!("CARGO_BIN_EXE_docflow");
    for (file, as_name) in [
        ("docflow-web.service", "docflow-web.service"),
        ("docflow-worker@.service", "docflow-worker@fast.service"),
    ] {
        let unit = deploy(&format!("systemd/{file}")).replace("/usr/local/bin/docflow", docflow);
        assert!(unit.contains("ExecStart="), "{file} starts docflow");
        let path = dir.path().join(as_name);
        std::fs::write(&path, unit).expect("write unit");
        let said = check(Command::new("systemd-analyze").arg("verify").arg(&path));
        assert!(
            !said.contains(as_name),
            "systemd-analyze has remarks on {file}: {said}"
        );
    }
}

#[test]
fn promtool_accepts_the_scrape_config_and_its_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "secret").expect("token");
    let config = deploy("prometheus/prometheus.yml").replace(
        "/etc/prometheus/docflow-metrics-token",
        token.to_str().expect("utf-8 path"),
    );
    assert!(config.contains("rule_files:"), "the alert rules are loaded");
    std::fs::write(dir.path().join("prometheus.yml"), config).expect("config");
    std::fs::write(
        dir.path().join("alerts.yml"),
        deploy("prometheus/alerts.yml"),
    )
    .expect("rules");
    let said = check(
        Command::new("promtool")
            .args(["check", "config"])
            .arg(dir.path().join("prometheus.yml")),
    );
    assert!(
        said.contains("SUCCESS") && said.contains("rules found"),
        "{said}"
    );
}

#[test]
fn amtool_accepts_the_alertmanager_route() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/alertmanager/alertmanager.yml");
    let said = check(Command::new("amtool").arg("check-config").arg(&file));
    assert!(said.contains("SUCCESS"), "{said}");
    // The route sends what the rules mark `page` to the on-call receiver.
    let route = deploy("alertmanager/alertmanager.yml");
    let rules = deploy("prometheus/alerts.yml");
    assert!(route.contains(r#"severity="page""#) && rules.contains("severity: page"));
}

/// Rolling upgrades: once a newer docflow migrated the database, an older
/// process that restarts must still start (the schema only adds).
#[tokio::test]
async fn an_older_binary_starts_against_a_schema_a_newer_one_migrated() {
    let iso = crate::isolation::Isolation::new();
    let pool = docflow::platform::db::connect_and_migrate(&iso.database_url, 2)
        .await
        .expect("migrates");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (29991231000000, 'added by a newer docflow', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .expect("a newer migration");
    pool.close().await;
    let pool = docflow::platform::db::connect_and_migrate(&iso.database_url, 2)
        .await
        .expect("an older binary starts against the newer schema");
    pool.close().await;
}
