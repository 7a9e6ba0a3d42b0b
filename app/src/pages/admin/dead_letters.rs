//! `/admin/dead-letters`: unresolved dead letters, filtered by reason,
//! queue and tenant (kept in the URL). Each row shows its error inline (the
//! first line, expandable to the whole), its reason as a badge, its queue
//! as the dashboard names it and its attempts as the job page counts them.
//! One-click re-enqueue, except for a `permanent` failure, which asks first
//! (it will fail again unless its cause changed); select-many with bulk
//! re-enqueue and bulk discard, which ask the same questions as one row.
//! The list follows the server: a job event from the live feed (a job that
//! failed again, one that another admin re-enqueued) refreshes it at once,
//! and it polls meanwhile for other tenants' jobs, whose events the feed
//! does not carry. Rows that come back after a failed re-enqueue appear
//! without a reload, with a toast. At phone width each row is a card.

use std::collections::HashSet;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::{
    api::admin::{dead_letters, discard, requeue, requeue_matching},
    components::{
        layout::AdminGate,
        toast::{use_toasts, ToastKind},
    },
    dto::{DeadLetterDto, DeadLetterPage, DeadLetterQuery, RequeueReport},
    error::AppError,
    format,
};

type PageResource = Resource<Result<DeadLetterPage, AppError>>;

/// Reasons a message is dead-lettered, as the filter offers them (the
/// README lists the same). A worker's own dead-lettering is recorded with
/// its job's reason, never as RabbitMQ's `rejected`.
const REASONS: [&str; 5] = [
    "permanent",
    "exhausted",
    "crashed",
    "malformed",
    "delivery_limit",
];
const QUEUES: [&str; 3] = ["high", "normal", "slow"];
/// How often the list is read again while the page is open, for the
/// dead letters of tenants whose events the admin's live feed does not carry.
#[cfg(feature = "hydrate")]
const POLL: std::time::Duration = std::time::Duration::from_secs(4);
/// Characters of an error's first line shown in the row.
const FIRST_LINE_CHARS: usize = 140;

fn filters_from(m: &leptos_router::params::ParamsMap) -> DeadLetterQuery {
    DeadLetterQuery {
        reason: m.get("reason").unwrap_or_default(),
        queue: m.get("queue").unwrap_or_default(),
        tenant: m.get("tenant").unwrap_or_default(),
        before: m.get("before").unwrap_or_default(),
    }
}

/// `Some` unless blank.
fn given(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Reads a page of the list with `q`'s filters.
async fn load(q: DeadLetterQuery) -> Result<DeadLetterPage, AppError> {
    dead_letters(
        given(&q.before),
        given(&q.reason),
        given(&q.queue),
        given(&q.tenant),
    )
    .await
}

/// The list's address for `q`, without empty parameters.
fn list_url(q: &DeadLetterQuery) -> String {
    let parts: Vec<String> = [
        ("reason", &q.reason),
        ("queue", &q.queue),
        ("tenant", &q.tenant),
        ("before", &q.before),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| format!("{k}={}", format::encode_query(v.trim())))
    .collect();
    if parts.is_empty() {
        "/admin/dead-letters".into()
    } else {
        format!("/admin/dead-letters?{}", parts.join("&"))
    }
}

/// An error's first non-empty line, cut to `FIRST_LINE_CHARS`, and whether
/// the whole says more.
fn first_line(error: &str) -> (String, bool) {
    let mut lines = error.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    let short = format::truncated(first, FIRST_LINE_CHARS);
    let more = lines.next().is_some() || short != first;
    (short, more)
}

/// What a reason means, for the badge's title.
fn reason_meaning(reason: &str) -> &'static str {
    match reason {
        "permanent" => "Failed for good: retrying cannot help (a damaged or unsupported file, a refused request).",
        "exhausted" => "Failed on temporary errors until its retries ran out.",
        "crashed" => "The worker running it stopped too often while on it.",
        "malformed" => "Not a readable job message; there is no job to re-enqueue.",
        "delivery_limit" => "RabbitMQ gave up delivering it.",
        _ => "Dead-lettered by RabbitMQ.",
    }
}

