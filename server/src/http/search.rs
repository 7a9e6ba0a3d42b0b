//! `GET /api/search?q=&k=`: the caller's tenant's chunks, best first.

use axum::{extract::State, Json};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    identity::auth::CurrentUser,
    platform::error::{ApiError, ApiResult, ErrorBody, Query},
    search::{self, Hit, SearchError},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(handler))
}

/// The longest query, in characters (what JSON Schema's `maxLength` counts).
const MAX_QUERY_CHARS: usize = 2_000;
/// The most hits a search returns.
const MAX_K: u32 = 100;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SearchQuery {
    /// What to look for: 1 to 2,000 characters, not only white space.
    #[param(required = true, value_type = String, min_length = 1, max_length = 2000)]
    q: Option<String>,
    /// How many hits, 1 to 100 (default 10).
    #[param(minimum = 1, maximum = 100, default = 10)]
    k: Option<u32>,
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
        (status = 400, description = "`missing_query` (no `q`, or only white space), \
                                      `query_too_long` (over 2,000 characters), `invalid_k` \
                                      (outside 1 to 100), `invalid_query` (`k` not a number), \
                                      `invalid_text` (a NUL character)", body = ErrorBody),
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
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(
            "query_too_long",
            "the query may have at most 2,000 characters",
        ));
    }
    let q = q.trim();
    if q.is_empty() {
        return Err(ApiError::bad_request(
            "missing_query",
            "give a query as `q`",
        ));
    }
    let k = p.k.unwrap_or(10);
    if !(1..=MAX_K).contains(&k) {
        return Err(ApiError::bad_request(
            "invalid_k",
            "`k`, the number of hits, is 1 to 100",
        ));
    }
    let k = k as usize;
    match search::search(&state, user.tenant_id, q, k).await {
        Ok(hits) => Ok(Json(hits)),
        Err(SearchError::Db(e)) => Err(e.into()),
        Err(e @ SearchError::Embed) => Err(ApiError::Unavailable {
            message: e.to_string(),
            retry_after: std::time::Duration::from_secs(5),
        }),
    }
}
