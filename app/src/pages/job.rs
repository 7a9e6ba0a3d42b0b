//! `/jobs/:id`: one job's timeline (every event with its time and the time
//! since the previous one), its steps with attempts, durations and errors,
//! and why it failed; cancel, retry, and delete its document. Refreshes when
//! the live stream reports on the job.
//!
//! The header's attempts, the steps' and the timeline's "attempt N started"
//! lines count the same runs (the server names a run that resumes an
//! attempt "attempt N resumed"). Total time is time spent working and
//! waiting in queues; time the job lay in the dead-letter list is shown on
//! its own ("dead for 12 min, re-enqueued by an administrator"). A running
//! step shows how long it has run, counting on each second.

use chrono::{DateTime, Utc};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::{
    api::jobs::{cancel_job, delete_document, job_with_events, retry_job},
    components::{
        progress::{progress_text, StepBar},
        toast::{use_toasts, ToastKind},
    },
    dto::{DeadPeriodDto, JobDetail, JobDto, JobEventDto, ProgressDto, StepDto},
    error::AppError,
    format,
    live::{poll_while_down, use_live},
};

#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let live = use_live();
    // Changes whenever the stream reports on this job.
    let version = Memo::new(move |_| live.jobs.with(|m| m.get(&id()).map_or(0, |(s, _)| *s)));
    let poll = RwSignal::new(0u32);
    // The job's actions belong to the page, not to the view of one
    // version of the job: a live update re-renders the view while an
    // action may still be on its way.
    let act = job_action();
    // So are whether one is under way and the open delete confirmation
    // (which stays open across a live update).
    let busy = act.pending();
    let confirming = RwSignal::new(None::<Ask>);
    let toasts = use_toasts();
    Effect::new(move |_| {
        let Some((what, result)) = act.value().get() else {
            return;
        };
        if matches!(what, "delete" | "retry") {
            confirming.set(None);
        }
        match result {
            Ok(text) => toasts.show(text, ToastKind::Ok),
            Err(e) => toasts.show(format!("Could not {what}: {e}"), ToastKind::Bad),
        }
        poll.update(|n| *n += 1);
    });
    let detail = Resource::new(
        move || (id(), version.get(), poll.get()),
        |(id, _, _)| job_with_events(id),
    );

    // Polling fallback while the event stream is down (and for other
    // tenants' jobs, whose events an admin's stream does not carry).
    poll_while_down(live, poll, move || {
        detail
            .get_untracked()
            .and_then(Result::ok)
            .is_some_and(|d| !matches!(d.job.state.as_str(), "done" | "failed" | "cancelled"))
    });

    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading job…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => {
                        view! { <JobView detail=d act busy confirming /> }.into_any()
                    }
                    Err(AppError::NotFound) => {
                        view! {
                            <Title text="Job not found" />
                            <section class="empty-state">
                                <h1>"Job not found"</h1>
                                <p class="muted">"It does not exist or belongs to another tenant."</p>
                                <p><a class="btn" href="/">"Back to your documents"</a></p>
                            </section>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// `cancel`, `retry` or `delete` of a job (its id and document id).
type JobAct =
    Action<(&'static str, String, String), (&'static str, Result<&'static str, AppError>)>;

fn job_action() -> JobAct {
    Action::new(
        move |(what, id, document): &(&'static str, String, String)| {
            let (what, id, document) = (*what, id.clone(), document.clone());
            async move {
                let result = match what {
                    "cancel" => cancel_job(id)
                        .await
                        .map(|_| "Cancelled; its partial results are removed."),
                    "retry" => retry_job(id)
                        .await
                        .map(|_| "Retrying; the job is pending again."),
                    _ => delete_document(document)
                        .await
                        .map(|_| "Document deleted; nothing of it is searchable any more."),
                };
                (what, result)
            }
        },
    )
}

/// What the caller can do to the job: cancel it while unfinished, retry it
/// when failed or retrying, delete its document (after a confirmation).
///
/// Its handlers and reactive attributes hold only plain ids and page-level
/// values: a live update re-creates this view, disposing what it owned,
/// while its old buttons stay on screen (and their attributes reactive)
/// until the new data arrives (leptos#4350); a click on one of them must
/// still act, not read a disposed value.
#[component]
fn JobActions(
    job: JobDto,
    act: JobAct,
    busy: Memo<bool>,
    confirming: RwSignal<Option<Ask>>,
) -> impl IntoView {
    let filename = job.filename.clone();
    let run = {
        let (id, document) = (job.id.clone(), job.document_id.clone());
        move |what: &'static str| {
            act.dispatch((what, id.clone(), document.clone()));
        }
    };
    // A question takes the focus on its safe answer, Escape gives that
    // answer, and the focus goes back to the button that asked: a keyboard
    // user is never sent back to the top of the page.
    let safe = NodeRef::<leptos::html::Button>::new();
    let (asked_delete, asked_retry) = (
        NodeRef::<leptos::html::Button>::new(),
        NodeRef::<leptos::html::Button>::new(),
    );
    #[cfg(feature = "hydrate")]
    Effect::new(move |before: Option<Option<Ask>>| {
        let now = confirming.get();
        let target = match (now, before.flatten()) {
            (Some(_), _) => safe.get(),
            (None, Some(Ask::Delete)) => asked_delete.get(),
            (None, Some(Ask::Retry)) => asked_retry.get(),
            (None, None) => None,
        };
        if let Some(b) = target {
            let _ = b.focus();
        }
        now
    });
    let on_key = crate::components::on_escape(move || confirming.set(None));
    let unfinished = matches!(job.state.as_str(), "pending" | "retrying" | "processing");
    let retry = match job.state.as_str() {
        "failed" => Some("Retry"),
        "retrying" => Some("Retry now"),
        _ => None,
    };
    // A permanent failure fails again unless its cause changed: its Retry
    // says so first, as the dead-letter page does.
    let permanent = job.state == "failed"
        && job
            .dead_periods
            .last()
            .is_some_and(|p| p.reason == "permanent");
    let question = {
        let run = run.clone();
        move |ask: Ask| {
            let (label, text, go, what) = match ask {
                Ask::Delete => (
                    "Confirm deleting the document",
                    format!("Delete {filename} and everything made from it?"),
                    "Delete",
                    "delete",
                ),
                Ask::Retry => (
                    "Confirm retrying a permanent failure",
                    format!(
                        "{filename} failed for good: a retry fails the same way unless its cause \
                     changed (the file, a parser, a setting). Retry anyway?"
                    ),
                    "Retry anyway",
                    "retry",
                ),
            };
            let run = run.clone();
            view! {
                <div class="confirm" role="group" aria-label=label on:keydown=on_key>
                    <span>{text}</span>
                    <button class="btn small danger" disabled=busy on:click=move |_| run(what)>
                        {go}
                    </button>
                    <button class="btn small ghost" node_ref=safe on:click=move |_| confirming.set(None)>
                        {if ask == Ask::Delete { "Keep" } else { "Don't retry" }}
                    </button>
                </div>
            }
        }
    };
    view! {
        <div class="actions row" role="group" aria-label="Job actions">
            {unfinished
                .then(|| {
                    view! {
                        <button class="btn" disabled=busy on:click={
                            let run = run.clone();
                            move |_| run("cancel")
                        }>
                            "Cancel job"
                        </button>
                    }
                })}
            {retry
                .map(|label| {
                    view! {
                        <button class="btn" node_ref=asked_retry disabled=busy on:click={
                            let run = run.clone();
                            move |_| {
                                if permanent {
                                    confirming.set(Some(Ask::Retry));
                                } else {
                                    run("retry");
                                }
                            }
                        }>
                            {label}
                        </button>
                    }
                })}
            {(!job.document_deleted)
                .then(|| {
                    view! {
                        <button
                            class="btn ghost danger"
                            node_ref=asked_delete
                            disabled=busy
                            on:click=move |_| confirming.set(Some(Ask::Delete))
                        >
                            "Delete document"
                        </button>
                    }
                })}
            {job.document_deleted.then(|| view! { <span class="muted">"Document deleted"</span> })}
        </div>
        {move || confirming.get().map(question.clone())}
    }
}

/// The question the job page asks before an action that deserves one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ask {
    /// Deleting the document and everything made from it.
    Delete,
    /// Retrying a job that failed permanently.
    Retry,
}

/// Milliseconds of `periods` (times in the dead-letter list) before `end`:
/// a period still open, or closed after `end` (discarded), counts up to `end`.
fn dead_ms(periods: &[DeadPeriodDto], end: DateTime<Utc>) -> i64 {
    periods
        .iter()
        .map(|p| {
            let until = p.resolved_at.map_or(end, |r| r.min(end));
            (until - p.dead_at).num_milliseconds().max(0)
        })
        .sum()
}

/// Who brought a job back from the dead-letter list, in the tenant's words.
fn resolved_by(p: &DeadPeriodDto) -> &'static str {
    match (p.resolution.as_deref(), p.resolved_by.as_deref()) {
        (Some("discarded"), _) => "discarded by an administrator",
        (_, Some("admin")) => "re-enqueued by an administrator",
        (_, Some(_)) => "retried by its uploader",
        _ => "re-enqueued",
    }
}

