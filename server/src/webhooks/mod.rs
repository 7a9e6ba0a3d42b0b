//! Webhooks: a tenant's admins register endpoints for events (`job.done`,
//! `job.failed`, `job.cancelled`, `batch.done`, `document.deleted`); each
//! event is recorded by the database in the transaction of the change that
//! caused it (`docflow_webhook_event`, called by triggers on jobs, batches
//! and documents), one delivery row per subscribed endpoint, and
//! [`deliver`] sends those rows: signed ([`signature`]), at least once,
//! retried with jittered backoff, never to an internal address
//! ([`target`]). Nothing is sent from inside a request.

pub mod deliver;
pub mod signature;
pub mod target;

use app::dto::{DeliveryDto, NewWebhookDto, WebhookDto};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::{identity::auth::CurrentUser, platform::error::ApiError};

/// The events an endpoint may subscribe to.
pub use app::dto::WEBHOOK_EVENTS as EVENTS;

/// Endpoints one tenant may register.
pub const MAX_ENDPOINTS: i64 = 20;

/// Deliveries an endpoint's listing shows.
pub const RECENT_DELIVERIES: i64 = 100;

/// A registration request.
pub struct NewEndpoint<'a> {
    pub url: &'a str,
    pub events: &'a [String],
    pub description: &'a str,
}

struct EndpointRow {
    id: Uuid,
    url: String,
    events: Vec<String>,
    description: String,
    created_at: DateTime<Utc>,
    disabled_at: Option<DateTime<Utc>>,
    disabled_reason: Option<String>,
    last_success_at: Option<DateTime<Utc>>,
}

impl From<EndpointRow> for WebhookDto {
    fn from(r: EndpointRow) -> Self {
        WebhookDto {
            id: r.id.to_string(),
            url: r.url,
            events: r.events,
            description: r.description,
            created_at: r.created_at,
            disabled_at: r.disabled_at,
            disabled_reason: r.disabled_reason,
            last_success_at: r.last_success_at,
        }
    }
}

fn invalid_url(message: String) -> ApiError {
    ApiError::bad_request("invalid_webhook_url", message)
}

/// Registers an endpoint in the admin's tenant and returns its secret, the
/// only time it is shown. 400 `invalid_webhook_url` for a URL
/// [`target::check`] refuses, `invalid_events` for an empty or unknown
/// event list, `invalid_description` over 500 characters; 409
/// `too_many_webhooks` past [`MAX_ENDPOINTS`].
pub async fn register(
    pool: &PgPool,
    policy: target::Policy,
    admin: &CurrentUser,
    new: NewEndpoint<'_>,
) -> Result<NewWebhookDto, ApiError> {
    admin.require_admin()?;
    let mut events: Vec<String> = Vec::new();
    for e in new.events {
        let e = e.trim();
        if !EVENTS.contains(&e) {
            return Err(ApiError::bad_request(
                "invalid_events",
                format!("unknown event `{e}`; known: {}", EVENTS.join(", ")),
            ));
        }
        if !events.iter().any(|x| x == e) {
            events.push(e.to_string());
        }
    }
    if events.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_events",
            format!("name at least one event: {}", EVENTS.join(", ")),
        ));
    }
    let description = new.description.trim();
    if description.chars().count() > 500 {
        return Err(ApiError::bad_request(
            "invalid_description",
            "a description may be at most 500 characters",
        ));
    }
    let url = target::check(new.url, policy).await.map_err(invalid_url)?;
    let id = Uuid::now_v7();
    let secret = signature::new_secret();
    let mut tx = pool.begin().await?;
    // One registration at a time per tenant, so the limit holds (not
    // `FOR UPDATE`: that would wait for every upload's key check).
    sqlx::query_scalar!(
        "SELECT id FROM tenants WHERE id = $1 FOR NO KEY UPDATE",
        admin.tenant_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let count = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM webhook_endpoints WHERE tenant_id = $1"#,
        admin.tenant_id
    )
    .fetch_one(&mut *tx)
    .await?;
    if count >= MAX_ENDPOINTS {
        return Err(ApiError::Refused {
            code: "too_many_webhooks",
            message: format!(
                "an organisation may register at most {MAX_ENDPOINTS} webhook endpoints; delete one first"
            ),
        });
    }
    sqlx::query!(
        "INSERT INTO webhook_endpoints (id, tenant_id, url, events, description, secret, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        id,
        admin.tenant_id,
        url.as_str(),
        &events,
        description,
        &secret,
        admin.id
    )
    .execute(&mut *tx)
    .await?;
    admin
        .audit(
            &mut tx,
            "webhook.create",
            &id.to_string(),
            serde_json::json!({ "url": url.as_str(), "events": events }),
        )
        .await?;
    tx.commit().await?;
    Ok(NewWebhookDto {
        id: id.to_string(),
        url: url.into(),
        events,
        description: description.into(),
        secret,
    })
}