/// The question a re-enqueue of `permanent` of `total` dead letters asks;
/// `None` when none failed permanently.
fn requeue_question(permanent: usize, total: usize, name: &str) -> Option<String> {
    match (permanent, total) {
        (0, _) => None,
        (1, 1) => Some(format!(
            "{name} failed permanently: it will fail again unless its cause changed (the file, a parser, a setting). Re-enqueue it anyway?"
        )),
        (p, t) if p == t => Some(format!(
            "These {t} dead letters failed permanently: they will fail again unless their cause changed (the file, a parser, a setting). Re-enqueue them anyway?"
        )),
        (1, t) => Some(format!(
            "1 of the {t} selected failed permanently: it will fail again unless its cause changed (the file, a parser, a setting). Re-enqueue all {t} anyway?"
        )),
        (p, t) => Some(format!(
            "{p} of the {t} selected failed permanently: they will fail again unless their cause changed (the file, a parser, a setting). Re-enqueue all {t} anyway?"
        )),
    }
}

/// The most "re-enqueue all that match" takes on at once (the server's
/// limit); the rest stay listed.
const REQUEUE_MATCHING_MAX: i64 = 5_000;

/// The question "re-enqueue all that match" asks: how many, on every page,
/// how many of them failed permanently, and what happens beyond the limit.
fn requeue_matching_question(total: i64, permanent: i64, filtered: bool) -> String {
    let which = match (total, filtered) {
        (1, true) => "the 1 dead letter that matches these filters".to_string(),
        (1, false) => "the 1 unresolved dead letter".to_string(),
        (n, true) => format!("all {n} dead letters that match these filters, on every page"),
        (n, false) => format!("all {n} unresolved dead letters, on every page"),
    };
    let mut q = format!("Re-enqueue {which}?");
    match permanent {
        0 => {}
        p if p == total && p == 1 => q.push_str(
            " It failed permanently: it will fail again unless its cause changed (the file, a parser, a setting).",
        ),
        p if p == total => q.push_str(&format!(
            " All {p} failed permanently: they will fail again unless their cause changed (the file, a parser, a setting)."
        )),
        p => q.push_str(&format!(
            " {p} of them failed permanently: they will fail again unless their cause changed (the file, a parser, a setting)."
        )),
    }
    if total > REQUEUE_MATCHING_MAX {
        q.push_str(&format!(
            " The oldest {REQUEUE_MATCHING_MAX} go now; the rest stay listed."
        ));
    }
    q
}

/// `Discard for good?` for one, `Discard 3 dead letters for good?` for many.
fn discard_question(n: usize) -> String {
    match n {
        1 => "Discard for good? Its job stays failed.".into(),
        n => format!("Discard {n} dead letters for good? Their jobs stay failed."),
    }
}

/// `1 unresolved dead letter`, `3 unresolved dead letters`, with `matching`
/// when filtered.
fn count_text(n: usize, filtered: bool) -> String {
    let what = if n == 1 {
        "dead letter"
    } else {
        "dead letters"
    };
    match (n, filtered) {
        (0, true) => "No unresolved dead letters match these filters.".into(),
        (0, false) => "No unresolved dead letters.".into(),
        (n, true) => format!("{n} unresolved {what} match these filters"),
        (n, false) => format!("{n} unresolved {what}"),
    }
}

#[component]
pub fn DeadLettersPage() -> impl IntoView {
    let query = use_query_map();
    let filters = Memo::new(move |_| query.with(filters_from));
    let page: PageResource = Resource::new(move || filters.get(), load);
    view! {
        <Title text="Dead letters" />
        <AdminGate>
            <DeadLetters page filters />
        </AdminGate>
    }
}

