//! `POST /api/login`, `POST /api/logout`.

use axum::{extract::State, http::StatusCode, routing::post, Json, Router};
use serde::Deserialize;
use tower_sessions::Session;

use app::dto::UserDto;

use crate::{
    auth::{self, CurrentUser},
    error::{ApiError, ApiResult},
    state::AppState,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/login", post(login))
        .route("/api/logout", post(logout))
}

#[derive(Deserialize)]
struct LoginBody {
    email: String,
    password: String,
}

pub fn user_dto(u: &CurrentUser) -> UserDto {
    UserDto {
        email: u.email.clone(),
        role: u.role.as_str().into(),
        tenant: u.tenant.clone(),
    }
}

async fn login(
    State(state): State<AppState>,
    session: Session,
    auth::ClientAddr(client): auth::ClientAddr,
    body: Result<Json<LoginBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Json(body) = body.map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"email\",\"password\"}}: {e}"),
        )
    })?;
    let user = auth::login(&state, &session, &body.email, &body.password, client).await?;
    Ok(Json(serde_json::json!({ "user": user_dto(&user) })))
}

async fn logout(_user: CurrentUser, session: Session) -> ApiResult<StatusCode> {
    auth::logout(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}