/// The job's time in the dead-letter list, for its own line: `dead for 12
/// min, re-enqueued by an administrator`; `dead 2 times for 20 min 04 s in
/// all, last re-enqueued by …`; `in the dead-letter list for 3 min` while
/// it is there. `None` for a job that never was.
fn dead_text(periods: &[DeadPeriodDto], now: DateTime<Utc>) -> Option<String> {
    let last = periods.last()?;
    if last.resolved_at.is_none() {
        let so_far = format::duration_ms((now - last.dead_at).num_milliseconds());
        let before = &periods[..periods.len() - 1];
        return Some(match dead_ms(before, now) {
            0 => format!("in the dead-letter list for {so_far}"),
            ms => format!(
                "in the dead-letter list for {so_far}; dead for {} before",
                format::duration_ms(ms)
            ),
        });
    }
    let total = format::duration_ms(dead_ms(periods, now));
    Some(match periods.len() {
        1 => format!("dead for {total}, {}", resolved_by(last)),
        n => format!(
            "dead {n} times for {total} in all, last {}",
            resolved_by(last)
        ),
    })
}

/// A job's earlier failures, in its uploader's words: `failed once, then
/// retried by an administrator`. The failure it lies in now is not one
/// of them (the page says why it failed); `None` when there were none.
fn earlier_failures(periods: &[DeadPeriodDto]) -> Option<String> {
    let ended: Vec<&DeadPeriodDto> = periods.iter().filter(|p| p.resolved_at.is_some()).collect();
    let last = ended.last()?;
    // Retried, not re-enqueued: a member has no dead-letter list.
    let by = match (last.resolution.as_deref(), last.resolved_by.as_deref()) {
        (Some("requeued"), Some("admin")) => "retried by an administrator",
        _ => resolved_by(last),
    };
    Some(match ended.len() {
        1 => format!("failed once, then {by}"),
        n => format!("failed {n} times, last {by}"),
    })
}

