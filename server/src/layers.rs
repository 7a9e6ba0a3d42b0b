//! The server's layers, lowest first, and the test that keeps them: a
//! module may use what its own layer and the layers below it define, never
//! what a layer above defines. The README's "Layers" section draws the same
//! table; a new module goes into one of these rows, or the test fails.
//!
//! The test reads the `crate::` paths of every source file (imports and
//! paths written in place, comments left out) and names each upward one.

use std::path::Path;

/// Each layer's name and its top-level modules, lowest first.
const LAYERS: &[(&str, &[&str])] = &[
    // What everything stands on: settings, errors, metrics, the database
    // and the blob store (`platform/`), the broker, the parser children,
    // and the jobs: their states and events, the state machine, the
    // outbox and the inbox.
    ("store", &["platform", "broker", "parser", "jobs"]),
    // Live events in a process: the hub, credential ends, SSE framing.
    ("live", &["notify"]),
    // Work off the queues: the pipeline and its steps; the worker, its
    // slots and pauses, the dead-letter keeper, retention.
    ("runtime", &["pipeline", "worker"]),
    // Who is asking: passwords, sessions, tokens, the login throttle.
    ("identity", &["identity"]),
    // What users and operators do: uploads, search, batches, webhooks, the
    // operator actions and statistics (`ops/`), and the web process's state.
    (
        "services",
        &["upload", "search", "batches", "webhooks", "ops", "state"],
    ),
    // The HTTP API, the pages' backend, OpenAPI.
    ("http", &["http"]),
    // The process: roles, startup, shutdown, the command line, demo data.
    ("process", &["lib", "main", "demo", "layers"]),
];

/// The layer of top-level module `module`, by index (lowest 0).
fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The top-level modules that `source` names after `crate::` (in `use`
/// lines, groups included, and paths written in place), comments left out.
fn used_modules(source: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut used = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` in a macro is the same crate from wherever it expands;
        // `my_crate::` is another crate.
        if before.is_some_and(|c| c == '$' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        used.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            used.push(first_segment(&item));
        } else {
            used.push(first_segment(rest));
        }
    }
    used.retain(|m| !m.is_empty() && m != "self");
    used
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Every upward use and every module in no layer under `src`, one line each.
fn violations(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("reads the source folder") {
            let path = entry.expect("reads a folder entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            // This file quotes paths in its messages and examples.
            if relative == Path::new("layers.rs") {
                continue;
            }
            let first = relative.components().next().expect("a file");
            let module = first.as_os_str().to_string_lossy();
            let module = module.trim_end_matches(".rs");
            let Some(own) = layer_of(module) else {
                found.push(format!(
                    "{}: module `{module}` is in no layer",
                    relative.display()
                ));
                continue;
            };
            let source = std::fs::read_to_string(&path).expect("reads a source file");
            for used in used_modules(&source) {
                if used == module {
                    continue;
                }
                match layer_of(&used) {
                    Some(layer) if layer > own => found.push(format!(
                        "{}: `crate::{used}` ({}) is above `{module}` ({})",
                        relative.display(),
                        LAYERS[layer].0,
                        LAYERS[own].0
                    )),
                    Some(_) => {}
                    None => found.push(format!(
                        "{}: `crate::{used}` is in no layer",
                        relative.display()
                    )),
                }
            }
        }
    }
    found.sort();
    found
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "uses across the layers (see server/src/layers.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn an_upward_use_and_a_module_in_no_layer_are_named() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    for folder in ["jobs", "platform"] {
        std::fs::create_dir(src.join(folder)).expect("a folder");
    }
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).expect("writes");
    write(
        "lib.rs",
        "pub mod platform;\npub mod jobs;\nuse crate::http::router;\n",
    );
    write("platform/mod.rs", "pub mod config;\n");
    // A use in a group, one written in place, one in a comment (not a use).
    write(
        "platform/config.rs",
        "use crate::{platform::error::ApiError, state::{AppState, Other}};\n\
         /// See [`crate::http`].\n\
         fn f() { crate::identity::auth::login(); }\n",
    );
    write(
        "jobs/machine.rs",
        "use super::Tier;\nuse crate::jobs::JobState;\nuse crate::pipeline::events::JobEvent;\n",
    );
    write("jobs/mod.rs", "pub mod machine;\n");
    write("uploads.rs", "use crate::platform::db;\n");
    write(
        "http.rs",
        "use crate::{platform::config, state::AppState};\n",
    );
    assert_eq!(
        violations(src),
        [
            "jobs/machine.rs: `crate::pipeline` (runtime) is above `jobs` (store)",
            "platform/config.rs: `crate::identity` (identity) is above `platform` (store)",
            "platform/config.rs: `crate::state` (services) is above `platform` (store)",
            "uploads.rs: module `uploads` is in no layer",
        ]
    );
}

#[test]
fn the_table_names_exactly_the_modules_of_the_crate_root() {
    let lib = include_str!("lib.rs");
    let mut declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';'))
        .collect();
    declared.sort_unstable();
    let mut listed: Vec<&str> = LAYERS
        .iter()
        .flat_map(|(_, modules)| modules.iter().copied())
        // The crate root and the binary are files, not modules of lib.rs.
        .filter(|m| !["lib", "main"].contains(m))
        .collect();
    listed.sort_unstable();
    assert_eq!(declared, listed);
}