/// The tenant's endpoints, newest first (operators: their own tenant's too).
pub async fn list(pool: &PgPool, user: &CurrentUser) -> Result<Vec<WebhookDto>, ApiError> {
    user.require_operator()?;
    let rows = sqlx::query_as!(
        EndpointRow,
        r#"SELECT id, url, events, description, created_at AS "created_at: _",
                  disabled_at AS "disabled_at: _", disabled_reason, last_success_at AS "last_success_at: _"
           FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at DESC"#,
        user.tenant_id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Deletes an endpoint and its pending deliveries.
pub async fn delete(pool: &PgPool, admin: &CurrentUser, id: Uuid) -> Result<(), ApiError> {
    admin.require_admin()?;
    let mut tx = pool.begin().await?;
    let gone = sqlx::query_scalar!(
        "DELETE FROM webhook_endpoints WHERE id = $1 AND tenant_id = $2 RETURNING url",
        id,
        admin.tenant_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let url = gone.ok_or(ApiError::NotFound("webhook"))?;
    admin
        .audit(
            &mut tx,
            "webhook.delete",
            &id.to_string(),
            serde_json::json!({ "url": url }),
        )
        .await?;
    tx.commit().await?;
    Ok(())
}

struct DeliveryRow {
    id: Uuid,
    event_id: Uuid,
    event_type: String,
    state: String,
    attempts: i32,
    last_status: Option<i32>,
    last_latency_ms: Option<i32>,
    last_response: Option<String>,
    last_error: Option<String>,
    created_at: DateTime<Utc>,
    next_attempt_at: DateTime<Utc>,
    delivered_at: Option<DateTime<Utc>>,
}

/// The endpoint's most recent deliveries, newest first.
pub async fn deliveries(
    pool: &PgPool,
    user: &CurrentUser,
    endpoint: Uuid,
) -> Result<Vec<DeliveryDto>, ApiError> {
    user.require_operator()?;
    let exists = sqlx::query_scalar!(
        "SELECT id FROM webhook_endpoints WHERE id = $1 AND tenant_id = $2",
        endpoint,
        user.tenant_id
    )
    .fetch_optional(pool)
    .await?;
    exists.ok_or(ApiError::NotFound("webhook"))?;
    let rows = sqlx::query_as!(
        DeliveryRow,
        r#"SELECT d.id, d.event_id, e.type AS event_type, d.state, d.attempts, d.last_status,
                  d.last_latency_ms, d.last_response, d.last_error, d.created_at AS "created_at: _",
                  d.next_attempt_at AS "next_attempt_at: _", d.delivered_at AS "delivered_at: _"
           FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
           WHERE d.endpoint_id = $1 ORDER BY d.created_at DESC, d.id DESC LIMIT $2"#,
        endpoint,
        RECENT_DELIVERIES
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| DeliveryDto {
            id: r.id.to_string(),
            event_id: r.event_id.to_string(),
            event_type: r.event_type,
            next_attempt_at: (r.state == "pending").then_some(r.next_attempt_at),
            state: r.state,
            attempts: r.attempts,
            last_status: r.last_status,
            last_latency_ms: r.last_latency_ms,
            last_response: r.last_response,
            last_error: r.last_error,
            created_at: r.created_at,
            delivered_at: r.delivered_at,
        })
        .collect())
}

/// Sends a delivery again now, whatever its state, under the same event id
/// and body; the retry period starts again. An endpoint disabled for
/// failing is enabled again: redelivering says its receiver is fixed.
pub async fn redeliver(
    pool: &PgPool,
    admin: &CurrentUser,
    endpoint: Uuid,
    delivery: Uuid,
) -> Result<(), ApiError> {
    admin.require_admin()?;
    let mut tx = pool.begin().await?;
    let found = sqlx::query_scalar!(
        "UPDATE webhook_deliveries d
         SET state = 'pending', next_attempt_at = now(), lease_until = NULL, redelivered_at = now()
         FROM webhook_endpoints e
         WHERE d.id = $1 AND d.endpoint_id = $2 AND e.id = d.endpoint_id AND e.tenant_id = $3
         RETURNING d.id",
        delivery,
        endpoint,
        admin.tenant_id
    )
    .fetch_optional(&mut *tx)
    .await?;
    found.ok_or(ApiError::NotFound("delivery"))?;
    sqlx::query!(
        "UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = NULL WHERE id = $1",
        endpoint
    )
    .execute(&mut *tx)
    .await?;
    admin
        .audit(
            &mut tx,
            "webhook.redeliver",
            &delivery.to_string(),
            serde_json::json!({ "webhook": endpoint }),
        )
        .await?;
    sqlx::query_scalar!("SELECT pg_notify('docflow_webhooks', '')")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
