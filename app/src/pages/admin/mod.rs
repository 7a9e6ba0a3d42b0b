//! Admin pages; each is wrapped in [`AdminGate`](crate::components::layout::AdminGate)
//! and rendered in `SsrMode::Async` so a member gets a real 403.

pub mod audit;
pub mod dashboard;
pub mod dead_letters;
pub mod jobs;
pub mod webhooks;