/// Milliseconds the job spent waiting for a worker, processing or waiting
/// to retry, up to `end`, read from its timeline: time it lay failed (in
/// the dead-letter list, or discarded until someone retried it) does not
/// count. `None` when the timeline is cut short of its end.
fn active_ms(events: &[JobEventDto], end: DateTime<Utc>) -> Option<i64> {
    let last = events.last()?;
    if last.at < end - chrono::Duration::seconds(1) {
        return None;
    }
    let active = |state: &str| matches!(state, "pending" | "processing" | "retrying");
    let mut ms = 0;
    for pair in events.windows(2) {
        if active(&pair[0].state) {
            ms += (pair[1].at - pair[0].at).num_milliseconds().max(0);
        }
    }
    if active(&last.state) {
        ms += (end - last.at).num_milliseconds().max(0);
    }
    Some(ms)
}

/// The count and rate of the steps that count (`parse` in pages, `embed`
/// in chunks), and while one runs, about how long it has left at that
/// rate: `4544/13796 chunks, 38/s`, `120/300 pages, 0.5/s, about 6 min left`.
fn step_count(s: &StepDto, progress: &ProgressDto, now: DateTime<Utc>) -> Option<String> {
    let (done, total, unit) = match s.name.as_str() {
        "embed" => (progress.chunks_embedded, progress.chunks_total, "chunks"),
        "parse" => (progress.pages_parsed, progress.pages_total, "pages"),
        _ => return None,
    };
    if s.state == "pending" || total == 0 {
        return None;
    }
    let ms = match (s.state.as_str(), s.started_at, s.duration_ms) {
        ("running", Some(at), _) => (now - at).num_milliseconds(),
        (_, _, Some(ms)) => ms,
        _ => 0,
    };
    Some(if ms >= 1_000 && done > 0 {
        let rate = f64::from(done) * 1000.0 / ms as f64;
        let counted = if rate >= 10.0 {
            format!("{done}/{total} {unit}, {rate:.0}/s")
        } else {
            format!("{done}/{total} {unit}, {rate:.1}/s")
        };
        if s.state == "running" && done < total {
            let left = f64::from(total - done) / rate;
            format!("{counted}, {} left", crate::format::roughly(left))
        } else {
            counted
        }
    } else {
        format!("{done}/{total} {unit}")
    })
}

