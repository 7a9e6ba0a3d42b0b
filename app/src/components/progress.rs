//! A job's progress through `parse → chunk → embed → store`: one segment
//! per step, the parse segment filling with the pages read and the embed
//! segment with `chunks_embedded / chunks_total`, and a text such as
//! `parse 120/300 pages` or `embed 64/300`.

use leptos::prelude::*;

use crate::{dto::JobDto, format::STEPS};

/// Overall completion in percent (embedding weighs most).
pub fn percent(job: &JobDto) -> u32 {
    if job.state == "done" {
        return 100;
    }
    const WEIGHT: [f64; 4] = [10.0, 10.0, 70.0, 10.0];
    let mut total = 0.0;
    for (i, s) in job.steps.iter().enumerate() {
        let w = WEIGHT.get(i).copied().unwrap_or(0.0);
        match s.state.as_str() {
            "done" => total += w,
            "running" => total += w * running_fraction(&s.name, job).unwrap_or(0.0),
            _ => {}
        }
    }
    total.clamp(0.0, 99.0).round() as u32
}

/// How much of a running step is done, for the steps that count: parse
/// in pages, embed in chunks.
fn running_fraction(step: &str, job: &JobDto) -> Option<f64> {
    let p = &job.progress;
    let (done, total) = match step {
        "parse" => (p.pages_parsed, p.pages_total),
        "embed" => (p.chunks_embedded, p.chunks_total),
        _ => return None,
    };
    (total > 0).then(|| f64::from(done) / f64::from(total))
}

/// What the job is doing, in a few words: `embed 64/300`, `done`, `waiting`.
pub fn progress_text(job: &JobDto) -> String {
    match job.state.as_str() {
        "done" => "done".into(),
        "failed" => match &job.current_step {
            Some(s) => format!("failed at {s}"),
            None => "failed".into(),
        },
        "pending" => "waiting for a worker".into(),
        "retrying" => "waiting to retry".into(),
        // Where it stopped: a cancelled job keeps the step it was at.
        "cancelled" => match step_text(job) {
            Some(at) => format!("cancelled at {at}"),
            None => "cancelled before it started".into(),
        },
        _ => step_text(job).unwrap_or_else(|| "starting".into()),
    }
}

/// The step a job is at, with the count of those that have one:
/// `parse 120/300 pages`, `embed 64/300`, `chunk`.
fn step_text(job: &JobDto) -> Option<String> {
    let p = &job.progress;
    match job.current_step.as_deref()? {
        "parse" if p.pages_total > 0 => {
            Some(format!("parse {}/{} pages", p.pages_parsed, p.pages_total))
        }
        "embed" if p.chunks_total > 0 => {
            Some(format!("embed {}/{}", p.chunks_embedded, p.chunks_total))
        }
        s => Some(s.to_string()),
    }
}

/// Applies a live event to a job as shown, until the server's full view arrives.
/// A step's event while it runs carries its progress so far (`embed`'s
/// batches); any other step event is the step's end, which starts the next.
pub fn apply_event(job: &mut JobDto, e: &crate::dto::LiveJobEvent) {
    job.state = e.state.clone();
    match e.state.as_str() {
        "processing" => {
            if let Some(step) = &e.step {
                let ended = e.progress.is_none_or(|p| p.done >= p.total);
                if let Some(idx) = STEPS.iter().position(|s| s == step) {
                    let running = if ended { idx + 1 } else { idx };
                    job.current_step = STEPS.get(running).map(|s| s.to_string());
                    for (i, s) in job.steps.iter_mut().enumerate() {
                        if i < running {
                            s.state = "done".into();
                        } else if i == running && s.state != "done" {
                            s.state = "running".into();
                        }
                    }
                }
            }
            match (e.progress, e.step.as_deref()) {
                (Some(p), Some("parse")) => {
                    job.progress.pages_parsed = p.done;
                    job.progress.pages_total = p.total;
                }
                (Some(p), _) => {
                    job.progress.chunks_embedded = p.done;
                    job.progress.chunks_total = p.total;
                }
                _ => {}
            }
        }
        "done" => {
            job.current_step = None;
            for s in &mut job.steps {
                s.state = "done".into();
            }
        }
        "failed" | "retrying" => {
            if let Some(step) = &e.step {
                job.current_step = Some(step.clone());
                for s in &mut job.steps {
                    if &s.name == step {
                        s.state = "failed".into();
                    }
                }
            }
        }
        _ => {}
    }
}

