//! `--demo` seeding and `docflow user add`.

use anyhow::Context;
use sqlx::PgPool;

use crate::{
    identity::auth,
    platform::db::{self, Plan, Role},
};

/// Creates a user, and its tenant when the slug is new. Fails when the email exists.
pub async fn add_user(
    pool: &PgPool,
    email: &str,
    tenant: &str,
    plan: Plan,
    role: Role,
    password: &str,
) -> anyhow::Result<()> {
    if password.len() < 8 {
        anyhow::bail!("the password must have at least 8 characters");
    }
    let hash = {
        let password = password.to_string();
        tokio::task::spawn_blocking(move || auth::hash_password(&password)).await??
    };
    let mut tx = pool.begin().await?;
    let tenant_id = db::ensure_tenant(&mut tx, tenant, plan)
        .await
        .with_context(|| format!("creating tenant {tenant}"))?;
    db::insert_user(&mut tx, tenant_id, email, &hash, role)
        .await
        .with_context(|| format!("creating user {email}"))?;
    tx.commit().await?;
    Ok(())
}

/// The demo's administrator (tenant `acme`, plan paid).
pub const ADMIN: &str = "admin@demo.test";
/// A member of `acme` (plan paid).
pub const ALICE: &str = "alice@acme.test";
/// A member of `globex` (plan free).
pub const BOB: &str = "bob@globex.test";
/// An operator who reads every admin page and acts on nothing.
pub const VIEWER: &str = "viewer@demo.test";

/// The demo's users: email, tenant, plan, role.
const USERS: [(&str, &str, Plan, Role); 4] = [
    (ADMIN, "acme", Plan::Paid, Role::Admin),
    (ALICE, "acme", Plan::Paid, Role::Member),
    (BOB, "globex", Plan::Free, Role::Member),
    (VIEWER, "acme", Plan::Paid, Role::Viewer),
];

/// Seeds the demo tenants and users when the database has no users yet.
pub async fn seed(pool: &PgPool, password: &str) -> anyhow::Result<bool> {
    let mut conn = pool.acquire().await?;
    if db::count_users(&mut conn).await? > 0 {
        return Ok(false);
    }
    drop(conn);
    for (email, tenant, plan, role) in USERS {
        add_user(pool, email, tenant, plan, role, password).await?;
    }
    tracing::info!("seeded demo users {ADMIN}, {ALICE}, {BOB}, {VIEWER}");
    Ok(true)
}
