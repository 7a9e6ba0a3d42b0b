//! Who is asking: argon2id passwords, session logins (id rotated at login,
//! an idle and an absolute lifetime), bearer tokens (optional expiry,
//! revocable), and the `CurrentUser` extractor with DESIGN §6's 401/403
//! rules. A credential that ends (logout, password change, revocation)
//! ends the event streams opened with it ([`crate::notify::ended`]).

use anyhow::Context;
use argon2::{
    password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString},
    Argon2,
};
use axum::{extract::FromRequestParts, http::request::Parts};
use chrono::{DateTime, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use tower_sessions::Session;
use uuid::Uuid;

use crate::{
    identity::signed_in::SignedIn,
    identity::throttle::LoginThrottle,
    platform::db::{self, Role, UserRow},
    platform::error::ApiError,
};

/// What resolving and signing in a caller needs of the process. The web
/// process's state (`AppState`, a layer above) provides it; the identity
/// layer never sees the rest of it.
pub trait Identity: Send + Sync {
    fn pool(&self) -> &sqlx::PgPool;
    /// Recently resolved users, so a session's request reads no row.
    fn signed_in(&self) -> &SignedIn;
    fn logins(&self) -> &LoginThrottle;
    /// A session's absolute lifetime (from login) and idle lifetime.
    fn session_lifetimes(&self) -> (std::time::Duration, std::time::Duration);
}

/// The longest e-mail address a login may give, in characters (what JSON
/// Schema's `maxLength` counts; RFC 5321 allows 254 octets, and an
/// address of more characters has more octets).
const MAX_EMAIL_CHARS: usize = 254;

/// Session key holding the [`Login`].
const SESSION_LOGIN: &str = "login";
/// Session key holding when an active session was last written again.
const SESSION_RENEWED: &str = "renewed";
/// Prefix that makes docflow tokens recognisable in logs and secret scanners.
const TOKEN_PREFIX: &str = "dft_";

/// What a session remembers of its login.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Login {
    user: Uuid,
    /// Names this login to the streams opened with it.
    id: Uuid,
    at: DateTime<Utc>,
}

/// The user a stored session is signed in as, if any.
pub fn session_user(record: &tower_sessions::session::Record) -> Option<Uuid> {
    let login = record.data.get(SESSION_LOGIN)?;
    <Login as serde::Deserialize>::deserialize(login)
        .ok()
        .map(|l| l.user)
}

/// What a request authenticated with. Event streams opened with it end
/// when it does.
#[derive(Debug, Clone, Copy)]
pub enum Credential {
    /// A browser session's login; ended by logout, a password change or
    /// `DOCFLOW_SESSION_MAX`.
    Session { login: Uuid, ends_at: DateTime<Utc> },
    /// An API token; ended by revocation or its expiry.
    Token {
        id: Uuid,
        ends_at: Option<DateTime<Utc>>,
    },
}

impl Credential {
    pub fn id(&self) -> Uuid {
        match self {
            Credential::Session { login, .. } => *login,
            Credential::Token { id, .. } => *id,
        }
    }

    /// When it stops working by itself.
    pub fn ends_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Credential::Session { ends_at, .. } => Some(*ends_at),
            Credential::Token { ends_at, .. } => *ends_at,
        }
    }
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct CurrentUser {
    pub id: Uuid,
    pub email: String,
    pub role: Role,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub plan: db::Plan,
    pub max_unfinished_jobs: Option<i32>,
    pub credential: Credential,
}

impl CurrentUser {
    /// Writes the audit-log row of an action this caller took, inside the
    /// action's transaction.
    pub async fn audit(
        &self,
        conn: &mut sqlx::PgConnection,
        action: &str,
        target: &str,
        detail: serde_json::Value,
    ) -> sqlx::Result<()> {
        db::audit(conn, self.id, &self.email, action, target, detail).await
    }

