//! `GET /api/search?q=&k=`: the caller's tenant's chunks, best first.

use axum::{
    extract::{Query, State},
    routing::get,
    Json, Router,
};
use serde::Deserialize;

use crate::{
    auth::CurrentUser,
    error::{ApiError, ApiResult},
    search::{self, Hit, SearchError},
    state::AppState,
};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/search", get(handler))
}

#[derive(Deserialize)]
struct SearchQuery {
    q: Option<String>,
    k: Option<usize>,
}

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
