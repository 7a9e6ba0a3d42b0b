//! What the rest stands on: settings, errors, logs and metrics, the
//! PostgreSQL pool with its migrations and the user, token and audit rows,
//! and the blob store.

pub mod blob;
pub mod config;
pub mod db;
pub mod error;
pub mod metrics;
pub mod reconnect;
pub mod telemetry;