/// How long a job took: from enqueued to finished (or `now`), less its
/// time in the dead-letter list; when its timeline cannot tell.
fn working_ms(job: &JobDto, now: DateTime<Utc>) -> i64 {
    let end = job.finished_at.unwrap_or(now);
    ((end - job.enqueued_at).num_milliseconds() - dead_ms(&job.dead_periods, end)).max(0)
}

/// A step's duration cell: its duration once ended, the time it has run
/// so far while running.
fn step_time(s: &StepDto, now: DateTime<Utc>) -> String {
    match (s.state.as_str(), s.started_at, s.duration_ms) {
        ("running", Some(at), _) => format!(
            "{} so far",
            format::duration_ms((now - at).num_milliseconds())
        ),
        (_, _, Some(ms)) => format::duration_ms(ms),
        _ => "—".into(),
    }
}

/// The browser's clock, set to the server's: `offset` is server − browser.
#[cfg(feature = "hydrate")]
fn browser_now(offset: chrono::Duration) -> Option<DateTime<Utc>> {
    #[wasm_bindgen::prelude::wasm_bindgen]
    extern "C" {
        #[wasm_bindgen(js_namespace = Date, js_name = now)]
        fn date_now() -> f64;
    }
    DateTime::from_timestamp_millis(date_now() as i64).map(|t| t + offset)
}

/// The time now, ticking each second in the browser while `ticking`.
fn clock(server_now: DateTime<Utc>, ticking: bool) -> ReadSignal<DateTime<Utc>> {
    let (now, set_now) = signal(server_now);
    #[cfg(feature = "hydrate")]
    if ticking {
        let offset = browser_now(chrono::Duration::zero())
            .map_or(chrono::Duration::zero(), |b| server_now - b);
        let tick = move || {
            if let Some(t) = browser_now(offset) {
                set_now.set(t);
            }
        };
        if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_secs(1)) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (ticking, set_now);
    now
}

