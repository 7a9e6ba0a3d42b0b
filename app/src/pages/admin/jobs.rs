//! `/admin/jobs`: jobs of every tenant with their ids, filtered by state,
//! queue, tenant, filename or the start of a job's or document's id, the
//! time they were enqueued in (last hour, day, week) and a step they failed
//! at, newest first by enqueue, start or finish time (all kept in the URL,
//! a choice applied as it is made), paged by keyset. Visible rows follow
//! the server: a job event on the live feed reads the page again within a
//! second, and it is read every few seconds for other tenants' jobs, whose
//! events the admin's feed does not carry; the table is redrawn only when
//! something in it changed. A job's link says it was opened from here
//! (`?from=admin`), so its page's breadcrumb leads back. Bulk actions act
//! on the current filter: "Cancel N jobs" and "Retry N jobs" (the counts
//! from the server), each after a confirmation that states the count the
//! server gives at that moment ("Cancel all 312 pending jobs of tenant
//! globex?"). A failed or retrying row has its own Retry button. A toast
//! says how many jobs changed, and the list and counts refresh.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::{
        admin::{admin_jobs, cancel_matching, count_matching, retry_matching},
        jobs::retry_job,
    },
    components::{
        confirm::Confirm,
        filters::{any_of, labelled, since_options, summary, FilterBar, FilterSelect},
        layout::{may_act, AdminGate},
        loaded::Loaded,
        progress::progress_text,
        toast::{use_toasts, ToastKind},
    },
    dto::{AdminJobQuery, JobDto, JobPage, MatchingCounts},
    error::AppError,
    format,
    hooks::{use_action_toast, use_live_refresh, Refresh},
    url::{use_url_query, UrlQuery},
};

impl UrlQuery for AdminJobQuery {
    const PATH: &'static str = "/admin/jobs";

    fn first_page(&mut self) {
        self.before.clear();
    }
}

const STATES: [&str; 6] = [
    "pending",
    "processing",
    "retrying",
    "done",
    "failed",
    "cancelled",
];
const QUEUES: [&str; 3] = ["high", "normal", "slow"];
const STEPS: [&str; 4] = ["parse", "chunk", "embed", "store"];
/// How often the visible page is read again while no live event asks for
/// it (for other tenants' jobs, whose events the admin's feed does not carry).
const POLL_S: u32 = 4;

type PageResource = Resource<Result<JobPage, AppError>>;
type CountsResource = Resource<Result<MatchingCounts, AppError>>;

/// The confirmation's words for a time range: `in the last hour`.
fn since_words(since: &str) -> String {
    match since.trim() {
        "1h" => "in the last hour".into(),
        "24h" => "in the last 24 hours".into(),
        "7d" => "in the last 7 days".into(),
        other => format!("in the last {other}"),
    }
}

/// The orders the list offers: the query value and its label.
const SORTS: [(&str, &str); 3] = [
    ("", "Enqueued"),
    ("started", "Started"),
    ("finished", "Finished"),
];

/// The id column's text: the id's last 8 digits, which tell jobs apart
/// (ids are UUIDv7: their start is the time, the same for a minute's jobs).
/// The whole id is in its title and in the job's link; the search box
/// finds a job by any part of it.
pub fn short_id(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

/// The filter a bulk action acts on: the list's, whatever page is shown.
fn bulk_filter(f: &AdminJobQuery) -> AdminJobQuery {
    let mut f = f.clone();
    f.first_page();
    f
}

/// A bulk action of the job list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bulk {
    Cancel,
    Retry,
}

impl Bulk {
    /// How many jobs matching the filter it would change.
    fn count(self, c: &MatchingCounts) -> u64 {
        match self {
            Bulk::Cancel => c.cancellable,
            Bulk::Retry => c.retryable,
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Bulk::Cancel => "Cancel",
            Bulk::Retry => "Retry",
        }
    }
}