#[component]
fn DeadLetters(page: PageResource, filters: Memo<DeadLetterQuery>) -> impl IntoView {
    view! {
        <div class="page-head">
            <h1>"Dead letters"</h1>
            <p class="muted">
                "Jobs that failed for good. Re-enqueue them once the cause is fixed, or discard them."
            </p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => {
                        let f = filters.get_untracked();
                        view! {
                            <Filters filters=f.clone() current=filters tenants=p.tenants.clone() />
                            <DeadLetterTable page=p filters=f />
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// Reason, queue and tenant; a change applies at once (the URL keeps it).
#[component]
fn Filters(
    filters: DeadLetterQuery,
    current: Memo<DeadLetterQuery>,
    tenants: Vec<String>,
) -> impl IntoView {
    let navigate = use_navigate();
    // A change applies to the filters in the URL now (the page's memo), not
    // to this form's copy: a change on a form that a refetch is replacing
    // (its owner already disposed, leptos#4350) must keep the filter the
    // previous change just set, and must not read a disposed value.
    let apply = move |field: &'static str, value: String| {
        let mut q = current.get_untracked();
        match field {
            "reason" => q.reason = value,
            "queue" => q.queue = value,
            _ => q.tenant = value,
        }
        // A new filter starts at the first page.
        q.before.clear();
        navigate(&list_url(&q), Default::default());
    };
    let select = move |field: &'static str,
                       label: &'static str,
                       options: Vec<String>,
                       value: String| {
        let id = format!("dl-{field}");
        let apply = apply.clone();
        view! {
            <div class="field">
                <label for=id.clone()>{label}</label>
                <select
                    id=id
                    name=field
                    on:change=move |ev| apply(field, event_target_value(&ev))
                >
                    <option value="" selected=value.is_empty()>"Any"</option>
                    {options
                        .into_iter()
                        .map(|o| {
                            let selected = o == value;
                            view! { <option value=o.clone() selected=selected>{o.clone()}</option> }
                        })
                        .collect_view()}
                </select>
            </div>
        }
    };
    let filtered =
        !(filters.reason.is_empty() && filters.queue.is_empty() && filters.tenant.is_empty());
    view! {
        <form class="filters card compact" aria-label="Filters" method="GET" action="/admin/dead-letters">
            {select("reason", "Reason", REASONS.iter().map(|s| s.to_string()).collect(), filters.reason.clone())}
            {select("queue", "Queue", QUEUES.iter().map(|s| s.to_string()).collect(), filters.queue.clone())}
            {select("tenant", "Tenant", tenants, filters.tenant.clone())}
            {filtered
                .then(|| {
                    view! {
                        <div class="field buttons">
                            <a class="btn ghost" href="/admin/dead-letters">"Clear filters"</a>
                        </div>
                    }
                })}
        </form>
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

/// What waits for a yes: a re-enqueue of permanent failures, a discard, or
/// a re-enqueue of every dead letter that matches the filters.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ask {
    Requeue(Vec<String>),
    Discard(Vec<String>),
    RequeueMatching { total: i64, permanent: i64 },
}

impl Ask {
    fn ids(&self) -> &[String] {
        match self {
            Ask::Requeue(ids) | Ask::Discard(ids) => ids,
            Ask::RequeueMatching { .. } => &[],
        }
    }
}

/// What to re-enqueue: these dead letters, or every one matching the
/// page's filters.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requeue {
    Ids(Vec<String>),
    Matching(DeadLetterQuery),
}

/// The ids sent to re-enqueue (none for all that match), and the server's
/// report.
type Requeued = (Vec<String>, Result<RequeueReport, AppError>);
/// Each id sent to discard, and its outcome.
type Discarded = Vec<(String, Result<(), AppError>)>;

/// The list's state and actions, shared by its rows and its toolbar.
#[derive(Clone, Copy)]
struct List {
    rows: RwSignal<Vec<DeadLetterDto>>,
    now: RwSignal<chrono::DateTime<chrono::Utc>>,
    selected: RwSignal<HashSet<String>>,
    busy: RwSignal<HashSet<String>>,
    /// A question for one row (shown in the row) or for the selection
    /// (shown in the toolbar).
    asking: RwSignal<Option<(bool, Ask)>>,
    filters: StoredValue<DeadLetterQuery>,
    requeue_action: Action<Requeue, Requeued>,
    discard_action: Action<Vec<String>, Discarded>,
}

impl List {
    fn name(&self, id: &str) -> String {
        self.rows.with_untracked(|v| {
            v.iter()
                .find(|d| d.id == id)
                .map(name_of)
                .unwrap_or_else(|| "a dead letter".into())
        })
    }

    /// `None` once the table is disposed.
    fn permanent_among(&self, ids: &[String]) -> Option<usize> {
        self.rows.try_with_untracked(|v| {
            v.iter()
                .filter(|d| ids.contains(&d.id) && d.reason == "permanent")
                .count()
        })
    }

    // The handlers calling these may run on a stale table, shown while a
    // refetch replaces it after its owner, and all of this state, was
    // disposed (leptos#4350): the `try_` forms make that a no-op. Everything
    // here is created together by `DeadLetterTable`, so while `rows` or
    // `asking` can be read the actions are alive too.

    /// Re-enqueues `ids`, or asks first when one of them failed permanently
    /// (`in_row`: the question appears in that row, else in the toolbar).
    fn requeue(&self, ids: Vec<String>, in_row: bool) {
        let Some(permanent) = self.permanent_among(&ids) else {
            return;
        };
        if permanent > 0 {
            self.asking.try_set(Some((in_row, Ask::Requeue(ids))));
        } else {
            self.requeue_action.dispatch(Requeue::Ids(ids));
        }
    }

    fn confirm(&self) {
        match self.asking.try_get_untracked().flatten() {
            Some((_, Ask::Requeue(ids))) => {
                self.requeue_action.dispatch(Requeue::Ids(ids));
            }
            Some((_, Ask::RequeueMatching { .. })) => {
                if let Some(filters) = self.filters.try_get_value() {
                    self.requeue_action.dispatch(Requeue::Matching(filters));
                }
            }
            Some((_, Ask::Discard(ids))) => {
                self.discard_action.dispatch(ids);
            }
            None => {}
        }
        self.asking.try_set(None);
    }
}

#[component]
fn DeadLetterTable(page: DeadLetterPage, filters: DeadLetterQuery) -> impl IntoView {
    let toasts = use_toasts();
    let next_before = page.next_before.clone();
    let filtered =
        !(filters.reason.is_empty() && filters.queue.is_empty() && filters.tenant.is_empty());
    let filters = StoredValue::new(filters);
    let rows: RwSignal<Vec<DeadLetterDto>> = RwSignal::new(page.items);
    let now = RwSignal::new(page.now);
    let selected: RwSignal<HashSet<String>> = RwSignal::new(HashSet::new());
    let busy: RwSignal<HashSet<String>> = RwSignal::new(HashSet::new());
    let asking: RwSignal<Option<(bool, Ask)>> = RwSignal::new(None);
    // Unresolved dead letters matching the filters on every page, and how
    // many of them failed permanently.
    let matching = RwSignal::new((page.matching, page.matching_permanent));
    // Bumped when an action lands: a read of the list started before it is
    // stale and not applied.
    let epoch = StoredValue::new(0u64);
    // Jobs re-enqueued from this page: when one is back, a toast says so.
    let requeued_jobs: StoredValue<HashSet<String>> = StoredValue::new(HashSet::new());

    let requeue_action = Action::new(move |what: &Requeue| {
        let what = what.clone();
        if let Requeue::Ids(ids) = &what {
            busy.update(|b| b.extend(ids.iter().cloned()));
        }
        async move {
            match what {
                Requeue::Ids(ids) => (ids.clone(), requeue(ids).await),
                Requeue::Matching(q) => (
                    Vec::new(),
                    requeue_matching(given(&q.reason), given(&q.queue), given(&q.tenant)).await,
                ),
            }
        }
    });
    let discard_action = Action::new(move |ids: &Vec<String>| {
        let ids = ids.clone();
        busy.update(|b| b.extend(ids.iter().cloned()));
        async move {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let r = discard(id.clone()).await;
                out.push((id, r));
            }
            out
        }
    });
    let list = List {
        rows,
        now,
        selected,
        busy,
        asking,
        filters,
        requeue_action,
        discard_action,
    };

    let forget = move |gone: &HashSet<String>| {
        rows.update(|v| v.retain(|d| !gone.contains(&d.id)));
        selected.update(|s| s.retain(|id| !gone.contains(id)));
    };
    Effect::new(move |_| {
        let Some((ids, result)) = requeue_action.value().get() else {
            return;
        };
        epoch.update_value(|e| *e += 1);
        busy.update(|b| ids.iter().for_each(|id| _ = b.remove(id)));
        match result {
            Ok(report) => {
                let (text, kind) = report_text(&report, &|id| list.name(id));
                let gone: HashSet<String> = report.requeued.iter().cloned().collect();
                let jobs: Vec<String> = rows.with_untracked(|v| {
                    v.iter()
                        .filter(|d| gone.contains(&d.id))
                        .filter_map(|d| d.job_id.clone())
                        .collect()
                });
                requeued_jobs.update_value(|s| s.extend(jobs));
                forget(&gone);
                // Until the next read of the list says exactly.
                let n = report.requeued.len() as i64;
                matching.update(|(total, permanent)| {
                    *total = (*total - n).max(0);
                    *permanent = (*permanent).min(*total);
                });
                toasts.show(text, kind);
            }
            Err(e) => toasts.show(format!("Re-enqueue failed: {e}"), ToastKind::Bad),
        }
    });
    Effect::new(move |_| {
        let Some(outcomes) = discard_action.value().get() else {
            return;
        };
        epoch.update_value(|e| *e += 1);
        busy.update(|b| outcomes.iter().for_each(|(id, _)| _ = b.remove(id)));
        let names: Vec<String> = outcomes
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(id, _)| list.name(id))
            .collect();
        let failed: Vec<String> = outcomes
            .iter()
            .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{}: {e}", list.name(id))))
            .collect();
        let gone: HashSet<String> = outcomes
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(id, _)| id.clone())
            .collect();
        forget(&gone);
        match (names.as_slice(), failed.is_empty()) {
            ([one], true) => toasts.show(
                format!("Discarded {one}; its job stays failed."),
                ToastKind::Ok,
            ),
            (many, true) => toasts.show(
                format!(
                    "Discarded {} dead letters; their jobs stay failed.",
                    many.len()
                ),
                ToastKind::Ok,
            ),
            (_, false) => toasts.show(
                format!("Discard failed for {}", failed.join("; ")),
                ToastKind::Bad,
            ),
        }
    });

    // Reads the list again and shows what the server has now.
    let reading = StoredValue::new(false);
    let refresh = move || {
        #[cfg(feature = "hydrate")]
        {
            if reading.get_value()
                || requeue_action.pending().get_untracked()
                || discard_action.pending().get_untracked()
            {
                return;
            }
            reading.set_value(true);
            let started = epoch.get_value();
            let q = filters.get_value();
            leptos::task::spawn_local(async move {
                let result = load(q).await;
                reading.try_set_value(false);
                let (Ok(p), Some(true)) = (result, epoch.try_with_value(|e| *e == started)) else {
                    return;
                };
                let known: HashSet<String> =
                    rows.with_untracked(|v| v.iter().map(|d| d.id.clone()).collect());
                let back: Vec<String> = p
                    .items
                    .iter()
                    .filter(|d| !known.contains(&d.id))
                    .filter(|d| {
                        d.job_id
                            .as_ref()
                            .is_some_and(|j| requeued_jobs.with_value(|s| s.contains(j)))
                    })
                    .map(|d| {
                        format!(
                            "{} failed again after its re-enqueue: {}",
                            name_of(d),
                            first_line(&d.error).0
                        )
                    })
                    .collect();
                let ids: HashSet<String> = p.items.iter().map(|d| d.id.clone()).collect();
                selected.update(|s| s.retain(|id| ids.contains(id)));
                now.set(p.now);
                matching.set((p.matching, p.matching_permanent));
                rows.set(p.items);
                for text in back {
                    toasts.show(text, ToastKind::Bad);
                }
            });
        }
    };
    #[cfg(not(feature = "hydrate"))]
    let _ = (refresh, reading, requeued_jobs);

    // A job event on the live feed (one failed, one re-enqueued) may change
    // the list: read it again.
    #[cfg(feature = "hydrate")]
    {
        let live = crate::live::use_live();
        let start = live
            .jobs
            .with_untracked(|m| m.values().map(|(s, _)| *s).max().unwrap_or(0));
        Effect::new(move |last: Option<u64>| {
            let last = last.unwrap_or(start);
            let (newest, relevant) = live.jobs.with(|m| {
                let fresh = m.values().filter(|(s, _)| *s > last);
                let newest = fresh.clone().map(|(s, _)| *s).max().unwrap_or(last);
                let relevant = fresh
                    .clone()
                    .any(|(_, e)| matches!(e.state.as_str(), "failed" | "pending"));
                (newest, relevant)
            });
            if relevant {
                refresh();
            }
            newest
        });
        let tick = move || {
            let hidden = web_sys::window()
                .and_then(|w| w.document())
                .is_some_and(|d| d.hidden());
            if !hidden {
                refresh();
            }
        };
        if let Ok(handle) = set_interval_with_handle(tick, POLL) {
            on_cleanup(move || handle.clear());
        }
    }

    let all_selected = move || {
        rows.try_with(|v| {
            !v.is_empty()
                && selected
                    .try_with(|s| v.iter().all(|d| s.contains(&d.id)))
                    .unwrap_or(false)
        })
        .unwrap_or(false)
    };
    let toggle_all = move |_| {
        if all_selected() {
            selected.try_set(HashSet::new());
        } else if let Some(all) =
            rows.try_with(|v| v.iter().map(|d| d.id.clone()).collect::<HashSet<_>>())
        {
            selected.try_set(all);
        }
    };
    let count = move || selected.with(HashSet::len);
    // Empty once the table is disposed: its buttons then do nothing.
    let selection = move || -> Vec<String> {
        rows.try_with(|v| {
            selected.try_with(|s| {
                v.iter()
                    .filter(|d| s.contains(&d.id))
                    .map(|d| d.id.clone())
                    .collect()
            })
        })
        .flatten()
        .unwrap_or_default()
    };
    let pending = move || requeue_action.pending().get() || discard_action.pending().get();

    view! {
        <div class="toolbar dl-toolbar">
            <span class="muted" aria-live="polite">
                {move || count_text(rows.with(Vec::len), filtered)}
            </span>
            <div class="row dl-bulk" role="group" aria-label="Selected dead letters">
                <button
                    class="btn primary"
                    disabled=move || count() == 0 || pending()
                    on:click=move |_| {
                        let ids = selection();
                        if !ids.is_empty() {
                            list.requeue(ids, false);
                        }
                    }
                >
                    {move || format!("Re-enqueue selected ({})", count())}
                </button>
                <button
                    class="btn danger"
                    disabled=move || count() == 0 || pending()
                    on:click=move |_| {
                        let ids = selection();
                        if !ids.is_empty() {
                            asking.try_set(Some((false, Ask::Discard(ids))));
                        }
                    }
                >
                    {move || format!("Discard selected ({})", count())}
                </button>
                <Show when=move || matching.with(|(total, _)| *total > 0)>
                    <button
                        class="btn"
                        disabled=move || pending() || asking.with(Option::is_some)
                        on:click=move |_| {
                            let (total, permanent) = matching.get_untracked();
                            asking.try_set(Some((false, Ask::RequeueMatching { total, permanent })));
                        }
                    >
                        {move || {
                            let total = matching.with(|(total, _)| *total);
                            if filtered {
                                format!("Re-enqueue all {total} that match")
                            } else {
                                format!("Re-enqueue all {total}")
                            }
                        }}
                    </button>
                </Show>
            </div>
        </div>
        {move || {
            asking
                .get()
                .filter(|(in_row, _)| !in_row)
                .map(|(_, ask)| view! { <Question ask list /> })
        }}
        <Show
            when=move || rows.with(|v| !v.is_empty())
            fallback=move || {
                view! {
                    <p class="empty">
                        {if filtered {
                            "No dead letters match these filters."
                        } else {
                            "Nothing is dead-lettered. 🎉"
                        }}
                    </p>
                }
            }
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
                            <th scope="col">"Error"</th>
                            <th scope="col" class="num">"Attempts"</th>
                            <th scope="col">"Tenant"</th>
                            <th scope="col">"Queue"</th>
                            <th scope="col">"Dead for"</th>
                            <th scope="col">"Actions"</th>
                        </tr>
                    </thead>
                    <tbody>
                        <For each=move || rows.get() key=|d| d.id.clone() let:d>
                            <Row d list />
                        </For>
                    </tbody>
                </table>
            </div>
        </Show>
        {next_before
            .map(|b| {
                let older = list_url(&DeadLetterQuery { before: b, ..filters.get_value() });
                view! {
                    <p class="pager">
                        <a class="btn" href=older>"Older →"</a>
                    </p>
                }
            })}
    }
}

