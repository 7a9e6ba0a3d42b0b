//! Logging to stdout: `RUST_LOG` filters (default `info`), text or JSON
//! lines. Text is coloured only on a terminal, so log files and journald
//! get plain lines.

use std::io::IsTerminal;

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let _ = if json {
        registry
            .with(fmt::layer().json().with_current_span(true))
            .try_init()
    } else {
        registry
            .with(
                fmt::layer()
                    .with_target(false)
                    .with_ansi(std::io::stdout().is_terminal()),
            )
            .try_init()
    };
}