    /// What an event stream opened by this caller needs to know of them.
    pub fn stream_holder(&self) -> crate::notify::sse::Holder {
        crate::notify::sse::Holder {
            user: self.id,
            credential: self.credential.id(),
            ends_at: self.credential.ends_at(),
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// A platform operator: an admin, or a viewer who reads what admins
    /// read.
    pub fn is_operator(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Viewer)
    }

    /// Whose objects the caller may read by id: their own tenant's, or
    /// (`None`) every tenant's for an operator: platform operators see
    /// every tenant, and admins act on them only through the admin actions.
    pub fn readable_tenant(&self) -> Option<Uuid> {
        (!self.is_operator()).then_some(self.tenant_id)
    }

    /// 403 unless the caller is an admin.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Viewer => Err(read_only()),
            Role::Member => Err(ApiError::Forbidden("this needs the admin role".into())),
        }
    }

    /// 403 unless the caller is an admin or a viewer.
    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this needs the admin role".into()))
        }
    }

    /// Whether the caller may change anything: everyone but a viewer.
    pub fn may_write(&self) -> bool {
        self.role != Role::Viewer
    }

    /// 403 for a viewer, whose role only reads: uploads, cancels, retries
    /// and deletions are refused as admin actions are.
    pub fn require_writer(&self) -> Result<(), ApiError> {
        if self.may_write() {
            Ok(())
        } else {
            Err(read_only())
        }
    }
}

impl CurrentUser {
    fn new(r: UserRow, credential: Credential) -> anyhow::Result<Self> {
        Ok(CurrentUser {
            credential,
            id: r.id,
            role: Role::parse(&r.role)
                .with_context(|| format!("user {} has unknown role {}", r.id, r.role))?,
            plan: if r.plan == "paid" {
                db::Plan::Paid
            } else {
                db::Plan::Free
            },
            email: r.email,
            tenant_id: r.tenant_id,
            tenant: r.tenant,
            max_unfinished_jobs: r.max_unfinished_jobs,
        })
    }
}

pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| anyhow::anyhow!("hashing password: {e}"))
}

fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// The client address of a request, as the TCP peer (see the README on
/// proxies).
pub fn client_address(parts: &Parts) -> Option<std::net::IpAddr> {
    parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// The client address as an extractor (`None` when the server was started
/// without connection info, as in some tests).
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(client_address(parts)))
    }
}

fn throttled(wait: std::time::Duration) -> ApiError {
    let secs = wait.as_secs().max(1);
    ApiError::TooManyRequests {
        message: format!("too many failed logins; try again in {secs} s"),
        retry_after: std::time::Duration::from_secs(secs),
    }
}

/// Checks credentials; on success rotates the session id and stores the user
/// in it. Throttled per account and per `client` address
/// ([`crate::identity::throttle`]).
pub async fn login(
    state: &impl Identity,
    session: &Session,
    email: &str,
    password: &str,
    client: Option<std::net::IpAddr>,
) -> Result<CurrentUser, ApiError> {
    if email.trim().is_empty() || password.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_credentials",
            "email and password are required",
        ));
    }
    // No account has a longer address (RFC 5321); nothing longer is looked up.
    if email.chars().count() > MAX_EMAIL_CHARS {
        return Err(ApiError::bad_request(
            "invalid_credentials",
            format!("an email address has at most {MAX_EMAIL_CHARS} characters"),
        ));
    }
    if let Some(wait) = state.logins().refused(email, client) {
        return Err(throttled(wait));
    }
    // A few password checks at a time: each holds 19 MiB while it runs.
    let _turn = state.logins().hashing().await;
    // Failures counted while this one waited (a flood) may have closed the way.
    if let Some(wait) = state.logins().refused(email, client) {
        return Err(throttled(wait));
    }
    let mut conn = state.pool().acquire().await?;
    let row = db::user_by_email(&mut conn, email.trim()).await?;
    drop(conn);
    let hash = row.as_ref().map(|r| r.password_hash.clone());
    let password = password.to_string();
    // An unknown email costs one hash too, so timing does not tell which emails exist.
    let ok = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => verify_password(&password, &hash),
        None => hash_password(&password).map(|_| false).unwrap_or(false),
    })
    .await
    .context("password check panicked")?;
    let row = match (ok, row) {
        (true, Some(r)) => r,
        _ => {
            return Err(match state.logins().failed(email, client) {
                Some(wait) => throttled(wait),
                None => ApiError::Unauthorized("wrong email or password".into()),
            })
        }
    };
    let login = Login {
        user: row.id,
        id: Uuid::new_v4(),
        at: Utc::now(),
    };
    let user = CurrentUser::new(
        row,
        Credential::Session {
            login: login.id,
            ends_at: login.at + state.session_lifetimes().0,
        },
    )?;
    // A new id at login defeats session fixation.
    session
        .cycle_id()
        .await
        .context("rotating the session id")?;
    session
        .insert(SESSION_LOGIN, login)
        .await
        .context("writing the session")?;
    Ok(user)
}

