//! The job state machine: the only code that writes `jobs.state` (a unit
//! test below reads every other source file to keep it so).
//!
//! Each transition is one guarded `UPDATE … WHERE state = … [AND
//! lease_owner = …]` that returns whether it happened (`Option` / `bool`),
//! and writes its `job_events` row, its outbox row, its dead letter and its
//! inbox entry in the caller's transaction. What to do when a run ends is
//! [`decide`]: a pure function of the job, the error and the budget.
//!
//! In four parts: the decision (`decide.rs`), what each transition writes
//! beside the job's row (`effects.rs`), the transitions of the lease holder
//! (`lease.rs`) and those of everyone else (`external.rs`).

mod decide;
mod effects;
mod external;
mod lease;

pub use self::{decide::*, effects::*, external::*, lease::*};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{DateTime, Utc};

    use super::*;
    use crate::jobs::JobState;

    const DELAYS: [Duration; 3] = [
        Duration::from_secs(1),
        Duration::from_secs(4),
        Duration::from_secs(16),
    ];

    fn now() -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::days(20_000)
    }

    fn budget(spent: i32) -> Budget<'static> {
        Budget {
            spent,
            delays: &DELAYS,
        }
    }

    /// Every fault a run can end with, and success.
    fn ends() -> Vec<Result<(), Fault>> {
        vec![
            Ok(()),
            Err(Fault::Permanent),
            Err(Fault::Transient),
            Err(Fault::RetryAfter(Duration::from_secs(2))),
            Err(Fault::Unavailable {
                until: now() + chrono::Duration::seconds(8),
            }),
            Err(Fault::Shutdown),
            Err(Fault::LeaseLost),
        ]
    }

    #[test]
    fn a_job_this_worker_no_longer_holds_is_never_touched() {
        for state in JobState::ALL {
            for end in ends() {
                for spent in 0..=4 {
                    // Under another worker's lease (or none), in any state.
                    assert_eq!(
                        decide(
                            state,
                            false,
                            end.as_ref().map(|_| ()),
                            budget(spent),
                            1.0,
                            now()
                        ),
                        Decision::Abandon,
                        "{state:?} {end:?} {spent}"
                    );
                    // Not processing at all.
                    if state != JobState::Processing {
                        assert_eq!(
                            decide(
                                state,
                                true,
                                end.as_ref().map(|_| ()),
                                budget(spent),
                                1.0,
                                now()
                            ),
                            Decision::Abandon,
                            "{state:?} {end:?} {spent}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_held_job_ends_by_its_fault_and_budget() {
        let at = |s: i64| now() + chrono::Duration::seconds(s);
        for spent in 0..=4 {
            for end in ends() {
                let got = decide(
                    JobState::Processing,
                    true,
                    end.as_ref().map(|_| ()),
                    budget(spent),
                    1.0,
                    now(),
                );
                let want = match &end {
                    Ok(()) => Decision::Done,
                    Err(Fault::Permanent) => Decision::Fail(FailureKind::Permanent),
                    // The document's own transient failure spends the budget.
                    Err(Fault::Transient) => match spent {
                        0 => Decision::Retry {
                            retry: 1,
                            delay: DELAYS[0],
                        },
                        1 => Decision::Retry {
                            retry: 2,
                            delay: DELAYS[1],
                        },
                        2 => Decision::Retry {
                            retry: 3,
                            delay: DELAYS[2],
                        },
                        _ => Decision::Fail(FailureKind::Exhausted),
                    },
                    // A dependency's trouble spends nothing, whatever was spent.
                    Err(Fault::RetryAfter(_)) => Decision::Wait { until: at(2) },
                    Err(Fault::Unavailable { .. }) => Decision::Wait { until: at(8) },
                    Err(Fault::Shutdown) => Decision::Release,
                    Err(Fault::LeaseLost) => Decision::Abandon,
                };
                assert_eq!(got, want, "spent {spent}, {end:?}");
            }
        }
    }

    #[test]
    fn jitter_scales_the_delay_and_a_past_probe_time_means_now() {
        let d = decide(
            JobState::Processing,
            true,
            Err(&Fault::Transient),
            budget(1),
            1.2,
            now(),
        );
        assert_eq!(
            d,
            Decision::Retry {
                retry: 2,
                delay: Duration::from_millis(4800)
            }
        );
        let late = Fault::Unavailable {
            until: now() - chrono::Duration::seconds(5),
        };
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&late),
                budget(0),
                1.0,
                now()
            ),
            Decision::Wait { until: now() }
        );
        // A Retry-After beyond any date still decides (a day from now).
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&Fault::RetryAfter(Duration::MAX)),
                budget(0),
                1.0,
                now()
            ),
            Decision::Wait {
                until: now() + chrono::Duration::days(1)
            }
        );
        // No delays configured: the first transient failure is final.
        let none = Budget {
            spent: 0,
            delays: &[],
        };
        assert_eq!(
            decide(
                JobState::Processing,
                true,
                Err(&Fault::Transient),
                none,
                1.0,
                now()
            ),
            Decision::Fail(FailureKind::Exhausted)
        );
    }

    /// `grep` for the rule: outside `server/src/jobs/`, no source file
    /// updates or inserts into `jobs` (so none writes its state).
    #[test]
    fn only_the_jobs_module_writes_jobs() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let jobs_dir = src.join("jobs");
        let mut offenders = Vec::new();
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    if path != jobs_dir {
                        stack.push(path);
                    }
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("read file");
                let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
                for pattern in [
                    "UPDATE jobs ",
                    "UPDATE jobs\"",
                    "INSERT INTO jobs ",
                    "INSERT INTO jobs(",
                ] {
                    if flat.contains(pattern) {
                        offenders.push(format!("{}: {pattern}", path.display()));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "jobs written outside jobs/: {offenders:?}"
        );
    }
}
