//! `POST /api/login`, `POST /api/logout`.

use axum::{extract::State, http::StatusCode, Json};
use serde::{Deserialize, Serialize};
use tower_sessions::Session;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use app::dto::UserDto;

use crate::{
    identity::auth::{self, CurrentUser},
    platform::error::{ApiError, ApiResult, ErrorBody},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(logout))
}

#[derive(Deserialize, ToSchema)]
struct LoginBody {
    /// The account's e-mail address: 1 to 254 characters, not only white space.
    #[schema(min_length = 1, max_length = 254)]
    email: String,
    /// Not empty.
    #[schema(min_length = 1)]
    password: String,
}

/// The answer of a login.
#[derive(Serialize, ToSchema)]
struct LoggedIn {
    user: UserDto,
}

pub fn user_dto(u: &CurrentUser) -> UserDto {
    UserDto {
        email: u.email.clone(),
        role: u.role.as_str().into(),
        tenant: u.tenant.clone(),
    }
}

/// Logs in: sets the session cookie.
#[utoipa::path(
    post,
    path = "/api/login",
    tag = "auth",
    request_body = LoginBody,
    responses(
        (status = 200, description = "Logged in; the session cookie is set", body = LoggedIn),
        (status = 400, description = "`invalid_body`: the body is not `{\"email\",\"password\"}`; \
                                      `invalid_credentials`: an empty email or password, or an \
                                      email over 254 characters; `invalid_text`: a NUL character", body = ErrorBody),
        (status = 401, description = "Wrong email or password", body = ErrorBody),
        (status = 403, description = "A browser request from another site", body = ErrorBody),
        (status = 429, description = "Too many failed logins; see `Retry-After`", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn login(
    State(state): State<AppState>,
    session: Session,
    auth::ClientAddr(client): auth::ClientAddr,
    body: Result<Json<LoginBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<LoggedIn>> {
    let Json(body) = body.map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"email\",\"password\"}}: {e}"),
        )
    })?;
    let user = auth::login(&state, &session, &body.email, &body.password, client).await?;
    Ok(Json(LoggedIn {
        user: user_dto(&user),
    }))
}

/// Logs out: ends the session and the event streams opened with its login.
#[utoipa::path(
    post,
    path = "/api/logout",
    tag = "auth",
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 204, description = "Logged out"),
        (status = 401, description = "Not logged in", body = ErrorBody),
        (status = 403, description = "A browser request from another site", body = ErrorBody),
        (status = 503, description = "The database is unreachable; see `Retry-After`", body = ErrorBody),
    )
)]
async fn logout(
    State(state): State<AppState>,
    user: CurrentUser,
    session: Session,
) -> ApiResult<StatusCode> {
    auth::logout(&state, &session, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