/// The question for a re-enqueue of permanent failures or a discard, with
/// its yes and no.
#[component]
fn Question(ask: Ask, list: List) -> impl IntoView {
    let ids = ask.ids().to_vec();
    let n = ids.len();
    let name = ids.first().map(|id| list.name(id)).unwrap_or_default();
    let filtered = list
        .filters
        .try_with_value(|f| !(f.reason.is_empty() && f.queue.is_empty() && f.tenant.is_empty()))
        .unwrap_or(false);
    let (label, question, yes, danger) = match &ask {
        Ask::RequeueMatching { total, permanent } => (
            "Confirm re-enqueueing every matching dead letter".to_string(),
            requeue_matching_question(*total, *permanent, filtered),
            if *total == 1 {
                "Re-enqueue it"
            } else {
                "Re-enqueue all"
            },
            false,
        ),
        Ask::Requeue(_) => (
            if n == 1 {
                format!("Confirm re-enqueueing {name}")
            } else {
                format!("Confirm re-enqueueing {n} dead letters")
            },
            requeue_question(list.permanent_among(&ids).unwrap_or(0), n, &name).unwrap_or_default(),
            "Re-enqueue anyway",
            false,
        ),
        Ask::Discard(_) => (
            if n == 1 {
                format!("Confirm discarding {name}")
            } else {
                format!("Confirm discarding {n} dead letters")
            },
            discard_question(n),
            "Confirm discard",
            true,
        ),
    };
    let no = NodeRef::<leptos::html::Button>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        // The safe answer has the focus when the question appears.
        if let Some(b) = no.get() {
            let _ = b.focus();
        }
    });
    view! {
        <div class="confirm dl-question" role="group" aria-label=label>
            <span class="small">{question}</span>
            <span class="confirm-buttons">
                <button
                    class=if danger { "btn small danger solid" } else { "btn small primary" }
                    on:click=move |_| list.confirm()
                >
                    {yes}
                </button>
                <button
                    class="btn small ghost"
                    node_ref=no
                    on:click=move |_| {
                        list.asking.try_set(None);
                    }
                >
                    "Cancel"
                </button>
            </span>
        </div>
    }
}

