//! PostgreSQL: connecting (creating the database when missing), migrations,
//! and the tenant/user/token repository.

use std::time::Duration;

use anyhow::Context;
use sqlx::{
    migrate::MigrateDatabase,
    postgres::{PgConnectOptions, PgPoolOptions},
    PgConnection, PgPool, Postgres,
};
use uuid::Uuid;

/// Embedded migrations from `migrations/`.
/// docflow's migrations. One this binary does not know was applied by a
/// newer one and is ignored: in a rolling upgrade the old processes keep
/// running (and restarting) against the newer schema, which only adds.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate::Migrator {
    ignore_missing: true,
    ..sqlx::migrate!("../migrations")
};

/// Connects to `url`, creating the database if it does not exist, and migrates it.
pub async fn connect_and_migrate(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    if !Postgres::database_exists(url)
        .await
        .context("checking whether the database exists")?
    {
        // Two processes may race to create it; the loser sees "already exists".
        if let Err(e) = Postgres::create_database(url).await {
            if !Postgres::database_exists(url).await.unwrap_or(false) {
                return Err(e).context("creating the database");
            }
        }
    }
    let pool = connect(url, max_connections).await?;
    migrate(&pool).await?;
    Ok(pool)
}

/// A pool that fails fast when PostgreSQL is unreachable, so requests answer 503 quickly.
///
/// sqlx prepares every statement and PostgreSQL caches its plan. That suits
/// the hot path (uploads, claims, checkpoints), but after five runs a cached
/// generic plan of a query whose best plan depends on its values, a time
/// window (`finished_at > now() - $1`) or an optional filter
/// (`$1 IS NULL OR tenant_id = $1`), guesses a third of the table and scans
/// it. Those queries are sent unprepared (`.persistent(false)`), so each run
/// is planned with its values; planning every statement instead cost uploads
/// a sixth of their throughput.
/// Connections a docflow process holds for as long as it runs, each
/// `LISTEN`ing: the outbox relay, the batch checker and the webhook
/// deliverer (background role), ended credentials (web role).
/// [`crate::Application`] adds them to `DOCFLOW_DB_POOL`, which counts the
/// connections for queries, so that a small pool is never all taken by
/// listeners.
pub fn listeners(background: bool, web: bool) -> u32 {
    3 * u32::from(background) + u32::from(web)
}

pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = url.parse().context("parsing DATABASE_URL")?;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options.application_name("docflow"))
        .await
        .context("connecting to PostgreSQL")
}

/// Fails with what to do when PostgreSQL cannot load pgvector (the
/// migrations need it).
async fn require_pgvector(pool: &PgPool) -> anyhow::Result<()> {
    let available = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS "available!""#
    )
    .fetch_one(pool)
    .await
    .context("asking PostgreSQL for its extensions")?;
    anyhow::ensure!(
        available,
        "PostgreSQL has no pgvector extension: install it (scripts/install-pgvector.sh \
         builds it here; see the README for production servers) and start docflow again"
    );
    Ok(())
}

pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    require_pgvector(pool).await?;
    // Serialise concurrent migrators (several processes starting at once).
    MIGRATOR.run(pool).await.context("applying migrations")?;
    tower_sessions_sqlx_store::PostgresStore::new(pool.clone())
        .migrate()
        .await
        .context("creating the session table")?;
    Ok(())
}

/// A tenant's plan; picks the queue tier of its uploads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Free,
    Paid,
}

impl Plan {
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Paid => "paid",
        }
    }
}

/// docflow's timestamps. sqlx's query macros read `timestamptz` as the
/// `time` crate's type whenever its `time` feature is on (the session
/// store turns it on), so checked queries name this one: `AS "col: Timestamp"`
/// in `query!`, `AS "col: _"` (the field's type) in `query_as!`, and a
/// timestamp parameter is passed `as _`. The same goes for columns of a
/// domain type (`short_text`, `queue_name`, …), which the macros do not see
/// through.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Member,
    /// An operator who reads what admins read and acts on nothing.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }
}

/// A user with its tenant, as needed by every authenticated request.
#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: Uuid,
    pub email: String,
    pub role: String,
    pub password_hash: String,
    pub tenant_id: Uuid,
    pub tenant: String,
    pub plan: String,
    pub max_unfinished_jobs: Option<i32>,
    /// Session logins before this are void (a password change).
    pub sessions_valid_after: Option<chrono::DateTime<chrono::Utc>>,
}

/// `sqlx::query_as!` for [`UserRow`]s: the select list written once, the
/// rest of the statement (`$rest`, a string literal) and its arguments after.
macro_rules! select_users {
    ($rest:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            UserRow,
            r#"SELECT u.id, u.email, u.role, u.password_hash, u.tenant_id, t.slug AS tenant, t.plan,
                      t.max_unfinished_jobs, u.sessions_valid_after AS "sessions_valid_after: _"
               FROM users u JOIN tenants t ON t.id = u.tenant_id "# + $rest
            $(, $arg)*
        )
    };
}

pub async fn user_by_email(conn: &mut PgConnection, email: &str) -> sqlx::Result<Option<UserRow>> {
    select_users!("WHERE u.email = lower($1)", email)
        .fetch_optional(conn)
        .await
}

