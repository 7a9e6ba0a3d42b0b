//! `/batches/:id`: a batch's state, how many of its jobs ended and how,
//! an estimate of the time left, and its jobs, live: the page refreshes
//! when the event stream reports a state change of a job, and looks every
//! 2 s while the batch runs. Cancel and retry act on the whole batch.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

use crate::{
    api::batches::{act_on_batch, batch},
    components::toast::{use_toasts, ToastKind},
    dto::{BatchView, JobDto},
    error::AppError,
    format,
    live::{poll_while, use_live},
};

#[component]
pub fn BatchPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").unwrap_or_default());
    let live = use_live();
    // Every job's latest state the stream reported: changes on a state
    // change, not on an embedding batch's progress.
    let states = Memo::new(move |_| {
        live.jobs.with(|m| {
            let mut s: Vec<(String, String)> = m
                .iter()
                .map(|(id, (_, e))| (id.clone(), e.state.clone()))
                .collect();
            s.sort();
            s
        })
    });
    let poll = RwSignal::new(0u32);
    let toasts = use_toasts();
    let act = Action::new(move |(id, what): &(String, &'static str)| {
        let (id, what) = (id.clone(), *what);
        async move { (what, act_on_batch(id, what.to_string()).await) }
    });
    Effect::new(move |_| {
        let Some((what, result)) = act.value().get() else {
            return;
        };
        match result {
            Ok(_) if what == "cancel" => toasts.show("Batch cancelled", ToastKind::Ok),
            Ok(_) => toasts.show("Failed documents retried", ToastKind::Ok),
            Err(e) => toasts.show(format!("Could not {what}: {e}"), ToastKind::Bad),
        }
        poll.update(|n| *n += 1);
    });
    let view_of = Resource::new(
        move || (id(), states.get(), poll.get()),
        |(id, _, _)| batch(id),
    );

    // A batch's own state changes after its last job's (once that has
    // committed), and the stream carries jobs, not batches: while it runs,
    // the page also looks every 2 s.
    poll_while(poll, move || {
        view_of
            .get_untracked()
            .and_then(Result::ok)
            .is_some_and(|v| !matches!(v.batch.state.as_str(), "done" | "cancelled"))
    });

    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading batch…"</p> }>
            {move || Suspend::new(async move {
                match view_of.await {
                    Ok(v) => view! { <BatchView v act /> }.into_any(),
                    Err(AppError::NotFound) => {
                        view! {
                            <Title text="Batch not found" />
                            <section class="empty-state">
                                <h1>"Batch not found"</h1>
                                <p class="muted">"It does not exist or belongs to another organisation."</p>
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

/// The words for a batch's state.
fn state_words(state: &str) -> &'static str {
    match state {
        "open" => "Open: waiting for files",
        "running" => "Running",
        "done" => "Done",
        "cancelled" => "Cancelled",
        _ => "Unknown",
    }
}

/// `cancel` or `retry` of a batch (its id), and its outcome.
type BatchAct = Action<(String, &'static str), (&'static str, Result<BatchView, AppError>)>;

#[component]
fn BatchView(v: BatchView, act: BatchAct) -> impl IntoView {
    let b = v.batch;
    let c = b.counts.clone();
    let ended = c.ended();
    let unfinished = c.pending + c.processing + c.retrying;
    let percent = if b.total > 0 {
        ended * 100 / b.total
    } else {
        0
    };
    let eta = b
        .eta_seconds
        .map(|s| format!("about {} left", format::duration_ms(s.saturating_mul(1000))));
    let id = b.id.clone();
    let busy = act.pending();
    let counts = [
        ("done", c.done),
        ("failed", c.failed),
        ("processing", c.processing),
        ("retrying", c.retrying),
        ("pending", c.pending),
        ("cancelled", c.cancelled),
    ];
    let retry = (v.can_act && c.failed + c.retrying > 0).then(|| {
        let id = id.clone();
        view! {
            <button class="btn" disabled=move || busy.get() on:click=move |_| {
                act.dispatch((id.clone(), "retry"));
            }>{format!("Retry {} failed", c.failed + c.retrying)}</button>
        }
    });
    let cancel = (v.can_act && (unfinished > 0 || b.state == "open")).then(|| {
        let id = id.clone();
        view! {
            <button class="btn danger" disabled=move || busy.get() on:click=move |_| {
                act.dispatch((id.clone(), "cancel"));
            }>"Cancel batch"</button>
        }
    });
    view! {
        <Title text=format!("{} · batch", b.name) />
        <nav class="crumbs" aria-label="Breadcrumb"><a href="/">"Documents"</a>" / batch"</nav>
        <section class="page-head">
            <h1>{b.name.clone()}</h1>
            <span class=format!("badge big {}", b.state) data-testid="batch-state">
                {state_words(&b.state)}
            </span>
        </section>
        <p class="progress-text" data-testid="batch-progress">
            {format!("{ended} of {} documents ended ({percent} %)", b.total)}
            {eta.map(|e| format!(" · {e}"))}
        </p>
        <div
            class="bar"
            role="progressbar"
            aria-label="Documents ended"
            aria-valuemin="0"
            aria-valuemax="100"
            aria-valuenow=percent.to_string()
        >
            <div class="bar-fill" style=format!("width: {percent}%")></div>
        </div>
        <ul class="facts" aria-label="Documents by state">
            {counts
                .into_iter()
                .map(|(state, n)| {
                    view! {
                        <li data-testid=format!("count-{state}")>
                            <span class=format!("badge {state}")>{state}</span>
                            " "
                            <strong>{n}</strong>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
        <div class="actions">{retry}{cancel}</div>
        <JobTable jobs=v.jobs />
    }
}

#[component]
fn JobTable(jobs: Vec<JobDto>) -> impl IntoView {
    if jobs.is_empty() {
        return view! { <p class="muted">"No documents in this batch yet."</p> }.into_any();
    }
    view! {
        <div class="table-wrap">
            <table class="table">
                <thead>
                    <tr>
                        <th scope="col">"File"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Step"</th>
                        <th scope="col">"Error"</th>
                    </tr>
                </thead>
                <tbody>
                    {jobs
                        .into_iter()
                        .map(|j| {
                            view! {
                                <tr>
                                    <th scope="row">
                                        <a href=format!("/jobs/{}", j.id)>{j.filename}</a>
                                    </th>
                                    <td><span class=format!("badge {}", j.state)>{j.state.clone()}</span></td>
                                    <td>{j.current_step.unwrap_or_default()}</td>
                                    <td class="error-cell">{j.last_error.unwrap_or_default()}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
        .into_any()
}