/// `Cancel 312 jobs`, `Retry 1 job`.
fn bulk_label(bulk: Bulk, n: u64) -> String {
    let jobs = if n == 1 { "job" } else { "jobs" };
    format!("{} {n} {jobs}", bulk.verb())
}

/// The confirmation's question, naming the count and the filter: `Cancel
/// all 312 pending jobs of tenants starting with “globex”?`. Without a state filter the jobs
/// are those the action can change ("unfinished", "failed or retrying");
/// without a tenant, every tenant's. A failed step and a time range come
/// last: `… that failed at embed, enqueued in the last hour?`.
fn confirm_question(bulk: Bulk, n: u64, f: &AdminJobQuery) -> String {
    let state = match (f.state.trim(), bulk) {
        ("", Bulk::Cancel) => "unfinished",
        ("", Bulk::Retry) => "failed or retrying",
        (s, _) => s,
    };
    let (all, jobs) = if n == 1 {
        ("", "job")
    } else {
        ("all ", "jobs")
    };
    let mut q = format!("{} {all}{n} {state} {jobs}", bulk.verb());
    if !f.queue.trim().is_empty() {
        q.push_str(&format!(" in queue {}", f.queue.trim()));
    }
    match f.tenant.trim() {
        "" => q.push_str(" of all tenants"),
        t => q.push_str(&format!(" of tenants starting with “{t}”")),
    }
    if !f.q.trim().is_empty() {
        q.push_str(&format!(" whose filename contains “{}”", f.q.trim()));
    }
    if !f.step.trim().is_empty() {
        q.push_str(&format!(" that failed at {}", f.step.trim()));
    }
    if !f.since.trim().is_empty() {
        q.push_str(&format!(", enqueued {}", since_words(&f.since)));
    }
    q.push('?');
    q
}

/// What a retry of `n` jobs, `permanent` of them failed for good, should
/// know first; `None` when none did.
fn permanent_warning(permanent: u64, n: u64) -> Option<String> {
    const WHY: &str = "unless its cause changed (the file, a parser, a setting)";
    match (permanent, n) {
        (0, _) => None,
        (1, 1) => Some(format!("It failed permanently: it will fail again {WHY}.")),
        (p, n) if p == n => Some(format!(
            "All {n} failed permanently: they will fail again {}.",
            WHY.replace("its", "their")
        )),
        (1, n) => Some(format!(
            "1 of the {n} failed permanently: it will fail again {WHY}."
        )),
        (p, n) => Some(format!(
            "{p} of the {n} failed permanently: they will fail again {}.",
            WHY.replace("its", "their")
        )),
    }
}

/// What the action does, under the question.
fn confirm_detail(bulk: Bulk, n: u64, limit: u64) -> String {
    let what = match bulk {
        Bulk::Cancel => {
            "Running jobs stop at their next check and their partial results are removed. Cancelled jobs cannot be resumed."
        }
        Bulk::Retry => {
            "Failed jobs resume at the step that failed; retrying jobs run now instead of waiting."
        }
    };
    if n > limit {
        format!(
            "{what} One click changes the oldest {}; click again for the rest.",
            format::number(limit as f64)
        )
    } else {
        what.to_string()
    }
}

/// The toast after a bulk action.
fn bulk_toast(bulk: Bulk, result: &Result<u64, AppError>) -> (String, ToastKind) {
    let jobs = |n: u64| {
        if n == 1 {
            "1 job".to_string()
        } else {
            format!("{n} jobs")
        }
    };
    match (bulk, result) {
        (Bulk::Cancel, Ok(n)) => (format!("Cancelled {}.", jobs(*n)), ToastKind::Ok),
        (Bulk::Retry, Ok(1)) => (
            "Retried 1 job; it is pending again.".to_string(),
            ToastKind::Ok,
        ),
        (Bulk::Retry, Ok(n)) => (
            format!("Retried {}; they are pending again.", jobs(*n)),
            ToastKind::Ok,
        ),
        (Bulk::Cancel, Err(e)) => (format!("Cancelling failed: {e}"), ToastKind::Bad),
        (Bulk::Retry, Err(e)) => (format!("Retrying failed: {e}"), ToastKind::Bad),
    }
}

