//! `GET /api/search?q=&k=`: the caller's tenant's chunks, best first.

use axum::{extract::State, Json};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    auth::CurrentUser,
    error::{ApiError, ApiResult, ErrorBody, Query},
    search::{self, Hit, SearchError},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(handler))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SearchQuery {
    /// What to look for (required; at most 2,000 bytes).
    q: Option<String>,
    /// How many hits, 1 to 100 (default 10).
    k: Option<usize>,
}

/// The caller's tenant's chunks nearest in meaning to `q`, best first.
#[utoipa::path(
    get,
    path = "/api/search",
    tag = "search",
    security(("bearer" = []), ("session" = [])),
    params(SearchQuery),
    responses(
        (status = 200, description = "The hits, best first", body = Vec<Hit>),
        (status = 400, description = "No `q`, or one too long", body = ErrorBody),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 503, description = "The embedding provider or the database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn handler(
    State(state): State<AppState>,
    user: CurrentUser,
    Query(p): Query<SearchQuery>,
) -> ApiResult<Json<Vec<Hit>>> {
    let q = p.q.unwrap_or_default();
    let q = q.trim();
    if q.is_empty() {
        return Err(ApiError::bad_request(
            "missing_query",
            "give a query as `q`",
        ));
    }
    if q.len() > 2_000 {
        return Err(ApiError::bad_request(
            "query_too_long",
            "the query may have at most 2,000 bytes",
        ));
    }
    let k = p.k.unwrap_or(10).clamp(1, 100);
    match search::search(&state, user.tenant_id, q, k).await {
        Ok(hits) => Ok(Json(hits)),
        Err(SearchError::Db(e)) => Err(e.into()),
        Err(e @ SearchError::Embed) => Err(ApiError::Unavailable {
            message: e.to_string(),
            retry_after: std::time::Duration::from_secs(5),
        }),
    }
}