/// One dead letter: a table row, a card at phone width.
#[component]
fn Row(d: DeadLetterDto, list: List) -> impl IntoView {
    let List {
        now,
        selected,
        busy,
        asking,
        ..
    } = list;
    // The view's closures may keep this StoredValue; the handlers take plain
    // ids, as they may run on a stale row whose owner is disposed (leptos#4350).
    let id = StoredValue::new(d.id.clone());
    let (id_check, id_requeue, id_discard) = (d.id.clone(), d.id.clone(), d.id.clone());
    let n = name_of(&d);
    let (first, more) = first_line(&d.error);
    let dead_at = d.dead_at;
    let age = move || format::age_s(format::seconds_between(dead_at, now.get()));
    let is_busy = move || id.with_value(|id| busy.with(|b| b.contains(id)));
    let asking_here = move || {
        asking.with(|a| match a {
            Some((true, ask)) => id.with_value(|id| ask.ids() == std::slice::from_ref(id)),
            _ => false,
        })
    };
    let reason = d.reason.clone();
    let error = d.error.clone();
    let (n1, n2) = (n.clone(), n.clone());
    view! {
        <tr class="dl-row">
            <td class="check">
                <input
                    type="checkbox"
                    aria-label=format!("Select {n}")
                    prop:checked=move || id.with_value(|id| selected.with(|s| s.contains(id)))
                    on:change=move |_| {
                        let id = id_check.clone();
                        selected.try_update(|s| {
                            if !s.remove(&id) {
                                s.insert(id);
                            }
                        });
                    }
                />
            </td>
            <th scope="row" class="dl-file">
                {match &d.job_id {
                    Some(j) => view! { <a href=format!("/jobs/{j}")>{n.clone()}</a> }.into_any(),
                    None => view! { <span>{n.clone()}</span> }.into_any(),
                }}
            </th>
            <td data-label="Reason">
                <span class=format!("badge reason {reason}") title=reason_meaning(&reason)>
                    {reason.replace('_', " ")}
                </span>
            </td>
            <td class="dl-error" data-label="Error">
                {if more {
                    view! {
                        <details class="error-inline">
                            <summary>
                                <span class="error-line">{first.clone()}</span>
                                <span class="sr-only">" (show the whole error)"</span>
                            </summary>
                            <pre>{error}</pre>
                        </details>
                    }
                        .into_any()
                } else {
                    view! { <p class="error-line">{first.clone()}</p> }.into_any()
                }}
            </td>
            <td class="num" data-label="Attempts">{d.attempts}</td>
            <td data-label="Tenant">{d.tenant.clone().unwrap_or_else(|| "—".into())}</td>
            <td data-label="Queue">{d.queue.clone()}</td>
            <td data-label="Dead for">
                <time datetime=dead_at.to_rfc3339() title=format::date_time(dead_at)>
                    {age}
                </time>
            </td>
            <td class="actions">
                <Show
                    when=asking_here
                    fallback=move || {
                        let (n1, n2) = (n1.clone(), n2.clone());
                        let (id_requeue, id_discard) = (id_requeue.clone(), id_discard.clone());
                        view! {
                            <span class="confirm-buttons">
                                <button
                                    class="btn small"
                                    aria-label=format!("Re-enqueue {n1}")
                                    disabled=is_busy
                                    on:click=move |_| list.requeue(vec![id_requeue.clone()], true)
                                >
                                    "Re-enqueue"
                                </button>
                                <button
                                    class="btn small danger"
                                    aria-label=format!("Discard {n2}")
                                    disabled=is_busy
                                    on:click=move |_| {
                                        asking.try_set(Some((true, Ask::Discard(vec![id_discard.clone()]))));
                                    }
                                >
                                    "Discard"
                                </button>
                            </span>
                        }
                    }
                >
                    {move || asking.get().map(|(_, ask)| view! { <Question ask list /> })}
                </Show>
            </td>
        </tr>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_enqueueing_all_that_match_says_how_many_on_every_page_and_how_many_will_fail_again() {
        assert_eq!(
            requeue_matching_question(120, 0, true),
            "Re-enqueue all 120 dead letters that match these filters, on every page?"
        );
        assert_eq!(
            requeue_matching_question(1, 1, false),
            "Re-enqueue the 1 unresolved dead letter? It failed permanently: it will fail again unless its cause changed (the file, a parser, a setting)."
        );
        assert!(requeue_matching_question(7, 3, true)
            .ends_with(" 3 of them failed permanently: they will fail again unless their cause changed (the file, a parser, a setting)."));
        assert!(requeue_matching_question(4, 4, false).contains(" All 4 failed permanently"));
        assert!(requeue_matching_question(6_000, 0, false).ends_with(
            "Re-enqueue all 6000 unresolved dead letters, on every page? The oldest 5000 go now; the rest stay listed."
        ));
    }

    #[test]
    fn an_error_shows_its_first_line_and_says_when_there_is_more() {
        assert_eq!(
            first_line("parse: the PDF is damaged"),
            ("parse: the PDF is damaged".to_string(), false)
        );
        assert_eq!(
            first_line("\n  embed: 503 Service Unavailable\n  body: upstream down\n"),
            ("embed: 503 Service Unavailable".to_string(), true)
        );
        let long = "word ".repeat(60);
        let (short, more) = first_line(&long);
        assert!(more);
        assert!(short.ends_with('…') && short.chars().count() <= FIRST_LINE_CHARS);
    }

    #[test]
    fn the_list_url_keeps_only_the_filters_that_are_set() {
        assert_eq!(list_url(&DeadLetterQuery::default()), "/admin/dead-letters");
        let q = DeadLetterQuery {
            reason: "permanent".into(),
            tenant: "acme corp".into(),
            ..Default::default()
        };
        assert_eq!(
            list_url(&q),
            "/admin/dead-letters?reason=permanent&tenant=acme%20corp"
        );
    }

    #[test]
    fn a_permanent_failure_is_named_in_the_re_enqueue_question() {
        assert_eq!(requeue_question(0, 3, "a.pdf"), None);
        let one = requeue_question(1, 1, "a.pdf").unwrap_or_default();
        assert!(one
            .starts_with("a.pdf failed permanently: it will fail again unless its cause changed"));
        let some = requeue_question(2, 5, "a.pdf").unwrap_or_default();
        assert!(
            some.starts_with("2 of the 5 selected failed permanently"),
            "{some}"
        );
        assert!(some.ends_with("Re-enqueue all 5 anyway?"), "{some}");
        assert_eq!(
            discard_question(1),
            "Discard for good? Its job stays failed."
        );
        assert_eq!(
            discard_question(3),
            "Discard 3 dead letters for good? Their jobs stay failed."
        );
        assert_eq!(count_text(1, false), "1 unresolved dead letter");
        assert_eq!(
            count_text(0, true),
            "No unresolved dead letters match these filters."
        );
    }
}