/// A bulk action waiting for its confirmation: the count the server gave
/// for the filter it will act on.
#[derive(Debug, Clone, PartialEq)]
struct Confirmation {
    bulk: Bulk,
    count: u64,
    /// Of `count`, those a retry fails again (a permanent failure).
    permanent: u64,
    limit: u64,
    filter: AdminJobQuery,
}

/// Counts what a bulk action would change: answers the action, the filter
/// it was asked for and the counts.
type AskAction =
    Action<(Bulk, AdminJobQuery), (Bulk, AdminJobQuery, Result<MatchingCounts, AppError>)>;

/// The page's actions and state; they live with the page, not the list, so
/// a refresh that redraws the list loses no answer.
#[derive(Clone, Copy)]
struct Controls {
    filters: Memo<AdminJobQuery>,
    counts: CountsResource,
    confirming: RwSignal<Option<Confirmation>>,
    /// Asks the server how many jobs the action would change now.
    ask: AskAction,
    /// Runs a confirmed bulk action.
    act: Action<(Bulk, AdminJobQuery), (Bulk, Result<u64, AppError>)>,
    /// Retries one job: `(id, filename)`.
    retry_one: Action<(String, String), (String, Result<String, AppError>)>,
}

#[component]
pub fn AdminJobsPage() -> impl IntoView {
    let filters = use_url_query::<AdminJobQuery>();
    // Bumped after each action: the list and the counts are read again.
    let tick = RwSignal::new(0u64);
    let page: PageResource =
        Resource::new(move || (filters.get(), tick.get()), |(q, _)| admin_jobs(q));
    let counts: CountsResource = Resource::new(
        move || (filters.with(bulk_filter), tick.get()),
        |(q, _)| count_matching(q),
    );
    let again = move || tick.update(|t| *t += 1);
    let toasts = use_toasts();
    let confirming = RwSignal::new(None::<Confirmation>);
    let ask = Action::new(|(bulk, filter): &(Bulk, AdminJobQuery)| {
        let (bulk, filter) = (*bulk, filter.clone());
        async move {
            let counts = count_matching(filter.clone()).await;
            (bulk, filter, counts)
        }
    });
    Effect::new(move |_| {
        let Some((bulk, filter, counts)) = ask.value().get() else {
            return;
        };
        match counts {
            Ok(c) if bulk.count(&c) > 0 => confirming.set(Some(Confirmation {
                bulk,
                count: bulk.count(&c),
                permanent: if bulk == Bulk::Retry { c.permanent } else { 0 },
                limit: c.limit,
                filter,
            })),
            Ok(_) => {
                toasts.show(
                    format!(
                        "Nothing to {}: no job matching these filters can be.",
                        bulk.verb().to_lowercase()
                    ),
                    ToastKind::Bad,
                );
                again();
            }
            Err(e) => toasts.show(format!("Counting the jobs failed: {e}"), ToastKind::Bad),
        }
    });
    let act = use_action_toast(
        |(bulk, filter): (Bulk, AdminJobQuery)| async move {
            let result = match bulk {
                Bulk::Cancel => cancel_matching(filter).await,
                Bulk::Retry => retry_matching(filter).await,
            };
            (bulk, result)
        },
        |(bulk, result)| bulk_toast(*bulk, result),
        move |_| {
            confirming.set(None);
            again();
        },
    );
    let retry_one = use_action_toast(
        |(id, name): (String, String)| async move { (name, retry_job(id).await) },
        |(name, result)| match result {
            Ok(_) => (
                format!("Retrying {name}; it is pending again."),
                ToastKind::Ok,
            ),
            Err(e) => (format!("Could not retry {name}: {e}"), ToastKind::Bad),
        },
        move |_| again(),
    );
    live_rows(page, counts, filters);
    // Other filters: a question about the old ones no longer applies.
    Effect::new(move |seen: Option<()>| {
        filters.track();
        if seen.is_some() {
            confirming.set(None);
        }
    });
    let controls = Controls {
        filters,
        counts,
        confirming,
        ask,
        act,
        retry_one,
    };
    view! {
        <Title text="All jobs" />
        <AdminGate>
            <AdminJobs page controls />
        </AdminGate>
    }
}