#[component]
pub fn StepBar(#[prop(into)] job: Signal<JobDto>) -> impl IntoView {
    let label = move || job.with(|j| format!("Progress of {}", j.filename));
    view! {
        <div
            class="stepbar"
            role="progressbar"
            aria-label=label
            aria-valuemin="0"
            aria-valuemax="100"
            aria-valuenow=move || job.with(percent).to_string()
            aria-valuetext=move || job.with(progress_text)
        >
            {STEPS
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let state = move || {
                        job.with(|j| j.steps.get(i).map(|s| s.state.clone()).unwrap_or_default())
                    };
                    let fill = move || {
                        job.with(|j| {
                            let st = j.steps.get(i).map(|s| s.state.as_str()).unwrap_or("");
                            match st {
                                "done" => 100.0,
                                "running" => {
                                    running_fraction(name, j).map_or(35.0, |f| 100.0 * f)
                                }
                                "failed" => 100.0,
                                _ => 0.0,
                            }
                        })
                    };
                    view! {
                        <div class=move || format!("seg {}", state())>
                            <span class="seg-name">{*name}</span>
                            <span class="seg-track" aria-hidden="true">
                                <span
                                    class="seg-fill"
                                    style=move || format!("width: {:.0}%", fill())
                                ></span>
                            </span>
                        </div>
                    }
                })
                .collect_view()}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dto::{EventProgress, LiveJobEvent, ProgressDto, StepDto};

    fn job() -> JobDto {
        JobDto {
            id: "j".into(),
            document_id: "d".into(),
            filename: "a.pdf".into(),
            tenant: "acme".into(),
            queue: "high".into(),
            state: "pending".into(),
            attempt: 0,
            current_step: None,
            steps: STEPS
                .iter()
                .map(|s| StepDto {
                    name: (*s).into(),
                    state: "pending".into(),
                    attempts: 0,
                    duration_ms: None,
                    error: None,
                    started_at: None,
                })
                .collect(),
            progress: ProgressDto::default(),
            last_error: None,
            last_error_code: None,
            next_attempt_at: None,
            enqueued_at: chrono::DateTime::UNIX_EPOCH,
            started_at: None,
            finished_at: None,
            document_deleted: false,
            uploaded_at: chrono::DateTime::UNIX_EPOCH,
            uploaded_by: None,
            dead_periods: Vec::new(),
        }
    }

    #[test]
    fn an_embed_progress_event_marks_earlier_steps_done_and_reads_embed_64_of_300() {
        let mut j = job();
        apply_event(
            &mut j,
            &LiveJobEvent {
                job_id: "j".into(),
                state: "processing".into(),
                step: Some("embed".into()),
                progress: Some(EventProgress {
                    done: 64,
                    total: 300,
                }),
                message: String::new(),
                at: chrono::DateTime::UNIX_EPOCH,
            },
        );
        assert_eq!(progress_text(&j), "embed 64/300");
        assert_eq!(j.steps[0].state, "done");
        assert_eq!(j.steps[2].state, "running");
        assert_eq!(percent(&j), 35);
    }

    #[test]
    fn a_parse_progress_event_reads_parse_120_of_300_pages() {
        let mut j = job();
        let event = LiveJobEvent {
            job_id: "j".into(),
            state: "processing".into(),
            step: Some("parse".into()),
            progress: Some(EventProgress {
                done: 120,
                total: 300,
            }),
            message: "parse 120/300 pages".into(),
            at: chrono::DateTime::UNIX_EPOCH,
        };
        apply_event(&mut j, &event);
        assert_eq!(progress_text(&j), "parse 120/300 pages");
        assert_eq!(j.steps[0].state, "running");
        assert_eq!(j.progress.chunks_total, 0, "pages are not chunks");
        // parse weighs 10 %: 120/300 of it.
        assert_eq!(percent(&j), 4);
    }

    #[test]
    fn a_step_event_without_progress_ends_that_step_and_starts_the_next() {
        let mut j = job();
        let mut event = LiveJobEvent {
            job_id: "j".into(),
            state: "processing".into(),
            step: Some("parse".into()),
            progress: None,
            message: "parsed: 1 page".into(),
            at: chrono::DateTime::UNIX_EPOCH,
        };
        apply_event(&mut j, &event);
        assert_eq!(j.steps[0].state, "done");
        assert_eq!(j.steps[1].state, "running");
        assert_eq!(progress_text(&j), "chunk");
        // `embed` ends with every chunk embedded: `store` runs.
        event.step = Some("embed".into());
        event.progress = Some(EventProgress { done: 2, total: 2 });
        apply_event(&mut j, &event);
        assert_eq!(j.steps[2].state, "done");
        assert_eq!(j.steps[3].state, "running");
        assert_eq!(progress_text(&j), "store");
    }

    #[test]
    fn a_cancelled_job_says_where_it_stopped() {
        let mut j = job();
        j.state = "cancelled".into();
        j.current_step = None;
        assert_eq!(progress_text(&j), "cancelled before it started");
        j.current_step = Some("embed".into());
        j.progress.chunks_embedded = 64;
        j.progress.chunks_total = 300;
        assert_eq!(progress_text(&j), "cancelled at embed 64/300");
        j.current_step = Some("parse".into());
        assert_eq!(progress_text(&j), "cancelled at parse");
    }
}
