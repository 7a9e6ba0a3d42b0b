//! Jobs: states, queue tiers, the broker message; `machine` is the state
//! machine (the only writer of `jobs`), `repo` reads jobs and their events,
//! `view` adds what the job page shows beyond the job's row.

pub mod events;
pub mod inbox;
pub mod machine;
pub mod outbox;
pub mod reconcile;
pub mod repo;
pub mod view;

use std::{fmt, str::FromStr};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef},
    Postgres,
};
use uuid::Uuid;

/// Where a job waits. Priority is by separate queues and per-queue worker
/// concurrency, never by a priority field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Paid tenants.
    High,
    /// Free tenants.
    Normal,
    /// Documents over `slow_pages` pages, any tenant.
    Slow,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::High, Tier::Normal, Tier::Slow];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::High => "high",
            Tier::Normal => "normal",
            Tier::Slow => "slow",
        }
    }

    /// The quorum queue that holds this tier's messages.
    pub fn queue_name(self) -> String {
        format!("docflow.jobs.{}", self.as_str())
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Tier {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "high" => Ok(Tier::High),
            "normal" => Ok(Tier::Normal),
            "slow" => Ok(Tier::Slow),
            other => Err(format!(
                "unknown queue `{other}`: expected high, normal or slow"
            )),
        }
    }
}

// `jobs.queue` is text with a CHECK constraint, so a tier is read and
// written as its name; a value outside the three is a decode error, never
// a silent default.
impl sqlx::Type<Postgres> for Tier {
    fn type_info() -> PgTypeInfo {
        <&str as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for Tier {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse()?)
    }
}

impl sqlx::Encode<'_, Postgres> for Tier {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <&str as sqlx::Encode<Postgres>>::encode(self.as_str(), buf)
    }
}

/// A job's state. Mirrored by the `job_state` Postgres enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "job_state", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Accepted (upload, re-enqueue, expired lease); an outbox row will publish it.
    Pending,
    /// Leased by a worker that is running its steps.
    Processing,
    /// A step failed transiently; an outbox row re-publishes it at `next_attempt_at`.
    Retrying,
    /// All four steps have their checkpoint. Terminal.
    Done,
    /// Failed permanently or out of retries; dead-lettered. Terminal until re-enqueued.
    Failed,
    /// Stopped by its user or an administrator; its partial chunks removed. Terminal.
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Processing,
        JobState::Retrying,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Processing => "processing",
            JobState::Retrying => "retrying",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

impl FromStr for JobState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown state `{s}`: expected pending, processing, retrying, done, failed or cancelled"
                )
            })
    }
}

/// The four pipeline steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    Parse,
    Chunk,
    Embed,
    Store,
}

impl Step {
    pub const ALL: [Step; 4] = [Step::Parse, Step::Chunk, Step::Embed, Step::Store];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Parse => "parse",
            Step::Chunk => "chunk",
            Step::Embed => "embed",
            Step::Store => "store",
        }
    }

    /// The step after this one.
    pub fn next(self) -> Option<Step> {
        match self {
            Step::Parse => Some(Step::Chunk),
            Step::Chunk => Some(Step::Embed),
            Step::Embed => Some(Step::Store),
            Step::Store => None,
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of a message on `docflow.jobs.*` (DESIGN §4). Read straight
/// from the statement that (re-)enqueues the job: see [`returning_message`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct JobMessage {
    pub job_id: Uuid,
    pub tenant_id: Uuid,
    pub document_id: Uuid,
    pub queue: Tier,
    pub attempt: i32,
    pub enqueued_at: DateTime<Utc>,
}

/// `sqlx::query_as!` for [`JobMessage`]s: `$statement` (a string literal)
/// updates the jobs that go out again, and the `RETURNING` list the message
/// is read from is written here once; `$attempt` (a string literal) is the
/// attempt the message carries, `"attempt"` or `"attempt + 1"`.
macro_rules! returning_message {
    ($statement:literal, $attempt:literal $(, $arg:expr)* $(,)?) => {
        sqlx::query_as!(
            $crate::jobs::JobMessage,
            $statement
                + r#" RETURNING id AS job_id, tenant_id, document_id, queue AS "queue: _", "#
                + $attempt
                + r#" AS "attempt!: _", enqueued_at AS "enqueued_at: _""#
            $(, $arg)*
        )
    };
}
pub(crate) use returning_message;

/// A job as the worker that claimed it sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedJob {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub document_id: Uuid,
    pub uploaded_by: Uuid,
    pub queue: Tier,
    pub attempt: i32,
    /// Retries spent before this run.
    pub retries: i32,
    pub filename: String,
    pub content_type: String,
    pub blob_key: String,
    pub text_blob_key: Option<String>,
    pub enqueued_at: DateTime<Utc>,
}

impl ClaimedJob {
    /// The message that runs this job again after a failed attempt.
    pub fn next_attempt(&self) -> JobMessage {
        JobMessage {
            job_id: self.id,
            tenant_id: self.tenant_id,
            document_id: self.document_id,
            queue: self.queue,
            attempt: self.attempt + 1,
            enqueued_at: self.enqueued_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_names() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
        assert!("lost".parse::<JobState>().is_err());
        assert!(JobState::Done.is_terminal() && JobState::Failed.is_terminal());
        assert!(!JobState::Retrying.is_terminal());
    }

    #[test]
    fn message_body_has_the_contract_fields() {
        let m = JobMessage {
            job_id: Uuid::nil(),
            tenant_id: Uuid::nil(),
            document_id: Uuid::nil(),
            queue: Tier::High,
            attempt: 1,
            enqueued_at: DateTime::<Utc>::UNIX_EPOCH,
        };
        let v = serde_json::to_value(&m).expect("serialises");
        let mut keys: Vec<_> = v.as_object().expect("object").keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "attempt",
                "document_id",
                "enqueued_at",
                "job_id",
                "queue",
                "tenant_id"
            ]
        );
        assert_eq!(v["queue"], "high");
    }
}