/// Keeps the visible rows and the bulk counts current without a reload
/// (`use_live_refresh`: within a second of a job event, every [`POLL_S`]
/// seconds otherwise). What is read replaces what is shown only if it
/// differs, so an unchanged table keeps its focus and selection.
fn live_rows(page: PageResource, counts: CountsResource, filters: Memo<AdminJobQuery>) {
    let reading = StoredValue::new(false);
    let refresh = move || {
        if reading.get_value() {
            return;
        }
        reading.set_value(true);
        let filter = filters.get_untracked();
        leptos::task::spawn_local(async move {
            let fresh = admin_jobs(filter.clone()).await;
            let fresh_counts = count_matching(bulk_filter(&filter)).await;
            reading.try_set_value(false);
            // The filters changed meanwhile: the resources read the new ones.
            if filters.try_get_untracked().as_ref() != Some(&filter) {
                return;
            }
            if let Ok(p) = fresh {
                if page.with_untracked(|c| !matches!(c, Some(Ok(c)) if *c == p)) {
                    page.set(Some(Ok(p)));
                }
            }
            if let Ok(c) = fresh_counts {
                if counts.with_untracked(|old| *old != Some(Ok(c))) {
                    counts.set(Some(Ok(c)));
                }
            }
        });
    };
    let every_event = Refresh {
        every_s: POLL_S,
        on_event: Some(|_| true),
    };
    use_live_refresh(every_event, || false, refresh);
}

#[component]
fn AdminJobs(page: PageResource, controls: Controls) -> impl IntoView {
    let filters = controls.filters;
    // The form is drawn once and its fields follow the URL (a link to
    // another filter, the back button), so a choice applied as it is made
    // keeps the focus on its field.
    let first = filters.get_untracked();
    let now = move |field: fn(&AdminJobQuery) -> &String| {
        Signal::derive(move || filters.with(|f| field(f).clone()))
    };
    let set = move || {
        filters.with(|f| {
            [&f.state, &f.queue, &f.tenant, &f.q, &f.since, &f.step]
                .into_iter()
                .filter(|v| !v.trim().is_empty())
                .count()
        })
    };
    view! {
        <div class="page-head">
            <h1>"All jobs"</h1>
        </div>
        // At phone width the filters fold under their summary, so the jobs
        // are on the first screen; wider, they are always open (style).
        <details class="fold">
            <summary class="btn">{move || summary(set())}</summary>
            <FilterBar action=AdminJobQuery::PATH apply=true reset="Reset">
                <FilterSelect id="state" name="state" label="State" options=any_of(&STATES) value=now(|f| &f.state) />
                <FilterSelect id="queue" name="queue" label="Queue" options=any_of(&QUEUES) value=now(|f| &f.queue) />
                <div class="field">
                    <label for="tenant">"Tenant"</label>
                    <input
                        id="tenant"
                        name="tenant"
                        value=first.tenant.clone()
                        prop:value=now(|f| &f.tenant)
                        placeholder="slug or its start, e.g. acm"
                    />
                </div>
                <div class="field grow">
                    <label for="filename">"Filename or ID"</label>
                    <input
                        id="filename"
                        name="q"
                        type="search"
                        value=first.q.clone()
                        prop:value=now(|f| &f.q)
                        placeholder="part of the name or of an id"
                    />
                </div>
                <FilterSelect id="since" name="since" label="Enqueued in" options=since_options(&first.since) value=now(|f| &f.since) />
                <FilterSelect id="step" name="step" label="Failed at step" options=any_of(&STEPS) value=now(|f| &f.step) />
                <FilterSelect id="sort" name="sort" label="Newest by" options=labelled(&SORTS) value=now(|f| &f.sort) />
            </FilterBar>
        </details>
        {may_act().then(|| view! { <BulkBar controls /> })}
        <Loaded data=page view=move |p| view! { <JobsTable page=p filters=filters.get_untracked() controls /> } />
    }
}

