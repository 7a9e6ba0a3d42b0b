//! `/jobs/:id`: one job's timeline (every event with its time and the time
//! since the previous one), its steps with attempts, durations and errors,
//! and why it failed. Refreshes when the live stream reports on the job.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::{
    api::jobs::job_with_events,
    components::progress::{progress_text, StepBar},
    dto::{JobDetail, JobEventDto},
    error::AppError,
    format,
    live::{use_live, LiveStatus},
};

#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let live = use_live();
    // Changes whenever the stream reports on this job.
    let version = Memo::new(move |_| live.jobs.with(|m| m.get(&id()).map_or(0, |(s, _)| *s)));
    let poll = RwSignal::new(0u32);
    let detail = Resource::new(
        move || (id(), version.get(), poll.get()),
        |(id, _, _)| job_with_events(id),
    );

    // Polling fallback while the event stream is down (and for other
    // tenants' jobs, whose events an admin's stream does not carry).
    #[cfg(feature = "hydrate")]
    {
        let tick = move || {
            let unfinished = detail
                .get_untracked()
                .and_then(Result::ok)
                .is_some_and(|d| d.job.state != "done" && d.job.state != "failed");
            if unfinished && live.status.get_untracked() != LiveStatus::Live {
                poll.update(|n| *n += 1);
            }
        };
        if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_secs(2)) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (LiveStatus::Live, poll);

    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading job…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => view! { <JobView detail=d /> }.into_any(),
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

#[component]
fn JobView(detail: JobDetail) -> impl IntoView {
    let JobDetail { job, events } = detail;
    let facts = vec![
        ("State", job.state.clone()),
        ("Progress", progress_text(&job)),
        ("Tenant", job.tenant.clone()),
        ("Queue", job.queue.clone()),
        ("Attempt", job.attempt.to_string()),
        ("Enqueued", format::date_time(job.enqueued_at)),
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
    ];
    let total = job
        .finished_at
        .map(|f| format::duration_ms((f - job.enqueued_at).num_milliseconds()));
    let failure = (job.state == "failed" || job.state == "retrying")
        .then(|| job.last_error.clone())
        .flatten();
    let retrying_at = (job.state == "retrying")
        .then_some(job.next_attempt_at)
        .flatten();
    let steps = job.steps.clone();
    let state = job.state.clone();
    let filename = job.filename.clone();
    let job_signal = Signal::stored(job);
    view! {
        <Title text=filename.clone() />
        <nav class="crumbs" aria-label="Breadcrumb">
            <a href="/">"Documents"</a>
            <span aria-hidden="true">" / "</span>
            <span aria-current="page">{filename.clone()}</span>
        </nav>
        <div class="page-head row">
            <h1>{filename}</h1>
            <span class=format!("badge big {state}")>{state.clone()}</span>
        </div>
        <section class="card">
            <StepBar job=job_signal />
            <dl class="facts">
                {facts
                    .into_iter()
                    .map(|(k, v)| view! { <div><dt>{k}</dt><dd>{v}</dd></div> })
                    .collect_view()}
                {total.map(|t| view! { <div><dt>"Total time"</dt><dd>{t}</dd></div> })}
            </dl>
        </section>
        {failure
            .map(|raw| {
                let bad = state == "failed";
                view! {
                    <section class=if bad { "callout bad" } else { "callout warn" }>
                        <h2>{if bad { "Why it failed" } else { "Why it is retrying" }}</h2>
                        <p>{format::friendly_error(&raw)}</p>
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
                            view! {
                                <tr>
                                    <th scope="row">{s.name.clone()}</th>
                                    <td><span class=format!("badge {}", s.state)>{s.state.clone()}</span></td>
                                    <td>{s.attempts}</td>
                                    <td>{s.duration_ms.map(format::duration_ms).unwrap_or_else(|| "—".into())}</td>
                                    <td class="error-cell">{s.error.clone().unwrap_or_default()}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
        <h2>"Timeline"</h2>
        <Timeline events />
    }
}

#[component]
fn Timeline(events: Vec<JobEventDto>) -> impl IntoView {
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
                        <p class="event-message">{e.message.clone()}</p>
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
