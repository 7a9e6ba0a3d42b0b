//! The inbox: a user's notifications (one per finished upload) and their
//! read marks. Shared by the REST API (`/api/notifications`) and the pages.

use app::dto::{InboxDto, NotificationDto};
use sqlx::PgPool;
use uuid::Uuid;

/// How many notifications the inbox shows.
const INBOX_LIMIT: i64 = 100;

/// The newest notifications of a user and how many of all are unread.
pub async fn list(pool: &PgPool, user_id: Uuid) -> sqlx::Result<InboxDto> {
    let notifications = sqlx::query_as!(
        NotificationDto,
        r#"SELECT id::text AS "id!", kind, title, body, link, job_id::text AS job_id,
                  created_at AS "created_at: _", read_at AS "read_at: _"
           FROM notifications WHERE user_id = $1 ORDER BY created_at DESC LIMIT $2"#,
        user_id,
        INBOX_LIMIT
    )
    .fetch_all(pool)
    .await?;
    let unread = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM notifications WHERE user_id = $1 AND read_at IS NULL"#,
        user_id
    )
    .fetch_one(pool)
    .await?;
    Ok(InboxDto {
        unread,
        notifications,
    })
}

/// Marks one of the user's notifications read (idempotent); `false` when it
/// is not theirs or does not exist.
pub async fn mark_read(pool: &PgPool, user_id: Uuid, id: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query!(
        "UPDATE notifications SET read_at = coalesce(read_at, now()) WHERE id = $1 AND user_id = $2",
        id,
        user_id
    )
    .execute(pool)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// Marks all of the user's unread notifications read; returns how many.
pub async fn mark_all_read(pool: &PgPool, user_id: Uuid) -> sqlx::Result<u64> {
    let r = sqlx::query!(
        "UPDATE notifications SET read_at = now() WHERE user_id = $1 AND read_at IS NULL",
        user_id
    )
    .execute(pool)
    .await?;
    Ok(r.rows_affected())
}
