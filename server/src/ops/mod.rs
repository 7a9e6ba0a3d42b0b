//! What operators see and do: dead letters and the audit log ([`admin`]),
//! the actions on jobs, documents, queues and re-embedding ([`controls`]),
//! the dashboard's numbers ([`stats`]) and its sampled series and gauges
//! ([`sampler`]).

pub mod admin;
pub mod controls;
pub mod sampler;
pub mod stats;
