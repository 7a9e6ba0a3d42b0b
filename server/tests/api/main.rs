//! Integration tests: each test gets its own PostgreSQL database, RabbitMQ
//! vhost, blob folder and HTTP port, so they run in parallel.

mod dependencies;
mod failure;
mod fixtures;
mod helpers;
mod hostile;
mod isolation;
mod mock_embedder;
mod notify;
mod observability;
mod outage;
mod pipeline;
mod sample_pdf;
mod security;
mod services;
mod upload;