/// "Cancel N jobs" and "Retry N jobs" for the current filter, and the
/// confirmation a click opens.
#[component]
fn BulkBar(controls: Controls) -> impl IntoView {
    let Controls {
        filters,
        counts,
        confirming,
        ask,
        act,
        ..
    } = controls;
    let busy = move || ask.pending().get() || act.pending().get();
    // Drawn once the counts are in (under a Transition, so the server waits
    // for them and hands them to the browser with the page).
    let button = move |bulk: Bulk, n: u64| {
        view! {
            <button
                class=if bulk == Bulk::Cancel { "btn danger" } else { "btn" }
                disabled=move || busy() || n == 0 || confirming.with(Option::is_some)
                on:click=move |_| {
                    ask.dispatch((bulk, filters.with_untracked(bulk_filter)));
                }
            >
                {bulk_label(bulk, n)}
            </button>
        }
    };
    view! {
        <section class="toolbar bulk" aria-label="Bulk actions">
            <span class="muted">"Act on every job matching these filters:"</span>
            <Transition fallback=|| view! { <span class="muted">"Counting…"</span> }>
                {move || Suspend::new(async move {
                    match counts.await {
                        Ok(c) => {
                            view! {
                                <div class="row">
                                    {button(Bulk::Cancel, c.cancellable)}
                                    {button(Bulk::Retry, c.retryable)}
                                </div>
                            }
                                .into_any()
                        }
                        // A filter the server refused is said once, above
                        // the table; the bar only says why it has no buttons.
                        Err(AppError::Validation(_)) => {
                            view! { <span class="muted">"None until the filters are corrected."</span> }
                                .into_any()
                        }
                        Err(e) => {
                            view! {
                                <p class="error" role="alert">{format!("Counting the jobs failed: {e}")}</p>
                            }
                                .into_any()
                        }
                    }
                })}
            </Transition>
        </section>
        {move || {
            confirming
                .get()
                .map(|c| {
                    let go = bulk_label(c.bulk, c.count.min(c.limit));
                    let (bulk, filter) = (c.bulk, c.filter.clone());
                    view! {
                        <Confirm
                            question=confirm_question(c.bulk, c.count, &c.filter)
                            detail=confirm_detail(c.bulk, c.count, c.limit)
                            warning=permanent_warning(c.permanent, c.count)
                            yes=go
                            no="Go back"
                            danger=bulk == Bulk::Cancel
                            busy=act.pending()
                            on_yes=Callback::new(move |_| {
                                act.dispatch((bulk, filter.clone()));
                            })
                            on_no=Callback::new(move |_| confirming.set(None))
                        />
                    }
                })
        }}
    }
}

/// From the job's first start to its end (retries and their waits
/// included); a dash while it has not both.
fn duration_text(j: &JobDto) -> String {
    match (j.started_at, j.finished_at) {
        (Some(started), Some(finished)) => {
            format::duration_ms((finished - started).num_milliseconds())
        }
        _ => "—".into(),
    }
}

