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

use crate::{
    api::admin::{dead_letters, discard, requeue, requeue_matching},
    components::{
        confirm::Confirm,
        filters::{any_of, pick_into, FilterBar, FilterSelect},
        layout::{may_act, AdminGate},
        loaded::Loaded,
        selection::{SelectAll, SelectRow, Selection},
        toast::{use_toasts, ToastKind},
    },
    dto::{DeadLetterDto, DeadLetterPage, DeadLetterQuery, RequeueReport},
    error::AppError,
    format,
    hooks::{use_action_toast, use_live_refresh, Refresh},
    url::{use_url_query, UrlQuery},
};

impl UrlQuery for DeadLetterQuery {
    const PATH: &'static str = "/admin/dead-letters";

    fn first_page(&mut self) {
        self.before.clear();
    }
}

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
const POLL_S: u32 = 4;
/// Characters of an error's first line shown in the row.
const FIRST_LINE_CHARS: usize = 140;

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
    let filters = use_url_query::<DeadLetterQuery>();
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
        <Loaded
            data=page
            view=move |p| {
                view! {
                    <Filters current=filters tenants=p.tenants.clone() />
                    <DeadLetterTable page=p filters=filters.get_untracked() />
                }
            }
        />
    }
}

/// Whether any filter is set (the page of a cursor is no filter).
fn is_filtered(q: &DeadLetterQuery) -> bool {
    !(q.reason.is_empty() && q.queue.is_empty() && q.tenant.is_empty())
}