/// Ends the session and the event streams opened with its login.
pub async fn logout(
    state: &impl Identity,
    session: &Session,
    user: &CurrentUser,
) -> anyhow::Result<()> {
    session.flush().await.context("deleting the session")?;
    if let Credential::Session { login, .. } = user.credential {
        let mut conn = state.pool().acquire().await?;
        crate::notify::ended::announce(&mut conn, user.id, Some(login)).await?;
    }
    Ok(())
}

/// Sets a user's password; every session login of theirs before now is
/// void, and its event streams end.
pub async fn set_password(pool: &sqlx::PgPool, email: &str, password: &str) -> anyhow::Result<()> {
    let hash = hash_password(password)?;
    let mut tx = pool.begin().await?;
    let user = sqlx::query_scalar!(
        "UPDATE users SET password_hash = $2, sessions_valid_after = now() WHERE email = lower($1) RETURNING id",
        email,
        hash
    )
    .fetch_optional(&mut *tx)
    .await?;
    let user = user.with_context(|| format!("no user {email}"))?;
    crate::notify::ended::announce(&mut tx, user, None).await?;
    tx.commit().await?;
    Ok(())
}

/// Makes a new API token for `user_id`, working until `expires_at` (or
/// until revoked); returns the secret, which is not stored.
pub async fn create_token(
    conn: &mut sqlx::PgConnection,
    user_id: Uuid,
    name: &str,
    expires_at: Option<DateTime<Utc>>,
) -> anyhow::Result<String> {
    let mut secret = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut secret);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    db::insert_token(
        conn,
        user_id,
        name,
        &Sha256::digest(token.as_bytes()),
        expires_at,
    )
    .await?;
    Ok(token)
}

/// Revokes one of `user_id`'s tokens (`None`: all of them); returns how
/// many were working. Requests with them get 401 from now on, and event
/// streams opened with them end.
pub async fn revoke_tokens(
    pool: &sqlx::PgPool,
    user_id: Uuid,
    token: Option<Uuid>,
) -> anyhow::Result<u64> {
    let mut tx = pool.begin().await?;
    let revoked = sqlx::query_scalar!(
        "UPDATE api_tokens SET revoked_at = now()
         WHERE user_id = $1 AND ($2::uuid IS NULL OR id = $2) AND revoked_at IS NULL RETURNING id",
        user_id,
        token
    )
    .fetch_all(&mut *tx)
    .await?;
    for id in &revoked {
        crate::notify::ended::announce(&mut tx, user_id, Some(*id)).await?;
    }
    tx.commit().await?;
    Ok(revoked.len() as u64)
}