#[component]
fn JobsTable(page: JobPage, filters: AdminJobQuery, controls: Controls) -> impl IntoView {
    let retry_one = controls.retry_one;
    // A viewer reads the list; its rows have no Retry.
    let act = may_act();
    if page.jobs.is_empty() {
        return view! { <p class="empty">"No jobs match these filters."</p> }.into_any();
    }
    let at = |before: &str| {
        AdminJobQuery {
            before: before.to_string(),
            ..filters.clone()
        }
        .url()
    };
    let older = page.next_before.as_deref().map(at);
    let newest = (!filters.before.is_empty()).then(|| at(""));
    view! {
        <div class="table-wrap">
            <table class="table">
                <thead>
                    <tr>
                        <th scope="col">"File"</th>
                        <th scope="col">"ID"</th>
                        <th scope="col">"Tenant"</th>
                        <th scope="col">"Queue"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Progress"</th>
                        <th scope="col">"Attempt"</th>
                        <th scope="col">"Enqueued"</th>
                        <th scope="col">"Started"</th>
                        <th scope="col">"Finished"</th>
                        <th scope="col">"Duration"</th>
                        <th scope="col">"Actions"</th>
                    </tr>
                </thead>
                <tbody>
                    {page
                        .jobs
                        .iter()
                        .map(|j| {
                            view! {
                                <tr>
                                    <th scope="row">
                                        <a href=format!("/jobs/{}?from=admin", j.id)>{j.filename.clone()}</a>
                                    </th>
                                    <td class="mono" title=j.id.clone()>{short_id(&j.id).to_string()}</td>
                                    <td>{j.tenant.clone()}</td>
                                    <td class="mono">{j.queue.clone()}</td>
                                    <td><span class=format!("badge {}", j.state)>{j.state.clone()}</span></td>
                                    <td>{progress_text(j)}</td>
                                    <td>{j.attempt}</td>
                                    <td>
                                        <time datetime=j.enqueued_at.to_rfc3339()>{format::date_time(j.enqueued_at)}</time>
                                    </td>
                                    <td>{time_cell(j.started_at)}</td>
                                    <td>{time_cell(j.finished_at)}</td>
                                    <td class="num">{duration_text(j)}</td>
                                    <td class="actions">
                                        {retry_label(&j.state)
                                            .filter(|_| act)
                                            .map(|label| {
                                                let (id, name) = (j.id.clone(), j.filename.clone());
                                                view! {
                                                    <button
                                                        class="btn small"
                                                        aria-label=format!("{label} {name}")
                                                        disabled=move || retry_one.pending().get()
                                                        on:click=move |_| {
                                                            retry_one.dispatch((id.clone(), name.clone()));
                                                        }
                                                    >
                                                        {label}
                                                    </button>
                                                }
                                            })}
                                    </td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
        <nav class="pager" aria-label="Pages">
            {newest.map(|h| view! { <a class="btn ghost" href=h>"← Newest"</a> })}
            {older.map(|h| view! { <a class="btn" href=h>"Older →"</a> })}
        </nav>
    }
        .into_any()
}

/// A time cell of the list: the time, or a dash when it has not happened.
fn time_cell(at: Option<chrono::DateTime<chrono::Utc>>) -> AnyView {
    match at {
        Some(t) => view! { <time datetime=t.to_rfc3339()>{format::date_time(t)}</time> }.into_any(),
        None => view! {
            <span class="muted">
                <span aria-hidden="true">"—"</span>
                <span class="sr-only">"not yet"</span>
            </span>
        }
        .into_any(),
    }
}

/// The row button of a job that can be retried: `Retry` when it failed,
/// `Retry now` while it waits to retry.
fn retry_label(state: &str) -> Option<&'static str> {
    match state {
        "failed" => Some("Retry"),
        "retrying" => Some("Retry now"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_links_keep_the_filters() {
        let f = AdminJobQuery {
            state: "failed".into(),
            q: "a b.pdf".into(),
            ..Default::default()
        };
        assert_eq!(
            AdminJobQuery {
                before: "x".into(),
                ..f
            }
            .url(),
            "/admin/jobs?state=failed&q=a+b.pdf&before=x"
        );
        let f = AdminJobQuery {
            q: "01a2".into(),
            sort: "finished".into(),
            ..Default::default()
        };
        assert_eq!(f.url(), "/admin/jobs?q=01a2&sort=finished");
        let f = AdminJobQuery {
            state: "failed".into(),
            since: "24h".into(),
            step: "embed".into(),
            ..Default::default()
        };
        assert_eq!(
            AdminJobQuery {
                before: "x".into(),
                ..f
            }
            .url(),
            "/admin/jobs?state=failed&since=24h&step=embed&before=x"
        );
    }

    #[test]
    fn the_id_column_shows_the_random_end_of_the_id() {
        assert_eq!(short_id("01a233cb-ee6a-73df-9fc6-cbed4c506b52"), "4c506b52");
        assert_eq!(short_id("abc"), "abc");
    }

    #[test]
    fn the_confirmation_states_the_count_and_the_filter() {
        let f = AdminJobQuery {
            state: "pending".into(),
            tenant: "globex".into(),
            ..Default::default()
        };
        assert_eq!(
            confirm_question(Bulk::Cancel, 312, &f),
            "Cancel all 312 pending jobs of tenants starting with “globex”?"
        );
        assert_eq!(
            confirm_question(Bulk::Cancel, 1, &f),
            "Cancel 1 pending job of tenants starting with “globex”?"
        );
        let any = AdminJobQuery::default();
        assert_eq!(
            confirm_question(Bulk::Cancel, 40, &any),
            "Cancel all 40 unfinished jobs of all tenants?"
        );
        let f = AdminJobQuery {
            queue: "slow".into(),
            q: "report".into(),
            ..Default::default()
        };
        assert_eq!(
            confirm_question(Bulk::Retry, 5, &f),
            "Retry all 5 failed or retrying jobs in queue slow of all tenants whose filename contains “report”?"
        );
        let f = AdminJobQuery {
            state: "failed".into(),
            step: "embed".into(),
            since: "1h".into(),
            ..Default::default()
        };
        assert_eq!(
            confirm_question(Bulk::Retry, 7, &f),
            "Retry all 7 failed jobs of all tenants that failed at embed, enqueued in the last hour?"
        );
        let f = AdminJobQuery {
            since: "7d".into(),
            ..Default::default()
        };
        assert_eq!(
            confirm_question(Bulk::Cancel, 2, &f),
            "Cancel all 2 unfinished jobs of all tenants, enqueued in the last 7 days?"
        );
        assert_eq!(permanent_warning(0, 5), None);
        assert_eq!(
            permanent_warning(2, 2).as_deref(),
            Some("All 2 failed permanently: they will fail again unless their cause changed (the file, a parser, a setting).")
        );
        assert_eq!(
            permanent_warning(1, 3).as_deref(),
            Some("1 of the 3 failed permanently: it will fail again unless its cause changed (the file, a parser, a setting).")
        );
        assert!(permanent_warning(1, 1).is_some_and(|w| w.starts_with("It failed permanently")));
        assert!(confirm_detail(Bulk::Cancel, 12_000, 10_000).contains("the oldest 10000"));
        assert!(!confirm_detail(Bulk::Retry, 5, 10_000).contains("oldest"));
    }

    #[test]
    fn buttons_and_toasts_count_jobs() {
        assert_eq!(bulk_label(Bulk::Cancel, 312), "Cancel 312 jobs");
        assert_eq!(bulk_label(Bulk::Retry, 1), "Retry 1 job");
        assert_eq!(
            bulk_toast(Bulk::Cancel, &Ok(312)),
            ("Cancelled 312 jobs.".to_string(), ToastKind::Ok)
        );
        assert_eq!(
            bulk_toast(Bulk::Retry, &Ok(1)).0,
            "Retried 1 job; it is pending again."
        );
        assert_eq!(
            bulk_toast(Bulk::Cancel, &Err(AppError::Forbidden)).1,
            ToastKind::Bad
        );
        assert_eq!(retry_label("failed"), Some("Retry"));
        assert_eq!(retry_label("retrying"), Some("Retry now"));
        assert_eq!(retry_label("done"), None);
    }
}