#[component]
fn JobView(
    detail: JobDetail,
    act: JobAct,
    busy: Memo<bool>,
    confirming: RwSignal<Option<Ask>>,
) -> impl IntoView {
    let JobDetail {
        job,
        events,
        now,
        for_operator,
        can_act,
    } = detail;
    let running = job.steps.iter().any(|s| s.state == "running");
    let now = clock(now, running);
    let actions = job.clone();
    // Queues, attempts and the dead-letter list are operators' words: a
    // member reads about their document.
    let operator = for_operator.then(|| {
        [
            ("Tenant", job.tenant.clone()),
            ("Queue", job.queue.clone()),
            ("Attempts", job.attempt.to_string()),
        ]
    });
    let mut facts = vec![
        ("State", job.state.clone()),
        ("Progress", progress_text(&job)),
    ];
    facts.extend(operator.into_iter().flatten());
    facts.extend([
        ("Uploaded", {
            let at = format::date_time(job.uploaded_at);
            match &job.uploaded_by {
                Some(by) => format!("{at} by {by}"),
                None => at,
            }
        }),
        (
            "Started",
            job.started_at
                .map(format::date_time)
                .unwrap_or_else(|| "—".into()),
        ),
        (
            "Finished",
            job.finished_at
                .map(format::date_time)
                .unwrap_or_else(|| "—".into()),
        ),
    ]);
    if for_operator {
        facts.insert(
            facts.len() - 2,
            ("Enqueued", format::date_time(job.enqueued_at)),
        );
    }
    let total = job.finished_at.map(|end| {
        format::duration_ms(active_ms(&events, end).unwrap_or_else(|| working_ms(&job, end)))
    });
    let history = if for_operator {
        dead_text(&job.dead_periods, now.get_untracked()).map(|d| ("Dead-lettered", d))
    } else {
        earlier_failures(&job.dead_periods).map(|d| ("Earlier failures", d))
    };
    let failure = (job.state == "failed" || job.state == "retrying")
        .then(|| Some((format::job_failure(&job)?, job.last_error.clone()?)))
        .flatten();
    let retrying_at = (job.state == "retrying")
        .then_some(job.next_attempt_at)
        .flatten();
    let steps = job.steps.clone();
    let chunks = job.progress;
    let state = job.state.clone();
    let filename = job.filename.clone();
    let job_signal = Signal::stored(job);
    view! {
        <Title text=filename.clone() />
        <nav class="crumbs" aria-label="Breadcrumb">
            // Opened from the admin job list (`?from=admin`): the way back is there.
            {if leptos_router::hooks::use_query_map().with_untracked(|q| q.get("from")).as_deref() == Some("admin") {
                view! {
                    <a href="/admin">"Admin"</a>
                    <span aria-hidden="true">" / "</span>
                    <a href="/admin/jobs">"All jobs"</a>
                }
                    .into_any()
            } else {
                view! { <a href="/">"Documents"</a> }.into_any()
            }}
            <span aria-hidden="true">" / "</span>
            <span aria-current="page">{filename.clone()}</span>
        </nav>
        <div class="page-head row">
            <h1>{filename}</h1>
            <span class=format!("badge big {state}")>{state.clone()}</span>
        </div>
        {can_act.then(|| view! { <JobActions job=actions act busy confirming /> })}
        <section class="card">
            <StepBar job=job_signal />
            <dl class="facts">
                {facts
                    .into_iter()
                    .map(|(k, v)| view! { <div><dt>{k}</dt><dd>{v}</dd></div> })
                    .collect_view()}
                {total
                    .map(|t| {
                        view! {
                            <div>
                                <dt>"Total time"</dt>
                                <dd title="Processing and waiting for a worker; time spent failed, before a retry, not counted">
                                    {t}
                                </dd>
                            </div>
                        }
                    })}
                {history.map(|(k, v)| view! { <div class="wide"><dt>{k}</dt><dd>{v}</dd></div> })}
            </dl>
        </section>
        {failure
            .map(|(text, raw)| {
                let bad = state == "failed";
                view! {
                    <section class=if bad { "callout bad" } else { "callout warn" }>
                        <h2>{if bad { "Why it failed" } else { "Why it is retrying" }}</h2>
                        <p>{text}</p>
                        {retrying_at
                            .map(|t| {
                                view! {
                                    <p>
                                        "Next attempt at "
                                        <time datetime=t.to_rfc3339()>{format::date_time(t)}</time>
                                        "."
                                    </p>
                                }
                            })}
                        <details>
                            <summary>"Technical detail"</summary>
                            <pre>{raw.clone()}</pre>
                        </details>
                    </section>
                }
            })}
        <h2>"Steps"</h2>
        <div class="table-wrap">
            <table class="table">
                <thead>
                    <tr>
                        <th scope="col">"Step"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Attempts"</th>
                        <th scope="col">"Duration"</th>
                        <th scope="col">"Error"</th>
                    </tr>
                </thead>
                <tbody>
                    {steps
                        .into_iter()
                        .map(|s| {
                            let running = s.state == "running";
                            let state = if running {
                                view! {
                                    <span class="badge running in-progress">
                                        <span class="spinner" aria-hidden="true"></span>
                                        "running"
                                    </span>
                                }
                                    .into_any()
                            } else {
                                view! { <span class=format!("badge {}", s.state)>{s.state.clone()}</span> }
                                    .into_any()
                            };
                            let time = {
                                let s = s.clone();
                                move || {
                                    let now = now.get();
                                    match step_count(&s, &chunks, now) {
                                        Some(count) => format!("{} · {count}", step_time(&s, now)),
                                        None => step_time(&s, now),
                                    }
                                }
                            };
                            view! {
                                <tr class:running=running>
                                    <th scope="row">{s.name.clone()}</th>
                                    <td>{state}</td>
                                    <td>{s.attempts}</td>
                                    <td class="step-time">{time}</td>
                                    <td class="error-cell">{s.error.clone().unwrap_or_default()}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
        <h2>"Timeline"</h2>
        <Timeline events for_operator />
    }
}

#[component]
fn Timeline(events: Vec<JobEventDto>, for_operator: bool) -> impl IntoView {
    if events.is_empty() {
        return view! { <p class="empty">"No events yet."</p> }.into_any();
    }
    let first = events.first().map(|e| e.at);
    let mut prev = first;
    let rows = events
        .into_iter()
        .map(|e| {
            let since = prev.map(|p| format::duration_ms((e.at - p).num_milliseconds()));
            let from_start = first.map(|f| format::duration_ms((e.at - f).num_milliseconds()));
            prev = Some(e.at);
            let progress = e.progress.map(|p| format!("{}/{}", p.done, p.total));
            view! {
                <li class=format!("event {}", e.state)>
                    <span class="event-dot" aria-hidden="true"></span>
                    <div class="event-body">
                        <div class="event-head">
                            <time datetime=e.at.to_rfc3339() title=format::date_time(e.at)>
                                {format::time(e.at)}
                            </time>
                            <span class=format!("badge {}", e.state)>{e.state.clone()}</span>
                            {e.step.clone().map(|s| view! { <span class="chip">{s}</span> })}
                            {progress.map(|p| view! { <span class="chip">{p}</span> })}
                        </div>
                        <p class="event-message">
                            {if for_operator { e.message.clone() } else { format::member_words(&e.message) }}
                        </p>
                        <p class="muted small">
                            {format!(
                                "+{} since previous · {} since first event",
                                since.unwrap_or_default(),
                                from_start.unwrap_or_default(),
                            )}
                        </p>
                    </div>
                </li>
            }
        })
        .collect_view();
    view! { <ol class="timeline" aria-label="Timeline">{rows}</ol> }.into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + chrono::Duration::minutes(min)
    }

    fn period(from: i64, to: Option<i64>, how: &str, by: &str) -> DeadPeriodDto {
        DeadPeriodDto {
            reason: "exhausted".into(),
            dead_at: at(from),
            resolved_at: to.map(at),
            resolution: to.map(|_| how.to_string()),
            resolved_by: to.map(|_| by.to_string()),
        }
    }

    #[test]
    fn time_in_the_dead_letter_list_is_told_apart_from_working_time() {
        let periods = vec![period(5, Some(17), "requeued", "admin")];
        assert_eq!(
            dead_text(&periods, at(30)).as_deref(),
            Some("dead for 12 min 00 s, re-enqueued by an administrator")
        );
        let steps = crate::format::STEPS
            .iter()
            .map(|s| StepDto {
                name: (*s).into(),
                state: "done".into(),
                attempts: 1,
                duration_ms: Some(10),
                error: None,
                started_at: None,
            })
            .collect();
        let job = JobDto {
            id: "j".into(),
            document_id: "d".into(),
            filename: "ledger.txt".into(),
            tenant: "acme".into(),
            queue: "high".into(),
            state: "done".into(),
            attempt: 5,
            current_step: None,
            steps,
            progress: Default::default(),
            last_error: None,
            last_error_code: None,
            next_attempt_at: None,
            document_deleted: false,
            enqueued_at: at(0),
            started_at: Some(at(1)),
            finished_at: Some(at(20)),
            uploaded_at: at(0),
            uploaded_by: None,
            dead_periods: periods,
        };
        // 20 min from enqueued to done, 12 of them dead-lettered.
        assert_eq!(working_ms(&job, at(30)), 8 * 60_000);
    }

    #[test]
    fn several_dead_periods_add_up_and_an_open_one_counts_until_now() {
        let periods = vec![
            period(0, Some(2), "requeued", "admin"),
            period(10, Some(13), "requeued", "member"),
        ];
        assert_eq!(
            dead_text(&periods, at(30)).as_deref(),
            Some("dead 2 times for 5 min 00 s in all, last retried by its uploader")
        );
        let open = vec![
            period(0, Some(2), "requeued", "admin"),
            period(20, None, "", ""),
        ];
        assert_eq!(
            dead_text(&open, at(23)).as_deref(),
            Some("in the dead-letter list for 3 min 00 s; dead for 2 min 00 s before")
        );
        // A discard after the job finished does not count past its end.
        let discarded = vec![period(10, Some(50), "discarded", "admin")];
        assert_eq!(dead_ms(&discarded, at(10)), 0);
        assert_eq!(dead_text(&[], at(0)), None);
    }

    #[test]
    fn a_running_step_counts_its_time_so_far() {
        let s = StepDto {
            name: "embed".into(),
            state: "running".into(),
            attempts: 1,
            duration_ms: None,
            error: None,
            started_at: Some(at(0)),
        };
        assert_eq!(step_time(&s, at(2)), "2 min 00 s so far");
        let done = StepDto {
            state: "done".into(),
            duration_ms: Some(1_500),
            ..s
        };
        assert_eq!(step_time(&done, at(2)), "1.5 s");
    }

    fn event(min: i64, state: &str) -> JobEventDto {
        JobEventDto {
            id: min,
            state: state.into(),
            step: None,
            progress: None,
            message: String::new(),
            at: at(min),
        }
    }

    #[test]
    fn time_spent_failed_before_a_retry_is_not_working_time() {
        // Queued at 0, failed at 1, discarded at 5, retried by its uploader
        // at 9, done at 10: 2 minutes of work, not 10.
        let events = [
            event(0, "pending"),
            event(0, "processing"),
            event(1, "failed"),
            event(9, "pending"),
            event(9, "processing"),
            event(10, "done"),
        ];
        assert_eq!(active_ms(&events, at(10)), Some(2 * 60_000));
        // A timeline that stops short of the end cannot tell.
        assert_eq!(active_ms(&events[..3], at(10)), None);
        assert_eq!(active_ms(&[], at(10)), None);
    }

    #[test]
    fn a_member_reads_the_timeline_without_queue_names() {
        use format::{handed_over, member_words, queued_on, REQUEUED_BY_ADMIN};
        assert_eq!(
            member_words(&queued_on("high")),
            "received, waiting for a worker"
        );
        assert_eq!(
            member_words(&handed_over("312 pages", "slow")),
            "312 pages; it goes on with the long documents"
        );
        assert_eq!(
            member_words(REQUEUED_BY_ADMIN),
            "retried by an administrator"
        );
        assert_eq!(member_words("embed 64/300"), "embed 64/300");
    }

    #[test]
    fn a_member_reads_earlier_failures_without_the_dead_letter_list() {
        let once = [period(1, Some(5), "requeued", "admin")];
        assert_eq!(
            earlier_failures(&once).as_deref(),
            Some("failed once, then retried by an administrator")
        );
        let twice = [
            period(1, Some(5), "requeued", "admin"),
            period(6, Some(8), "requeued", "member"),
        ];
        assert_eq!(
            earlier_failures(&twice).as_deref(),
            Some("failed 2 times, last retried by its uploader")
        );
        // Lying failed now: the page says why; only earlier ones are told.
        assert_eq!(earlier_failures(&[period(1, None, "", "")]), None);
        let again = [
            period(1, Some(5), "requeued", "admin"),
            period(6, None, "", ""),
        ];
        assert_eq!(
            earlier_failures(&again).as_deref(),
            Some("failed once, then retried by an administrator")
        );
        assert_eq!(earlier_failures(&[]), None);
    }

    #[test]
    fn the_embed_step_shows_its_count_and_rate() {
        let chunks = ProgressDto {
            chunks_total: 500,
            chunks_embedded: 240,
            ..ProgressDto::default()
        };
        let embed = StepDto {
            name: "embed".into(),
            state: "running".into(),
            attempts: 1,
            duration_ms: None,
            error: None,
            started_at: Some(at(0)),
        };
        assert_eq!(
            step_count(&embed, &chunks, at(2)).as_deref(),
            Some("240/500 chunks, 2.0/s, about 2 min left")
        );
        let done = StepDto {
            state: "done".into(),
            duration_ms: Some(10_000),
            ..embed.clone()
        };
        let all = ProgressDto {
            chunks_embedded: 500,
            ..chunks
        };
        assert_eq!(
            step_count(&done, &all, at(2)).as_deref(),
            Some("500/500 chunks, 50/s")
        );
        let parse = StepDto {
            name: "parse".into(),
            ..done
        };
        assert_eq!(step_count(&parse, &all, at(2)), None);
        let pages = ProgressDto {
            pages_parsed: 120,
            pages_total: 300,
            ..all
        };
        let parsing = StepDto {
            state: "running".into(),
            duration_ms: None,
            ..parse
        };
        assert_eq!(
            step_count(&parsing, &pages, at(4)).as_deref(),
            Some("120/300 pages, 0.5/s, about 6 min left")
        );
    }
}
