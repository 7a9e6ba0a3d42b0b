//! What the job page shows beyond the job's row, read on top of `repo`:
//! each job's dead-letter history (the time it lay failed in the list is
//! not working time: "dead for 12 min, re-enqueued by an administrator"),
//! the uploader only to administrators, and a timeline that names each
//! run once. A run cut short without a fault of the document (a
//! dependency outage, a worker's shutdown, a hand-over to `slow`) does not
//! count as an attempt, so the run after it carries the same number: it
//! reads "attempt N resumed", and every attempt has exactly one "attempt N
//! started", as many as the job's `attempt`.

use app::dto::{DeadPeriodDto, JobDto, JobEventDto};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

struct DeadPeriodRow {
    job_id: Uuid,
    reason: String,
    dead_at: DateTime<Utc>,
    resolved_at: Option<DateTime<Utc>>,
    resolution: Option<String>,
    resolved_by: Option<String>,
}

/// Fills `dead_periods` of `jobs` from their dead letters, oldest first.
pub async fn attach_dead_periods(conn: &mut PgConnection, jobs: &mut [JobDto]) -> sqlx::Result<()> {
    let ids: Vec<Uuid> = jobs
        .iter()
        .filter_map(|j| Uuid::parse_str(&j.id).ok())
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query_as!(
        DeadPeriodRow,
        r#"SELECT dl.job_id AS "job_id!", dl.reason, dl.dead_at AS "dead_at: _",
                  dl.resolved_at AS "resolved_at: _", dl.resolution, u.role AS "resolved_by?"
           FROM dead_letters dl LEFT JOIN users u ON u.id = dl.resolved_by
           WHERE dl.job_id = ANY($1) ORDER BY dl.dead_at, dl.id"#,
        &ids
    )
    .fetch_all(conn)
    .await?;
    for row in rows {
        let id = row.job_id.to_string();
        if let Some(job) = jobs.iter_mut().find(|j| j.id == id) {
            job.dead_periods.push(DeadPeriodDto {
                reason: row.reason,
                dead_at: row.dead_at,
                resolved_at: row.resolved_at,
                resolution: row.resolution,
                resolved_by: row.resolved_by,
            });
        }
    }
    Ok(())
}

/// Leaves out who uploaded each job's document: only administrators are told.
pub fn hide_uploaders(jobs: &mut [JobDto]) {
    for job in jobs {
        job.uploaded_by = None;
    }
}

/// The attempt a run's first event announces: `attempt 3 started` is 3.
fn run_started(e: &JobEventDto) -> Option<i32> {
    if e.step.is_some() || e.state != "processing" {
        return None;
    }
    e.message
        .strip_prefix("attempt ")?
        .strip_suffix(" started")?
        .parse()
        .ok()
}

/// Names each run of a timeline (oldest event first) once: a run that
/// continues an attempt already started reads "attempt N resumed".
pub fn name_runs(events: &mut [JobEventDto]) {
    let mut started: Vec<i32> = Vec::new();
    for e in events {
        if e.state == "failed" {
            // Before attempts counted on across re-enqueues, a re-enqueued
            // job started again at 1: its numbers begin afresh here.
            started.clear();
        }
        let Some(n) = run_started(e) else { continue };
        if started.contains(&n) {
            e.message = format!("attempt {n} resumed");
        } else {
            started.push(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(state: &str, step: Option<&str>, message: &str) -> JobEventDto {
        JobEventDto {
            id: 0,
            state: state.into(),
            step: step.map(Into::into),
            progress: None,
            message: message.into(),
            at: DateTime::UNIX_EPOCH,
        }
    }

    fn messages(events: &[JobEventDto]) -> Vec<&str> {
        events.iter().map(|e| e.message.as_str()).collect()
    }

    #[test]
    fn a_run_after_an_outage_resumes_its_attempt_instead_of_starting_it_twice() {
        let mut events = vec![
            event("processing", None, "attempt 1 started"),
            event("processing", Some("embed"), "embed started"),
            event(
                "retrying",
                Some("embed"),
                "embedding provider down; the job waits without spending its retries",
            ),
            event("processing", None, "attempt 1 started"),
            event("processing", Some("embed"), "embed started"),
            event(
                "retrying",
                Some("embed"),
                "embed failed: 503; retry 1 in 1.0 s",
            ),
            event("processing", None, "attempt 2 started"),
            event("done", None, "done: the document is searchable"),
        ];
        name_runs(&mut events);
        assert_eq!(
            messages(&events)
                .into_iter()
                .filter(|m| m.starts_with("attempt"))
                .collect::<Vec<_>>(),
            [
                "attempt 1 started",
                "attempt 1 resumed",
                "attempt 2 started"
            ]
        );
        assert_eq!(events[1].message, "embed started", "step events untouched");
    }

    #[test]
    fn numbers_begin_afresh_after_a_failure_as_old_timelines_restarted_them() {
        let mut events = vec![
            event("processing", None, "attempt 1 started"),
            event(
                "failed",
                Some("parse"),
                "failed at parse: the PDF is damaged",
            ),
            event("pending", None, "re-enqueued by an administrator"),
            event("processing", None, "attempt 1 started"),
        ];
        name_runs(&mut events);
        assert_eq!(events[3].message, "attempt 1 started");
    }
}
