//! Integration tests: each test gets its own PostgreSQL database, RabbitMQ
//! vhost, blob folder and HTTP port, so they run in parallel.

mod actions;
mod admin_job_list;
mod admin_views;
mod cluster;
mod controls;
mod dependencies;
mod deploy;
mod failure;
mod fixtures;
mod group_commit;
mod helpers;
mod hostile;
mod ingest;
mod integrations;
mod isolation;
mod matrix;
mod mock_embedder;
mod model_choice;
mod notify;
mod observability;
mod openapi;
mod outage;
mod pipeline;
mod reembedding;
mod retrieval;
mod sample_pdf;
mod schema;
mod security;
mod services;
mod sessions;
mod slots;
mod stumbles;
mod upload;
mod webhook_receiver;
