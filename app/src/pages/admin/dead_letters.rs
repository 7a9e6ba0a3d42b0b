//! `/admin/dead-letters`: unresolved dead letters with reason, error,
//! attempts, tenant, queue and age; one-click re-enqueue, select-many and
//! bulk re-enqueue, discard after confirmation. Rows leave the list as
//! soon as the server confirms, and a toast says what happened.

use std::collections::HashSet;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::{
    api::admin::{dead_letters, discard, requeue},
    components::{
        layout::AdminGate,
        toast::{use_toasts, ToastKind},
    },
    dto::{DeadLetterDto, DeadLetterPage, RequeueReport},
    format,
};

type PageResource = Resource<Result<DeadLetterPage, crate::error::AppError>>;

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let query = use_query_map();
    let before = move || query.with(|m| m.get("before").filter(|s| !s.is_empty()));
    let page: PageResource = Resource::new(before, dead_letters);
    view! {
        <Title text="Dead letters" />
        <AdminGate>
            <DeadLetters page />
        </AdminGate>
    }
}

#[component]
fn DeadLetters(page: PageResource) -> impl IntoView {
    view! {
        <div class="page-head">
            <h1>"Dead letters"</h1>
            <p class="muted">
                "Jobs that failed for good. Re-enqueue them once the cause is fixed, or discard them."
            </p>
        </div>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => view! { <DeadLetterTable page=p /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

fn name_of(d: &DeadLetterDto) -> String {
    d.filename
        .clone()
        .unwrap_or_else(|| format!("message {}", d.id.chars().take(8).collect::<String>()))
}

fn report_text(r: &RequeueReport, names: &dyn Fn(&str) -> String) -> (String, ToastKind) {
    let ok = match r.requeued.as_slice() {
        [] => String::new(),
        [one] => format!("Re-enqueued {}; its job is pending again.", names(one)),
        many => format!(
            "Re-enqueued {} dead letters; their jobs are pending again.",
            many.len()
        ),
    };
    let bad = r
        .failed
        .iter()
        .map(|f| format!("{}: {}", names(&f.id), f.message))
        .collect::<Vec<_>>()
        .join("; ");
    match (ok.is_empty(), bad.is_empty()) {
        (false, true) => (ok, ToastKind::Ok),
        (true, _) => (format!("Nothing re-enqueued. {bad}"), ToastKind::Bad),
        (false, false) => (format!("{ok} Not re-enqueued: {bad}"), ToastKind::Bad),
    }
}

#[component]
fn DeadLetterTable(page: DeadLetterPage) -> impl IntoView {
    let toasts = use_toasts();
    let now = page.now;
    let next_before = page.next_before.clone();
    let rows: RwSignal<Vec<DeadLetterDto>> = RwSignal::new(page.items);
    let selected: RwSignal<HashSet<String>> = RwSignal::new(HashSet::new());
    let confirming: RwSignal<Option<String>> = RwSignal::new(None);
    let busy: RwSignal<HashSet<String>> = RwSignal::new(HashSet::new());

    let name = move |id: &str| {
        rows.with_untracked(|v| {
            v.iter()
                .find(|d| d.id == id)
                .map(name_of)
                .unwrap_or_else(|| "a dead letter".into())
        })
    };
    let requeue_action = Action::new(move |ids: &Vec<String>| {
        let ids = ids.clone();
        busy.update(|b| b.extend(ids.iter().cloned()));
        async move { (ids.clone(), requeue(ids).await) }
    });
    Effect::new(move |_| {
        let Some((ids, result)) = requeue_action.value().get() else {
            return;
        };
        busy.update(|b| {
            for id in &ids {
                b.remove(id);
            }
        });
        match result {
            Ok(report) => {
                let (text, kind) = report_text(&report, &name);
                let gone: HashSet<String> = report.requeued.iter().cloned().collect();
                rows.update(|v| v.retain(|d| !gone.contains(&d.id)));
                selected.update(|s| s.retain(|id| !gone.contains(id)));
                toasts.show(text, kind);
            }
            Err(e) => toasts.show(format!("Re-enqueue failed: {e}"), ToastKind::Bad),
        }
    });
    let discard_action = Action::new(move |id: &String| {
        let id = id.clone();
        busy.update(|b| {
            b.insert(id.clone());
        });
        async move { (id.clone(), discard(id).await) }
    });
    Effect::new(move |_| {
        let Some((id, result)) = discard_action.value().get() else {
            return;
        };
        busy.update(|b| {
            b.remove(&id);
        });
        confirming.set(None);
        match result {
            Ok(()) => {
                let n = name(&id);
                rows.update(|v| v.retain(|d| d.id != id));
                selected.update(|s| {
                    s.remove(&id);
                });
                toasts.show(
                    format!("Discarded {n}; its job stays failed."),
                    ToastKind::Ok,
                );
            }
            Err(e) => toasts.show(format!("Discard failed: {e}"), ToastKind::Bad),
        }
    });

    let all_selected = move || {
        rows.with(|v| !v.is_empty() && v.iter().all(|d| selected.with(|s| s.contains(&d.id))))
    };
    let toggle_all = move |_| {
        if all_selected() {
            selected.set(HashSet::new());
        } else {
            selected.set(rows.with(|v| v.iter().map(|d| d.id.clone()).collect()));
        }
    };
    let count = move || selected.with(HashSet::len);

    view! {
        <div class="toolbar">
            <span class="muted">
                {move || match rows.with(Vec::len) {
                    0 => "No unresolved dead letters.".to_string(),
                    1 => "1 unresolved dead letter".to_string(),
                    n => format!("{n} unresolved dead letters"),
                }}
            </span>
            <button
                class="btn primary"
                disabled=move || count() == 0 || requeue_action.pending().get()
                on:click=move |_| {
                    let ids: Vec<String> = selected.with(|s| s.iter().cloned().collect());
                    if !ids.is_empty() {
                        requeue_action.dispatch(ids);
                    }
                }
            >
                {move || format!("Re-enqueue selected ({})", count())}
            </button>
        </div>
        <Show
            when=move || rows.with(|v| !v.is_empty())
            fallback=|| view! { <p class="empty">"Nothing is dead-lettered. 🎉"</p> }
        >
            <div class="table-wrap">
                <table class="table dead-letters">
                    <thead>
                        <tr>
                            <th scope="col" class="check">
                                <input
                                    type="checkbox"
                                    aria-label="Select all"
                                    prop:checked=all_selected
                                    on:change=toggle_all
                                />
                            </th>
                            <th scope="col">"File"</th>
                            <th scope="col">"Reason"</th>
                            <th scope="col">"Attempts"</th>
                            <th scope="col">"Tenant"</th>
                            <th scope="col">"Queue"</th>
                            <th scope="col">"Age"</th>
                            <th scope="col">"Actions"</th>
                        </tr>
                    </thead>
                    <tbody>
                        <For each=move || rows.get() key=|d| d.id.clone() let:d>
                            {
                                let id = d.id.clone();
                                let n = name_of(&d);
                                let age = format::age_s(format::seconds_between(d.dead_at, now));
                                let (id1, id2, id3, id4, id5, id6) = (
                                    id.clone(),
                                    id.clone(),
                                    id.clone(),
                                    id.clone(),
                                    id.clone(),
                                    id.clone(),
                                );
                                let is_busy = move || busy.with(|b| b.contains(&id1));
                                let is_confirming = move || confirming.with(|c| c.as_deref() == Some(id2.as_str()));
                                view! {
                                    <tr>
                                        <td class="check">
                                            <input
                                                type="checkbox"
                                                aria-label=format!("Select {n}")
                                                prop:checked=move || selected.with(|s| s.contains(&id3))
                                                on:change=move |_| {
                                                    selected.update(|s| {
                                                        if !s.remove(&id4) {
                                                            s.insert(id4.clone());
                                                        }
                                                    })
                                                }
                                            />
                                        </td>
                                        <th scope="row">
                                            {match &d.job_id {
                                                Some(j) => view! { <a href=format!("/jobs/{j}")>{n.clone()}</a> }.into_any(),
                                                None => view! { <span>{n.clone()}</span> }.into_any(),
                                            }}
                                        </th>
                                        <td>
                                            <span class="badge failed">{d.reason.clone()}</span>
                                            <details class="error-details">
                                                <summary>"Error"</summary>
                                                <pre>{d.error.clone()}</pre>
                                            </details>
                                        </td>
                                        <td>{d.attempts}</td>
                                        <td>{d.tenant.clone().unwrap_or_else(|| "—".into())}</td>
                                        <td class="mono">{d.queue.clone()}</td>
                                        <td>
                                            <time datetime=d.dead_at.to_rfc3339() title=format::date_time(d.dead_at)>
                                                {age}
                                            </time>
                                        </td>
                                        <td class="actions">
                                            <Show
                                                when=is_confirming
                                                fallback={
                                                    let n = n.clone();
                                                    let id5 = id5.clone();
                                                    let id6 = id6.clone();
                                                    move || {
                                                        let (a, b) = (id5.clone(), id6.clone());
                                                        view! {
                                                            <button
                                                                class="btn small"
                                                                aria-label=format!("Re-enqueue {n}")
                                                                disabled=is_busy.clone()
                                                                on:click=move |_| {
                                                                    requeue_action.dispatch(vec![a.clone()]);
                                                                }
                                                            >
                                                                "Re-enqueue"
                                                            </button>
                                                            <button
                                                                class="btn small danger"
                                                                aria-label=format!("Discard {n}")
                                                                disabled=is_busy.clone()
                                                                on:click=move |_| confirming.set(Some(b.clone()))
                                                            >
                                                                "Discard"
                                                            </button>
                                                        }
                                                    }
                                                }
                                            >
                                                {
                                                    let id = id.clone();
                                                    let n = n.clone();
                                                    view! {
                                                        <div class="confirm" role="group" aria-label=format!("Confirm discarding {n}")>
                                                            <span class="small">"Discard for good?"</span>
                                                            <button
                                                                class="btn small danger solid"
                                                                on:click={
                                                                    let id = id.clone();
                                                                    move |_| {
                                                                        discard_action.dispatch(id.clone());
                                                                    }
                                                                }
                                                            >
                                                                "Confirm discard"
                                                            </button>
                                                            <button class="btn small ghost" on:click=move |_| confirming.set(None)>
                                                                "Cancel"
                                                            </button>
                                                        </div>
                                                    }
                                                }
                                            </Show>
                                        </td>
                                    </tr>
                                }
                            }
                        </For>
                    </tbody>
                </table>
            </div>
        </Show>
        {next_before
            .map(|b| {
                view! {
                    <p class="pager">
                        <a class="btn" href=format!("/admin/dead-letters?before={b}")>"Older →"</a>
                    </p>
                }
            })}
    }
}