/// Reason, queue and tenant; a change applies at once (the URL keeps it).
#[component]
fn Filters(current: Memo<DeadLetterQuery>, tenants: Vec<String>) -> impl IntoView {
    let pick = move |set: fn(&mut DeadLetterQuery, String)| pick_into(current, set);
    let now = current.get_untracked();
    view! {
        <FilterBar action=DeadLetterQuery::PATH reset="Clear filters" filtered=is_filtered(&now) compact=true>
            <FilterSelect
                id="dl-reason"
                name="reason"
                label="Reason"
                options=any_of(&REASONS)
                value=now.reason.clone()
                on_pick=pick(|q, v| q.reason = v)
            />
            <FilterSelect
                id="dl-queue"
                name="queue"
                label="Queue"
                options=any_of(&QUEUES)
                value=now.queue.clone()
                on_pick=pick(|q, v| q.queue = v)
            />
            <FilterSelect
                id="dl-tenant"
                name="tenant"
                label="Tenant"
                options=any_of(&tenants)
                value=now.tenant.clone()
                on_pick=pick(|q, v| q.tenant = v)
            />
        </FilterBar>
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

/// The toast after discarding: each dead letter's name and outcome.
fn discard_text(outcomes: &[(String, String, Result<(), AppError>)]) -> (String, ToastKind) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(_, name, r)| r.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    if !failed.is_empty() {
        return (
            format!("Discard failed for {}", failed.join("; ")),
            ToastKind::Bad,
        );
    }
    match outcomes {
        [(_, one, _)] => (
            format!("Discarded {one}; its job stays failed."),
            ToastKind::Ok,
        ),
        many => (
            format!(
                "Discarded {} dead letters; their jobs stay failed.",
                many.len()
            ),
            ToastKind::Ok,
        ),
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
/// Each id sent to discard, its name, and its outcome.
type Discarded = Vec<(String, String, Result<(), AppError>)>;

/// The list's state and actions, shared by its rows and its toolbar.
#[derive(Clone, Copy)]
struct List {
    rows: RwSignal<Vec<DeadLetterDto>>,
    now: RwSignal<chrono::DateTime<chrono::Utc>>,
    selection: Selection,
    busy: RwSignal<HashSet<String>>,
    /// A question for one row (shown in the row) or for the selection
    /// (shown in the toolbar).
    asking: RwSignal<Option<(bool, Ask)>>,
    filters: StoredValue<DeadLetterQuery>,
    requeue_action: Action<Requeue, Requeued>,
    discard_action: Action<Vec<(String, String)>, Discarded>,
}

impl List {
    fn name(&self, id: &str) -> String {
        self.rows
            .try_with_untracked(|v| v.iter().find(|d| d.id == id).map(name_of))
            .flatten()
            .unwrap_or_else(|| "a dead letter".into())
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
                let named = ids.into_iter().map(|id| (self.name(&id), id));
                self.discard_action
                    .dispatch(named.map(|(name, id)| (id, name)).collect());
            }
            None => {}
        }
        self.asking.try_set(None);
    }
}

#[component]
fn DeadLetterTable(page: DeadLetterPage, filters: DeadLetterQuery) -> impl IntoView {
    let next_before = page.next_before.clone();
    let filtered = is_filtered(&filters);
    let filters = StoredValue::new(filters);
    let rows: RwSignal<Vec<DeadLetterDto>> = RwSignal::new(page.items);
    let now = RwSignal::new(page.now);
    let selection = Selection::new(move || {
        rows.try_with(|v| v.iter().map(|d| d.id.clone()).collect())
            .unwrap_or_default()
    });
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
    let forget = move |gone: &HashSet<String>| {
        rows.update(|v| v.retain(|d| !gone.contains(&d.id)));
        selection.retain(|id| !gone.contains(id));
    };
    let names = move |id: &str| {
        rows.with_untracked(|v| v.iter().find(|d| d.id == id).map(name_of))
            .unwrap_or_else(|| "a dead letter".into())
    };

    let requeue_action = use_action_toast(
        move |what: Requeue| {
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
        },
        move |(_, result): &Requeued| match result {
            Ok(report) => report_text(report, &names),
            Err(e) => (format!("Re-enqueue failed: {e}"), ToastKind::Bad),
        },
        move |(ids, result): Requeued| {
            epoch.update_value(|e| *e += 1);
            busy.update(|b| ids.iter().for_each(|id| _ = b.remove(id)));
            let Ok(report) = result else {
                return;
            };
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
        },
    );
    let discard_action = use_action_toast(
        move |named: Vec<(String, String)>| {
            busy.update(|b| b.extend(named.iter().map(|(id, _)| id.clone())));
            async move {
                let mut out = Vec::with_capacity(named.len());
                for (id, name) in named {
                    let r = discard(id.clone()).await;
                    out.push((id, name, r));
                }
                out
            }
        },
        |outcomes: &Discarded| discard_text(outcomes),
        move |outcomes: Discarded| {
            epoch.update_value(|e| *e += 1);
            busy.update(|b| outcomes.iter().for_each(|(id, _, _)| _ = b.remove(id)));
            let gone: HashSet<String> = outcomes
                .into_iter()
                .filter(|(_, _, r)| r.is_ok())
                .map(|(id, _, _)| id)
                .collect();
            forget(&gone);
        },
    );
    let list = List {
        rows,
        now,
        selection,
        busy,
        asking,
        filters,
        requeue_action,
        discard_action,
    };

    // Reads the list again and shows what the server has now.
    let toasts = use_toasts();
    let reading = StoredValue::new(false);
    let refresh = move || {
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
            selection.retain(|id| ids.contains(id));
            now.set(p.now);
            matching.set((p.matching, p.matching_permanent));
            rows.set(p.items);
            for text in back {
                toasts.show(text, ToastKind::Bad);
            }
        });
    };
    // A job event on the live feed (one failed, one re-enqueued) may change
    // the list; it is read every few seconds meanwhile for other tenants'.
    let failed_or_requeued = Refresh {
        every_s: POLL_S,
        on_event: Some(|e| matches!(e.state.as_str(), "failed" | "pending")),
    };
    use_live_refresh(failed_or_requeued, || false, refresh);

    let count = move || selection.count();
    let pending = move || requeue_action.pending().get() || discard_action.pending().get();
    // A viewer reads the list and acts on nothing: no selection, no buttons.
    let act = may_act();

    view! {
        <div class="toolbar dl-toolbar">
            <span class="muted" aria-live="polite">
                {move || count_text(rows.with(Vec::len), filtered)}
            </span>
            {act.then(|| view! {
            <div class="row dl-bulk" role="group" aria-label="Selected dead letters">
                <button
                    class="btn primary"
                    disabled=move || count() == 0 || pending()
                    on:click=move |_| {
                        let ids = selection.ids();
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
                        let ids = selection.ids();
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
            })}
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
                            {act.then(|| view! { <SelectAll selection /> })}
                            <th scope="col">"File"</th>
                            <th scope="col">"Reason"</th>
                            <th scope="col">"Error"</th>
                            <th scope="col" class="num">"Attempts"</th>
                            <th scope="col">"Tenant"</th>
                            <th scope="col">"Queue"</th>
                            <th scope="col">"Dead for"</th>
                            {act.then(|| view! { <th scope="col">"Actions"</th> })}
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
                let older = DeadLetterQuery { before: b, ..filters.get_value() }.url();
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
    let filtered = list.filters.try_with_value(is_filtered).unwrap_or(false);
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
    view! {
        <Confirm
            label
            question
            yes=yes.to_string()
            no="Cancel"
            danger
            class="dl-question"
            on_yes=Callback::new(move |_| list.confirm())
            on_no=Callback::new(move |_| {
                list.asking.try_set(None);
            })
        />
    }
}

/// One dead letter: a table row, a card at phone width.
#[component]
fn Row(d: DeadLetterDto, list: List) -> impl IntoView {
    let List {
        now,
        selection,
        busy,
        asking,
        ..
    } = list;
    // The view's closures may keep this StoredValue; the handlers take plain
    // ids, as they may run on a stale row whose owner is disposed (leptos#4350).
    let id = StoredValue::new(d.id.clone());
    let (id_requeue, id_discard) = (d.id.clone(), d.id.clone());
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
    let act = may_act();
    view! {
        <tr class="dl-row">
            {act.then(|| view! { <SelectRow selection id=d.id.clone() name=n.clone() /> })}
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
            {act.then(|| view! {
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
            })}
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
        assert_eq!(DeadLetterQuery::default().url(), "/admin/dead-letters");
        let q = DeadLetterQuery {
            reason: "permanent".into(),
            tenant: "acme corp".into(),
            ..Default::default()
        };
        assert_eq!(
            q.url(),
            "/admin/dead-letters?reason=permanent&tenant=acme+corp"
        );
    }

    #[test]
    fn a_discard_names_each_failure_and_counts_what_went() {
        let ok = |id: &str, name: &str| (id.to_string(), name.to_string(), Ok(()));
        assert_eq!(
            discard_text(&[ok("1", "a.pdf")]).0,
            "Discarded a.pdf; its job stays failed."
        );
        assert_eq!(
            discard_text(&[ok("1", "a.pdf"), ok("2", "b.pdf")]).0,
            "Discarded 2 dead letters; their jobs stay failed."
        );
        let bad = discard_text(&[
            ok("1", "a.pdf"),
            ("2".into(), "b.pdf".into(), Err(AppError::NotFound)),
        ]);
        assert_eq!(
            bad,
            (
                "Discard failed for b.pdf: not found".to_string(),
                ToastKind::Bad
            )
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
