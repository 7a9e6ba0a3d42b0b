//! The webhooks page: endpoints, their deliveries, register, delete, redeliver.

use leptos::prelude::*;

use crate::{
    dto::{DeliveryDto, NewWebhookDto, WebhooksView},
    error::AppError,
};

#[server(prefix = "/sfn")]
pub async fn webhooks() -> Result<WebhooksView, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.webhooks(&req).await
}

#[server(prefix = "/sfn")]
pub async fn webhook_deliveries(id: String) -> Result<Vec<DeliveryDto>, AppError> {
    let (backend, req) = super::ctx().await?;
    backend.webhook_deliveries(&req, &id).await
}

/// Registers an endpoint; the answer carries its secret, shown once.
#[server(prefix = "/sfn")]
pub async fn create_webhook(
    url: String,
    events: Vec<String>,
    description: String,
) -> Result<NewWebhookDto, AppError> {
    let (backend, req) = super::ctx().await?;
    backend
        .create_webhook(&req, &url, events, &description)
        .await
}

#[server(prefix = "/sfn")]
pub async fn delete_webhook(id: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.delete_webhook(&req, &id).await
}

#[server(prefix = "/sfn")]
pub async fn redeliver(webhook: String, delivery: String) -> Result<(), AppError> {
    let (backend, req) = super::ctx().await?;
    backend.redeliver(&req, &webhook, &delivery).await
}
