//! The REST API under `/api` and its OpenAPI 3.1 document, built together:
//! each noun's `router()` registers its handlers with `routes!`, which
//! reads their `#[utoipa::path]` (method, path, parameters, bodies,
//! answers), so the document cannot leave out a route the router has, nor
//! describe one it does not. `GET /api/openapi.json` serves it to anyone.

use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::header,
    response::IntoResponse,
    routing::get,
    Router,
};
use utoipa::{
    openapi::{
        security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
        OpenApi as Document,
    },
    Modify, OpenApi,
};
use utoipa_axum::router::OpenApiRouter;

use super::{admin, auth, documents, events, jobs, search};
use crate::{error::ErrorBody, state::AppState};

/// Where the document is served.
pub const PATH: &str = "/api/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "docflow",
        description = "Upload documents, follow their processing jobs (JSON or server-sent \
                       events), search their text, and administer the queues. Errors answer \
                       `{\"error\":{\"code\",\"message\"}}` (`ErrorBody`)."
    ),
    paths(openapi_json),
    components(schemas(ErrorBody, app::dto::LiveJobEvent)),
    modifiers(&Security),
    tags(
        (name = "auth", description = "Log in and out (session cookie); API clients send a bearer token instead"),
        (name = "documents", description = "Uploads"),
        (name = "jobs", description = "Processing jobs and their live events"),
        (name = "notifications", description = "The caller's inbox"),
        (name = "search", description = "Search the tenant's documents"),
        (name = "admin", description = "Operations; admins only (members get 403)"),
        (name = "meta", description = "This document"),
    )
)]
struct ApiDoc;

/// `components.securitySchemes`: a bearer token or the login session.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer <token>`: an API token"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "docflow_session",
                "The session cookie `POST /api/login` sets (`__Host-docflow_session` over https)",
            ))),
        );
    }
}

/// The REST API's routes, the document's bytes kept for `GET /api/openapi.json`.
pub fn api(body_limit: usize) -> (Router<AppState>, Document) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(auth::router())
        .merge(documents::router().layer(DefaultBodyLimit::max(body_limit)))
        .merge(jobs::router())
        .merge(search::router())
        .merge(admin::router())
        .merge(events::router())
        .split_for_parts();
    doc.info.title = "docflow".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    let json = Bytes::from(serde_json::to_vec(&doc).expect("the OpenAPI document serializes"));
    // `openapi_json` is in `ApiDoc::paths`; it needs the finished document, so
    // it is routed here rather than with `routes!`.
    let served = Router::new()
        .route(PATH, get(openapi_json))
        .with_state(Arc::new(json));
    (router.merge(served), doc)
}

/// The OpenAPI document of the REST API, as `GET /api/openapi.json` serves it.
pub fn document() -> Document {
    api(0).1
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "This document, generated from the handlers",
         content_type = "application/json", body = Object),
    )
)]
async fn openapi_json(State(json): State<Arc<Bytes>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::clone(&json),
    )
}