/// Resolves the caller from a bearer token or the session; `None` when anonymous.
pub async fn resolve(
    state: &impl Identity,
    parts: &Parts,
) -> Result<Option<CurrentUser>, ApiError> {
    if let Some(value) = parts.headers.get(axum::http::header::AUTHORIZATION) {
        let value = value.to_str().map_err(|_| {
            ApiError::Unauthorized("the Authorization header is not valid text".into())
        })?;
        let token = value
            .strip_prefix("Bearer ")
            .ok_or_else(|| ApiError::Unauthorized("use `Authorization: Bearer <token>`".into()))?
            .trim();
        if !token.starts_with(TOKEN_PREFIX) {
            return Err(ApiError::Unauthorized("that is not a docflow token".into()));
        }
        let mut conn = state.pool().acquire().await?;
        let row = db::user_by_token(&mut conn, &Sha256::digest(token.as_bytes())).await?;
        return match row {
            Some(r) => {
                let credential = Credential::Token {
                    id: r.token_id,
                    ends_at: r.token_expires_at,
                };
                Ok(Some(CurrentUser::new(r.user, credential)?))
            }
            None => Err(ApiError::Unauthorized(
                "unknown, expired or revoked token".into(),
            )),
        };
    }
    let Some(session) = parts.extensions.get::<Session>() else {
        return Ok(None);
    };
    // The session store is PostgreSQL: failing to read it means the database is unreachable.
    let login = session.get::<Login>(SESSION_LOGIN).await.map_err(|e| {
        tracing::warn!(error = %e, "session store unavailable");
        ApiError::Unavailable {
            message: "the database is unreachable; try again shortly".into(),
            retry_after: std::time::Duration::from_secs(5),
        }
    })?;
    let Some(login) = login else {
        return Ok(None);
    };
    let ends_at = login.at + state.session_lifetimes().0;
    let row = if Utc::now() >= ends_at {
        None
    } else if let Some(row) = state.signed_in().get(login.user) {
        Some(row)
    } else {
        let generation = state.signed_in().generation();
        let mut conn = state.pool().acquire().await?;
        let row = db::user_by_id(&mut conn, login.user).await?;
        if let Some(r) = &row {
            state.signed_in().put(r.clone(), generation);
        }
        row
    };
    match row {
        // A password change since this login voids it.
        Some(r) if r.sessions_valid_after.is_none_or(|t| login.at >= t) => {
            keep_alive(session, &login, state.session_lifetimes().1).await?;
            let credential = Credential::Session {
                login: login.id,
                ends_at,
            };
            Ok(Some(CurrentUser::new(r, credential)?))
        }
        // Past its lifetime, voided, or its user deleted: worthless.
        _ => {
            session.flush().await.context("deleting a stale session")?;
            Ok(None)
        }
    }
}

/// Keeps a session in use alive. Its expiry in the store and its cookie's
/// are set when it is written, which is at login; so once half of its idle
/// lifetime has passed since, a request writes it again (one write per
/// session per half lifetime), and it ends `idle` after the last request.
async fn keep_alive(
    session: &Session,
    login: &Login,
    idle: std::time::Duration,
) -> Result<(), ApiError> {
    let renewed = session
        .get::<DateTime<Utc>>(SESSION_RENEWED)
        .await
        .ok()
        .flatten()
        .unwrap_or(login.at);
    let now = Utc::now();
    if (now - renewed).to_std().unwrap_or_default() >= idle / 2 {
        session
            .insert(SESSION_RENEWED, now)
            .await
            .context("renewing the session")?;
    }
    Ok(())
}

impl<S: Identity> FromRequestParts<S> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        resolve(state, parts)
            .await?
            .ok_or_else(|| ApiError::Unauthorized("log in or send a bearer token".into()))
    }
}

/// The refusal of an action to a viewer.
fn read_only() -> ApiError {
    ApiError::Forbidden("the viewer role reads only: ask an admin to do this".into())
}

/// An authenticated admin; 401 when anonymous, 403 for members and viewers.
pub struct AdminUser(pub CurrentUser);

impl<S: Identity> FromRequestParts<S> for AdminUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        caller_who(parts, state, CurrentUser::require_admin)
            .await
            .map(AdminUser)
    }
}

/// An authenticated operator, admin or viewer, for what admins read; 401
/// when anonymous, 403 for members.
pub struct OperatorUser(pub CurrentUser);

impl<S: Identity> FromRequestParts<S> for OperatorUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        caller_who(parts, state, CurrentUser::require_operator)
            .await
            .map(OperatorUser)
    }
}

/// The caller, when `allowed` lets them through; 401 when anonymous.
async fn caller_who(
    parts: &mut Parts,
    state: &impl Identity,
    allowed: fn(&CurrentUser) -> Result<(), ApiError>,
) -> Result<CurrentUser, ApiError> {
    let user = CurrentUser::from_request_parts(parts, state).await?;
    allowed(&user)?;
    Ok(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_verify_only_against_their_own_hash() {
        let h = hash_password("s3cret").expect("hashes");
        assert!(verify_password("s3cret", &h));
        assert!(!verify_password("S3cret", &h));
        assert!(!verify_password("s3cret", "not a hash"));
    }
}