pub async fn user_by_id(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<UserRow>> {
    select_users!("WHERE u.id = $1", id)
        .fetch_optional(conn)
        .await
}

/// A working token's user.
#[derive(Debug)]
pub struct TokenUserRow {
    pub user: UserRow,
    pub token_id: Uuid,
    pub token_expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The user owning a working (not expired, not revoked) bearer token, by
/// the token's SHA-256, marking the token used.
pub async fn user_by_token(
    conn: &mut PgConnection,
    token_sha256: &[u8],
) -> sqlx::Result<Option<TokenUserRow>> {
    // One statement: the select list of `select_users!` with the token's
    // columns, read through the CTE (hence the `!`: not null).
    let row = sqlx::query!(
        r#"WITH tok AS (
             UPDATE api_tokens SET last_used_at = now()
             WHERE token_sha256 = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
             RETURNING id, user_id, expires_at)
         SELECT u.id, u.email, u.role, u.password_hash, u.tenant_id, t.slug AS tenant, t.plan,
                t.max_unfinished_jobs, u.sessions_valid_after AS "sessions_valid_after: Timestamp",
                tok.id AS "token_id!", tok.expires_at AS "token_expires_at: Timestamp"
         FROM tok JOIN users u ON u.id = tok.user_id JOIN tenants t ON t.id = u.tenant_id"#,
        token_sha256
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| TokenUserRow {
        user: UserRow {
            id: r.id,
            email: r.email,
            role: r.role,
            password_hash: r.password_hash,
            tenant_id: r.tenant_id,
            tenant: r.tenant,
            plan: r.plan,
            max_unfinished_jobs: r.max_unfinished_jobs,
            sessions_valid_after: r.sessions_valid_after,
        },
        token_id: r.token_id,
        token_expires_at: r.token_expires_at,
    }))
}

pub async fn count_users(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM users"#)
        .fetch_one(conn)
        .await
}

/// Creates the tenant if its slug is new; returns its id.
pub async fn ensure_tenant(conn: &mut PgConnection, slug: &str, plan: Plan) -> sqlx::Result<Uuid> {
    sqlx::query_scalar!(
        "INSERT INTO tenants (id, slug, plan) VALUES ($1, $2, $3)
         ON CONFLICT (slug) DO UPDATE SET slug = EXCLUDED.slug
         RETURNING id",
        Uuid::now_v7(),
        slug,
        plan.as_str()
    )
    .fetch_one(conn)
    .await
}

pub async fn insert_user(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    email: &str,
    password_hash: &str,
    role: Role,
) -> sqlx::Result<Uuid> {
    sqlx::query_scalar!(
        "INSERT INTO users (id, tenant_id, email, password_hash, role)
         VALUES ($1, $2, lower($3), $4, $5) RETURNING id",
        Uuid::now_v7(),
        tenant_id,
        email,
        password_hash,
        role.as_str()
    )
    .fetch_one(conn)
    .await
}

pub async fn insert_token(
    conn: &mut PgConnection,
    user_id: Uuid,
    name: &str,
    token_sha256: &[u8],
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO api_tokens (id, user_id, token_sha256, name, expires_at) VALUES ($1, $2, $3, $4, $5)",
        Uuid::now_v7(),
        user_id,
        token_sha256,
        name,
        expires_at as _
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A token as `docflow token list` shows it (never its secret).
#[derive(Debug)]
pub struct TokenRow {
    pub id: Uuid,
    pub name: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn tokens_of(conn: &mut PgConnection, user_id: Uuid) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        r#"SELECT id, name, created_at AS "created_at: _", last_used_at AS "last_used_at: _",
                  expires_at AS "expires_at: _", revoked_at AS "revoked_at: _"
           FROM api_tokens WHERE user_id = $1 ORDER BY created_at"#,
        user_id
    )
    .fetch_all(conn)
    .await
}

/// Writes one audit-log row inside the caller's transaction.
pub async fn audit(
    conn: &mut PgConnection,
    actor_id: Uuid,
    actor_email: &str,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO audit_log (actor_id, actor_email, action, target, detail) VALUES ($1, $2, $3, $4, $5)",
        actor_id,
        actor_email,
        action,
        target,
        detail
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// What wakes a background loop that works through rows: a `NOTIFY` on
/// its channel (sent in the transaction that wrote them), or the poll
/// interval, for a notice lost while the listener was reconnecting.
pub struct Wakeup {
    pool: sqlx::PgPool,
    channel: &'static str,
    listener: Option<sqlx::postgres::PgListener>,
}

impl Wakeup {
    pub fn new(pool: sqlx::PgPool, channel: &'static str) -> Self {
        Self {
            pool,
            channel,
            listener: None,
        }
    }

    /// Waits for a notice or `poll`; false once `shutdown` is cancelled.
    pub async fn wait(
        &mut self,
        poll: std::time::Duration,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> bool {
        if self.listener.is_none() {
            self.listener = async {
                let mut l = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
                l.listen(self.channel).await?;
                Ok::<_, sqlx::Error>(l)
            }
            .await
            .map_err(
                |e| tracing::debug!(error = %e, channel = self.channel, "listener unavailable"),
            )
            .ok();
        }
        let notice = async {
            match self.listener.as_mut() {
                Some(l) => !matches!(tokio::time::timeout(poll, l.recv()).await, Ok(Err(_))),
                None => {
                    tokio::time::sleep(poll).await;
                    true
                }
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => false,
            alive = notice => {
                if !alive {
                    self.listener = None;
                }
                true
            }
        }
    }
}
