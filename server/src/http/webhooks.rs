//! `POST /api/webhooks` and the tenant's endpoints and deliveries
//! ([`crate::webhooks`]). Admins register, delete and redeliver; viewers read.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    Json,
};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use app::dto::{DeliveryDto, NewWebhookDto, WebhookDto};

use crate::{
    http::jobs::parse_id,
    identity::auth::{AdminUser, OperatorUser},
    platform::error::{ApiError, ApiResult, ErrorBody},
    state::AppState,
    webhooks::{self, deliver::Settings},
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(register, list))
        .routes(routes!(delete))
        .routes(routes!(deliveries))
        .routes(routes!(redeliver))
}

/// An endpoint to register.
#[derive(Deserialize, ToSchema)]
struct NewWebhook {
    /// `https://…`, no credentials, a public address.
    url: String,
    /// Any of `job.done`, `job.failed`, `job.cancelled`, `batch.done`, `document.deleted`.
    events: Vec<String>,
    /// For people: what receives it.
    #[serde(default)]
    description: String,
}

/// Registers a webhook endpoint for the admin's organisation. The answer
/// carries its signing secret, the only time it is shown.
#[utoipa::path(
    post,
    path = "/api/webhooks",
    tag = "webhooks",
    security(("bearer" = []), ("session" = [])),
    request_body = NewWebhook,
    responses(
        (status = 201, description = "Registered; store `secret` now", body = NewWebhookDto),
        (status = 400, description = "`invalid_webhook_url` (not https, credentials in it, or a loopback, link-local or private target), `invalid_events`, `invalid_description` or `invalid_body`", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin (a viewer only reads), or a browser request from another site", body = ErrorBody),
        (status = 409, description = "`too_many_webhooks`: the organisation has 20", body = ErrorBody),
    )
)]
async fn register(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    body: Result<Json<NewWebhook>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<(StatusCode, Json<NewWebhookDto>)> {
    let Json(new) = body.map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"url\",\"events\":[…],\"description\"}}: {e}"),
        )
    })?;
    let created = webhooks::register(
        &state.pool,
        Settings::from_config(&state.config).policy,
        &admin,
        webhooks::NewEndpoint {
            url: &new.url,
            events: &new.events,
            description: &new.description,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The organisation's webhook endpoints (never their secrets).
#[utoipa::path(
    get,
    path = "/api/webhooks",
    tag = "webhooks",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "Newest first", body = Vec<WebhookDto>),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or viewer", body = ErrorBody),
    )
)]
async fn list(
    State(state): State<AppState>,
    OperatorUser(user): OperatorUser,
) -> ApiResult<Json<Vec<WebhookDto>>> {
    Ok(Json(webhooks::list(&state.pool, &user).await?))
}

/// Deletes an endpoint; its deliveries not sent yet are dropped.
#[utoipa::path(
    delete,
    path = "/api/webhooks/{id}",
    tag = "webhooks",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The endpoint id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin (a viewer only reads), or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such endpoint in the organisation", body = ErrorBody),
    )
)]
async fn delete(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "webhook")?;
    webhooks::delete(&state.pool, &admin, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The endpoint's 100 most recent deliveries: state, attempts, last
/// status, latency and the start of the answer.
#[utoipa::path(
    get,
    path = "/api/webhooks/{id}/deliveries",
    tag = "webhooks",
    security(("bearer" = []), ("session" = [])),
    params(("id" = Uuid, Path, description = "The endpoint id")),
    responses(
        (status = 200, description = "Newest first", body = Vec<DeliveryDto>),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin or viewer", body = ErrorBody),
        (status = 404, description = "No such endpoint in the organisation", body = ErrorBody),
    )
)]
async fn deliveries(
    State(state): State<AppState>,
    OperatorUser(user): OperatorUser,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<DeliveryDto>>> {
    let id = parse_id(&id, "webhook")?;
    Ok(Json(webhooks::deliveries(&state.pool, &user, id).await?))
}

/// Sends a delivery again now (same event id and body); enables the
/// endpoint again if it was disabled for failing.
#[utoipa::path(
    post,
    path = "/api/webhooks/{id}/deliveries/{delivery_id}/redeliver",
    tag = "webhooks",
    security(("bearer" = []), ("session" = [])),
    params(
        ("id" = Uuid, Path, description = "The endpoint id"),
        ("delivery_id" = Uuid, Path, description = "The delivery id"),
    ),
    responses(
        (status = 202, description = "Queued for delivery now"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "Not an admin (a viewer only reads), or a browser request from another site", body = ErrorBody),
        (status = 404, description = "No such delivery of this endpoint", body = ErrorBody),
    )
)]
async fn redeliver(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    Path((id, delivery)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let id = parse_id(&id, "webhook")?;
    let delivery = parse_id(&delivery, "delivery")?;
    webhooks::redeliver(&state.pool, &admin, id, delivery).await?;
    Ok(StatusCode::ACCEPTED)
}
