//! `/admin`: per-queue cards, charts over the last hour or day, failure
//! rate per step, the retry distribution, dead letters, throughput and
//! workers, and a card per dependency behind a circuit breaker. The numbers
//! come from the same `stats::collect` as `/api/admin/stats`; the page
//! refreshes them every 5 s without reloading. Each queue card pauses or
//! resumes its queue and says when its backlog clears at the drain rate of
//! the last five minutes; a toast says what happened and the numbers
//! refresh at once. A table of tenants (sortable by each column in the
//! browser, the order kept across refreshes) links each to the job list
//! filtered by it; so does each step's failure bar (the jobs that failed at
//! that step), like the queue cards and the dead-letter card.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::admin::{dashboard, pause_queue, resume_queue, retry_reembeds, set_reembed_paused},
    components::{
        charts::{Bar, BarChart, BarLink, Line, LineChart},
        confirm::Confirm,
        layout::{may_act, AdminGate},
        loaded::Loaded,
        toast::ToastKind,
    },
    dto::{
        AdminJobQuery, DashboardDto, DependencyDto, QueueStatsDto, ReembedDto, SeriesDto,
        StepStatsDto, TenantStatsDto,
    },
    error::AppError,
    format,
    hooks::{use_action_toast, use_live_refresh, Refresh},
    url::UrlQuery,
};

/// Dead letters above this many turn the card red (the alert rule's threshold).
const DEAD_LETTER_ALERT: i64 = 10;

/// How much of a dependency's error the card shows; the rest is in its tooltip.
const DEPENDENCY_ERROR_CHARS: usize = 140;

type DataResource = Resource<Result<DashboardDto, crate::error::AppError>>;

/// Pauses (`true`) or resumes a queue; answers the queue, what was asked
/// and how it went. It lives with the page, not the card, so a refresh that
/// re-renders the cards mid-request loses no answer.
type PauseAction = Action<(String, bool), (String, bool, Result<(), AppError>)>;

/// A column of the tenant table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantColumn {
    Tenant,
    Unfinished,
    Done,
    Failed,
    DeadLetters,
    Share,
}

impl TenantColumn {
    const ALL: [TenantColumn; 6] = [
        TenantColumn::Tenant,
        TenantColumn::Unfinished,
        TenantColumn::Done,
        TenantColumn::Failed,
        TenantColumn::DeadLetters,
        TenantColumn::Share,
    ];

    fn label(self) -> &'static str {
        match self {
            TenantColumn::Tenant => "Tenant",
            TenantColumn::Unfinished => "Unfinished",
            TenantColumn::Done => "Done",
            TenantColumn::Failed => "Failed",
            TenantColumn::DeadLetters => "Dead letters",
            TenantColumn::Share => "Backlog share",
        }
    }
}

/// How the tenant table is sorted: by a column, descending or not. Numbers
/// sort largest first when their column is picked, names A to Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantSort {
    pub by: TenantColumn,
    pub descending: bool,
}

impl Default for TenantSort {
    /// The largest backlog first.
    fn default() -> Self {
        Self {
            by: TenantColumn::Unfinished,
            descending: true,
        }
    }
}

impl TenantSort {
    /// After a click on `column`'s header: the other direction when it is
    /// the sorted column, else that column in its natural direction.
    fn clicked(self, column: TenantColumn) -> Self {
        if self.by == column {
            Self {
                descending: !self.descending,
                ..self
            }
        } else {
            Self {
                by: column,
                descending: column != TenantColumn::Tenant,
            }
        }
    }
}

/// `rows` in `sort`'s order; ties by slug.
fn sorted_tenants(mut rows: Vec<TenantStatsDto>, sort: TenantSort) -> Vec<TenantStatsDto> {
    rows.sort_by(|a, b| {
        let key = |t: &TenantStatsDto| match sort.by {
            TenantColumn::Tenant | TenantColumn::Unfinished | TenantColumn::Share => t.unfinished,
            TenantColumn::Done => t.done,
            TenantColumn::Failed => t.failed,
            TenantColumn::DeadLetters => t.dead_letters,
        };
        let order = match sort.by {
            TenantColumn::Tenant => a.tenant.cmp(&b.tenant),
            _ => key(a).cmp(&key(b)),
        };
        let order = if sort.descending {
            order.reverse()
        } else {
            order
        };
        order.then_with(|| a.tenant.cmp(&b.tenant))
    });
    rows
}

/// What the pause action pauses instead of a queue: the re-embedding.
const REEMBEDDING: &str = "re-embedding";

/// Re-embeds again the documents whose re-embedding failed: the page's,
/// like the pause action, so a refresh mid-request loses no answer.
#[derive(Clone, Copy)]
struct RetryFailed(Action<(), Result<i64, AppError>>);

/// The toast after retrying the failed re-embeddings.
fn retry_toast(result: &Result<i64, AppError>) -> (String, ToastKind) {
    match result {
        Ok(1) => ("1 document is re-embedded again.".into(), ToastKind::Ok),
        Ok(n) => (
            format!("{n} documents are re-embedded again."),
            ToastKind::Ok,
        ),
        Err(e) => (format!("Retrying failed: {e}"), ToastKind::Bad),
    }
}

/// The toast after pausing or resuming `queue`.
fn pause_toast(queue: &str, pause: bool, result: &Result<(), AppError>) -> (String, ToastKind) {
    match (result, pause) {
        (Ok(()), true) if queue == REEMBEDDING => (
            "Paused re-embedding: the document in hand finishes; search answers from both models."
                .to_string(),
            ToastKind::Ok,
        ),
        (Ok(()), false) if queue == REEMBEDDING => {
            ("Resumed re-embedding.".to_string(), ToastKind::Ok)
        }
        (Ok(()), true) => (
            format!("Paused {queue}: workers take no new jobs from it; running jobs finish."),
            ToastKind::Ok,
        ),
        (Ok(()), false) => (
            format!("Resumed {queue}: workers take its jobs again."),
            ToastKind::Ok,
        ),
        (Err(e), true) => (format!("Pausing {queue} failed: {e}"), ToastKind::Bad),
        (Err(e), false) => (format!("Resuming {queue} failed: {e}"), ToastKind::Bad),
    }
}

/// The queue whose pause waits for a yes: pausing the paid `high` queue
/// holds up every paying tenant's uploads, so it asks first. The page's,
/// not a card's: the cards are redrawn by each refresh.
#[derive(Clone, Copy)]
struct PauseQuestion(RwSignal<Option<String>>);

/// Whether pausing `queue` asks first.
fn pause_asks_first(queue: &str) -> bool {
    queue == "high"
}

#[component]
pub fn DashboardPage() -> impl IntoView {
    let since = RwSignal::new(3600u64);
    let tick = RwSignal::new(0u64);
    let again = move || tick.update(|t| *t += 1);
    let question = PauseQuestion(RwSignal::new(None));
    provide_context(question);
    let data: DataResource =
        Resource::new(move || (since.get(), tick.get()), |(s, _)| dashboard(s));
    // Not while a question is open: the redraw would take its focus.
    let every_5_s = Refresh {
        every_s: 5,
        on_event: None,
    };
    use_live_refresh(
        every_5_s,
        move || question.0.with_untracked(Option::is_some),
        again,
    );
    // The tenant table's order outlives the refreshes that redraw it.
    let sort = RwSignal::new(TenantSort::default());
    let pause: PauseAction = use_action_toast(
        |(queue, pause): (String, bool)| async move {
            let result = if queue == REEMBEDDING {
                set_reembed_paused(pause).await
            } else if pause {
                pause_queue(queue.clone()).await
            } else {
                resume_queue(queue.clone()).await
            };
            (queue, pause, result)
        },
        |(queue, paused, result)| pause_toast(queue, *paused, result),
        move |_| {
            question.0.set(None);
            again();
        },
    );
    let retry = RetryFailed(use_action_toast(
        |()| retry_reembeds(),
        retry_toast,
        move |_| again(),
    ));
    provide_context(retry);
    view! {
        <Title text="Admin" />
        <AdminGate>
            <Dashboard since data pause sort />
        </AdminGate>
    }
}

#[component]
fn Dashboard(
    since: RwSignal<u64>,
    data: DataResource,
    pause: PauseAction,
    sort: RwSignal<TenantSort>,
) -> impl IntoView {
    let range_button = move |secs: u64, label: &'static str| {
        view! {
            <button
                class="seg-btn"
                aria-pressed=move || (since.get() == secs).to_string()
                on:click=move |_| since.set(secs)
            >
                {label}
            </button>
        }
    };
    view! {
        <div class="page-head row">
            <h1>"Operations"</h1>
            <div class="segmented" role="group" aria-label="Chart range">
                {range_button(3600, "Last hour")}
                {range_button(86_400, "Last day")}
            </div>
        </div>
        <Loaded data view=move |d| view! { <DashboardView d pause sort /> } />
    }
}

/// The failure rate of each step, each bar leading to the jobs that failed
/// at that step.
fn step_bars(steps: &[StepStatsDto]) -> Vec<Bar> {
    steps
        .iter()
        .map(|s| {
            let shown = format!("{:.0} %", s.failure_rate * 100.0);
            Bar {
                link: Some(BarLink {
                    href: AdminJobQuery {
                        step: s.step.clone(),
                        ..Default::default()
                    }
                    .url(),
                    label: format!(
                        "{}: {shown} failed. Open the jobs that failed at {}",
                        s.step, s.step
                    ),
                }),
                label: s.step.clone(),
                value: s.failure_rate,
                shown,
                alert: s.failure_rate > 0.1,
            }
        })
        .collect()
}

fn series<'a>(d: &'a DashboardDto, metric: &str, queue: &str) -> Option<&'a SeriesDto> {
    d.series
        .iter()
        .find(|s| s.metric == metric && s.queue == queue)
}

fn lines(d: &DashboardDto, metric: &str, queues: &[&str]) -> Vec<Line> {
    queues
        .iter()
        .enumerate()
        .map(|(i, q)| Line {
            label: (*q).to_string(),
            colour: i,
            points: series(d, metric, q)
                .map(|s| s.points.iter().map(|p| (p.at, p.value)).collect())
                .unwrap_or_default(),
        })
        .collect()
}

#[component]
fn DashboardView(d: DashboardDto, pause: PauseAction, sort: RwSignal<TenantSort>) -> impl IntoView {
    let from = d.now - chrono::Duration::seconds(d.since_s as i64);
    let to = d.now;
    let queues: Vec<&str> = d.stats.queues.iter().map(|q| q.queue.as_str()).collect();
    let depth = lines(&d, "queue_depth", &queues);
    let age = lines(&d, "age_p99_s", &queues);
    let single = |metric: &str, label: &str, colour: usize| {
        vec![Line {
            label: label.to_string(),
            colour,
            points: series(&d, metric, "")
                .map(|s| s.points.iter().map(|p| (p.at, p.value)).collect())
                .unwrap_or_default(),
        }]
    };
    let throughput = single("throughput_per_min", "", 3);
    let failures = single("failures_per_min", "", 4);
    let step_bars = step_bars(&d.stats.steps);
    let retry_bars: Vec<Bar> = d
        .stats
        .retries
        .iter()
        .map(|(k, n)| Bar {
            label: if k == "3" {
                "3+ retries".to_string()
            } else if k == "1" {
                "1 retry".to_string()
            } else {
                format!("{k} retries")
            },
            value: *n as f64,
            shown: n.to_string(),
            alert: false,
            link: None,
        })
        .collect();
    let dead = d.stats.dead_letters;
    let hot = dead > DEAD_LETTER_ALERT;
    let range = if d.since_s > 3600 {
        "last day"
    } else {
        "last hour"
    };
    let now = d.now;
    view! {
        <section class="cards" aria-label="Queues">
            {d.stats.queues.iter().cloned().map(|q| view! { <QueueCard q pause /> }).collect_view()}
            <a
                href="/admin/dead-letters"
                class=if hot { "card stat-card link-card alert" } else { "card stat-card link-card" }
                aria-label=format!("Dead letters: {dead}. Open the list")
            >
                <h3>"Dead letters"</h3>
                <div class="stat big" role="group" aria-label="Dead letters" data-value=dead.to_string()>
                    <span class="stat-value">{dead}</span>
                </div>
                <span class="muted small">
                    {if hot { "Over 10: investigate →" } else { "Unresolved · open the list →" }}
                </span>
            </a>
            <article class="card stat-card" aria-label="Throughput">
                <h3>"Throughput"</h3>
                <div
                    class="stat big"
                    role="group"
                    aria-label="Jobs done per minute"
                    data-value=format::number(d.stats.throughput_per_min)
                >
                    <span class="stat-value">
                        {if d.stats.throughput_per_min < 1.0 {
                            format!("{:.2}", d.stats.throughput_per_min)
                        } else {
                            format!("{:.1}", d.stats.throughput_per_min)
                        }}
                    </span>
                    <span class="stat-unit">"jobs/min"</span>
                </div>
                <span class="muted small">"Average over the last hour"</span>
            </article>
            <DependencyCards deps=d.stats.dependencies.clone() />
            {d.stats
                .reembed
                .clone()
                .filter(|r| r.finished_at.is_none_or(|at| now - at < chrono::Duration::days(1)))
                .map(|r| view! { <ReembedCard r pause /> })}
        </section>
        <h2>{format!("Trends, {range}")}</h2>
        <section class="charts" aria-label="Charts">
            <LineChart title="Queue depth".into() lines=depth from to />
            <LineChart title="Job age P99".into() unit=" s" lines=age from to />
            <LineChart title="Throughput (jobs/min)".into() lines=throughput from to />
            <LineChart title="Step failures per minute".into() lines=failures from to />
        </section>
        <h2>"Last hour"</h2>
        <section class="charts" aria-label="Failures and retries">
            <BarChart title="Failure rate per step".into() bars=step_bars max=1.0 />
            <BarChart title="Retries per finished job".into() bars=retry_bars />
        </section>
        <h2>"Tenants"</h2>
        <TenantTable tenants=d.stats.tenants.clone() sort />
        <h2>"Workers"</h2>
        {if d.workers.is_empty() {
            view! { <p class="empty">"No worker has sent a heartbeat in the last 30 s."</p> }.into_any()
        } else {
            view! {
                <div class="table-wrap">
                    <table class="table">
                        <thead>
                            <tr>
                                <th scope="col">"Worker"</th>
                                <th scope="col">"Queues"</th>
                                <th scope="col">"Last heartbeat"</th>
                                <th scope="col">"Up"</th>
                                <th scope="col">"Running jobs"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {d
                                .workers
                                .iter()
                                .map(|w| {
                                    view! {
                                        <tr>
                                            <th scope="row">
                                                <span class="mono">{w.hostname.clone()}</span>
                                                <span class="muted small">{format!(" pid {}", w.pid)}</span>
                                            </th>
                                            <td>{w.queues.clone()}</td>
                                            <td>
                                                {format!(
                                                    "{} ago",
                                                    format::age_s(format::seconds_between(w.heartbeat_at, now)),
                                                )}
                                            </td>
                                            <td>{format::age_s(format::seconds_between(w.started_at, now))}</td>
                                            <td>
                                                {if w.running_jobs.is_empty() {
                                                    view! { <span class="muted">"idle"</span> }.into_any()
                                                } else {
                                                    w.running_jobs
                                                        .iter()
                                                        .map(|j| {
                                                            view! {
                                                                <a class="mono chip" href=format!("/jobs/{j}")>
                                                                    {super::jobs::short_id(j).to_string()}
                                                                </a>
                                                            }
                                                        })
                                                        .collect_view()
                                                        .into_any()
                                                }}
                                            </td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                </div>
            }
                .into_any()
        }}
    }
}

/// Every tenant's unfinished jobs, jobs done and failed in the last hour,
/// dead letters and share of the backlog; a click on a header sorts by
/// that column (again: the other way). Each tenant links to its jobs.
#[component]
fn TenantTable(tenants: Vec<TenantStatsDto>, sort: RwSignal<TenantSort>) -> impl IntoView {
    if tenants.is_empty() {
        return view! { <p class="empty">"No tenants yet."</p> }.into_any();
    }
    // A plain list, not a StoredValue: a click on a header of a stale table
    // (shown while a refresh replaces it, its owner already disposed,
    // leptos#4350) changes the page's `sort`, which runs `rows` below again.
    let header = move |column: TenantColumn| {
        let aria_sort = move || {
            let s = sort.get();
            match (s.by == column, s.descending) {
                (false, _) => "none",
                (true, true) => "descending",
                (true, false) => "ascending",
            }
        };
        let numeric = column != TenantColumn::Tenant;
        view! {
            <th scope="col" aria-sort=aria_sort class:num=numeric>
                <button class="sort-btn" on:click=move |_| sort.update(|s| *s = s.clicked(column))>
                    {column.label()}
                    <span class="sort-mark" aria-hidden="true">
                        {move || match aria_sort() {
                            "descending" => "▼",
                            "ascending" => "▲",
                            _ => "",
                        }}
                    </span>
                </button>
            </th>
        }
    };
    let rows = move || {
        sorted_tenants(tenants.clone(), sort.get())
            .into_iter()
            .map(|t| {
                let link = AdminJobQuery {
                    tenant: t.tenant.clone(),
                    ..Default::default()
                }
                .url();
                let share = format::percent(t.backlog_share);
                let width = format!("width: {:.1}%", (t.backlog_share * 100.0).clamp(0.0, 100.0));
                view! {
                    <tr data-tenant=t.tenant.clone()>
                        <th scope="row">
                            <a href=link aria-label=format!("Jobs of {}", t.tenant)>{t.tenant.clone()}</a>
                            <span class="muted small">{format!(" {}", t.plan)}</span>
                        </th>
                        <td class="num">{t.unfinished}</td>
                        <td class="num">{t.done}</td>
                        <td class="num">{t.failed}</td>
                        <td class="num">{t.dead_letters}</td>
                        <td class="num" data-value=t.backlog_share.to_string()>
                            <span class="share">
                                <span class="share-bar" aria-hidden="true">
                                    <span style=width></span>
                                </span>
                                {share}
                            </span>
                        </td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <div class="table-wrap">
            <table class="table tenants" aria-label="Tenants">
                <thead>
                    <tr>{TenantColumn::ALL.into_iter().map(header).collect_view()}</tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        <p class="muted small">"Done and failed: last hour. Unfinished: pending, processing or retrying now."</p>
    }
    .into_any()
}

/// One card per dependency behind a circuit breaker; nothing when there is none.
#[component]
fn DependencyCards(deps: Vec<DependencyDto>) -> impl IntoView {
    deps.into_iter()
        .map(|dep| view! { <DependencyCard dep /> })
        .collect_view()
}

/// `12 jobs waiting`.
fn waiting_jobs(n: i64) -> String {
    if n == 1 {
        "1 job waiting".to_string()
    } else {
        format!("{n} jobs waiting")
    }
}

/// "up", or "down" in red with the jobs waiting for it, when its breaker
/// probes it next, and the failure that opened the breaker.
#[component]
fn DependencyCard(dep: DependencyDto) -> impl IntoView {
    let title = format::capitalised(&dep.label);
    let up = dep.up;
    let state = if up { "up" } else { "down" };
    let detail = if up {
        view! { <span class="muted small">"Circuit breaker closed"</span> }.into_any()
    } else {
        let probe = dep.next_probe_at.map(|t| {
            view! {
                " · next probe at "
                <time datetime=t.to_rfc3339() title=format::date_time(t)>{format::time(t)}</time>
            }
        });
        let error = dep.error.map(|e| {
            view! {
                <p class="small dependency-error" title=e.clone()>
                    {format::truncated(&e, DEPENDENCY_ERROR_CHARS)}
                </p>
            }
        });
        view! {
            <p class="small">{waiting_jobs(dep.waiting_jobs)} {probe}</p>
            {error}
        }
        .into_any()
    };
    view! {
        <article
            class=if up { "card stat-card dependency-card" } else { "card stat-card dependency-card alert" }
            aria-label=title.clone()
            data-dependency=dep.name
            data-up=up.to_string()
        >
            <h3>{title.clone()}</h3>
            <div class="stat big" role="group" aria-label="Status" data-value=state>
                <span class="stat-value">{state}</span>
            </div>
            {detail}
        </article>
    }
}

/// A labelled number of a card; `value` is what tests and tools read.
fn stat(label: &'static str, value: String, shown: String) -> impl IntoView {
    view! {
        <div class="stat" role="group" aria-label=label data-value=value>
            <span class="stat-label" aria-hidden="true">{label}</span>
            <span class="stat-value">{shown}</span>
        </div>
    }
}

/// The re-embedding after a model change: documents done of all, the rate
/// and when it ends at that rate, failures, and the button that pauses or
/// resumes it; "Finished" once the earlier vectors are gone.
#[component]
fn ReembedCard(r: ReembedDto, pause: PauseAction) -> impl IntoView {
    let finished = r.finished_at.is_some();
    let paused = r.paused && !finished;
    let share = if r.total > 0 {
        r.done as f64 / r.total as f64
    } else {
        1.0
    };
    let ends = match r.finished_at {
        Some(at) => format!("Finished at {}", format::time(at)),
        None if paused => "Paused".to_string(),
        None => format::eta(r.pending, r.eta_s).replace("Clears", "Ends"),
    };
    let (label, title) = if paused {
        ("Resume", "Workers take documents to re-embed again")
    } else {
        (
            "Pause",
            "Workers finish the document in hand and take no further one",
        )
    };
    let act = may_act() && !finished;
    let class = if r.failed > 0 {
        "card queue-card reembed-card warn"
    } else if paused {
        "card queue-card reembed-card paused"
    } else {
        "card queue-card reembed-card"
    };
    view! {
        <article
            class=class
            aria-label="Re-embedding"
            data-paused=paused.to_string()
            data-finished=finished.to_string()
        >
            <h3>
                <span>
                    "Re-embedding"
                    {paused.then(|| view! { " " <span class="badge paused">"Paused"</span> })}
                </span>
                <span class="muted small mono">{format!("{} → {}", r.from.join(", "), r.model)}</span>
            </h3>
            <div class="stats">
                {stat("Done", r.done.to_string(), r.done.to_string())}
                {stat("Left", r.pending.to_string(), r.pending.to_string())}
                {stat("Failed", r.failed.to_string(), r.failed.to_string())}
            </div>
            <p class="small reembed-rate" data-rate=format!("{:.1}", r.rate_per_min)>
                {format!(
                    "{} of {} documents · {:.1} per minute",
                    r.done,
                    r.total,
                    r.rate_per_min,
                )}
            </p>
            <div
                class="bar"
                role="progressbar"
                aria-label="Documents re-embedded"
                aria-valuemin="0"
                aria-valuemax=r.total.to_string()
                aria-valuenow=r.done.to_string()
            >
                <span class="bar-fill" style=format!("width: {:.1}%", share * 100.0)></span>
            </div>
            <div class="queue-actions">
                <p class="queue-eta" data-eta-s=r.eta_s.map(|s| format!("{s:.0}")).unwrap_or_else(|| "null".into())>
                    {ends}
                </p>
                {(act && r.failed > 0)
                    .then(use_context::<RetryFailed>)
                    .flatten()
                    .map(|retry| {
                        let failed = r.failed;
                        view! {
                            <button
                                class="btn small"
                                title="Re-embed them again once their cause is fixed"
                                disabled=move || retry.0.pending().get()
                                on:click=move |_| {
                                    retry.0.dispatch(());
                                }
                            >
                                {format!("Retry {failed} failed")}
                            </button>
                        }
                    })}
                {act.then(|| view! {
                    <button
                        class="btn small"
                        aria-label=format!("{label} re-embedding")
                        title=title
                        disabled=move || pause.pending().get()
                        on:click=move |_| {
                            pause.dispatch((REEMBEDDING.to_string(), !paused));
                        }
                    >
                        {label}
                    </button>
                })}
            </div>
        </article>
    }
}

/// A queue's numbers, a "Paused" badge while it is paused, and the button
/// that pauses or resumes it. A paused queue has no consumers on purpose,
/// so it is not marked as missing them.
#[component]
fn QueueCard(q: QueueStatsDto, pause: PauseAction) -> impl IntoView {
    let depth = q.depth.map(|d| d.to_string()).unwrap_or_else(|| "?".into());
    let consumers = q
        .consumers
        .map(|d| d.to_string())
        .unwrap_or_else(|| "?".into());
    let paused = q.paused;
    // Its oldest unfinished job has waited past `DOCFLOW_AGE_WARN`.
    let old = q.age_warn_s > 0.0 && q.oldest_age_s > q.age_warn_s;
    let class = if paused {
        "card queue-card paused"
    } else if q.consumers == Some(0) || old {
        "card queue-card warn"
    } else {
        "card queue-card"
    };
    let (label, title) = if paused {
        ("Resume", "Workers take this queue's jobs again")
    } else {
        (
            "Pause",
            "Workers stop taking new jobs from this queue; running jobs finish",
        )
    };
    let queue = q.queue.clone();
    let question = use_context::<PauseQuestion>().unwrap_or(PauseQuestion(RwSignal::new(None)));
    let asks_first = !paused && pause_asks_first(&q.queue);
    let asking = {
        let queue = queue.clone();
        move || {
            question
                .0
                .with(|asked| asked.as_deref() == Some(queue.as_str()))
        }
    };
    // The question (`Confirm`) takes the focus on "Keep running"; Escape
    // answers it, and the focus returns to the Pause button that asked.
    let asker = NodeRef::<leptos::html::Button>::new();
    // A viewer sees the queue's state, not its button.
    let act = may_act();
    let backlog = q.pending + q.processing + q.retrying;
    let eta = format::eta(backlog, q.eta_s);
    let stalled = backlog > 0 && q.eta_s.is_none();
    view! {
        <article
            class=class
            aria-label=format!("Queue {}", q.queue)
            data-paused=paused.to_string()
            data-old=old.to_string()
        >
            <h3>
                <span>
                    <a
                        class="mono"
                        href=AdminJobQuery { queue: q.queue.clone(), ..Default::default() }.url()
                        title=format!("Jobs of queue {}", q.queue)
                    >
                        {q.queue.clone()}
                    </a>
                    {paused.then(|| view! { " " <span class="badge paused">"Paused"</span> })}
                </span>
                <span class="muted small">{format!(" {} pending · {} retrying", q.pending, q.retrying)}</span>
            </h3>
            <div class="stats">
                {stat("Depth", depth.clone(), depth)}
                {stat("Unacked", q.unacked.to_string(), q.unacked.to_string())}
                {stat("Consumers", consumers.clone(), consumers)}
                {stat("Age P99", format!("{:.1}", q.age_p99_s), format::age_s(q.age_p99_s))}
                {stat("Oldest", format!("{:.1}", q.oldest_age_s), format::age_s(q.oldest_age_s))}
            </div>
            {old
                .then(|| {
                    view! {
                        <p class="queue-old">
                            {format!(
                                "Oldest job waiting over {}",
                                format::age_s(q.age_warn_s),
                            )}
                        </p>
                    }
                })}
            <div class="queue-actions">
                <p
                    class=if stalled { "queue-eta stalled" } else { "queue-eta" }
                    data-eta-s=q.eta_s.map(|s| format!("{s:.0}")).unwrap_or_else(|| "null".into())
                    title="At the rate jobs of this queue ended in the last five minutes, \
                           a document being parsed counted by its pages read"
                >
                    {eta}
                    {(q.pages_total > 0).then(|| view! {
                        <span class="muted small queue-pages">
                            {format!(" · parsing {}/{} pages", q.pages_parsed, q.pages_total)}
                        </span>
                    })}
                </p>
                {act.then(|| view! {
                <button
                    class="btn small"
                    aria-label=format!("{label} queue {}", q.queue)
                    title=title
                    node_ref=asker
                    disabled=move || pause.pending().get()
                    on:click={
                        let queue = queue.clone();
                        move |_| {
                            if asks_first {
                                question.0.set(Some(queue.clone()));
                            } else {
                                pause.dispatch((queue.clone(), !paused));
                            }
                        }
                    }
                >
                    {label}
                </button>
                })}
            </div>
            {move || {
                asking()
                    .then(|| {
                        let queue = queue.clone();
                        let yes = queue.clone();
                        view! {
                            <Confirm
                                label=format!("Confirm pausing queue {queue}")
                                question=format!(
                                    "Pause {queue}? Paying tenants' new uploads wait until it is resumed; running jobs finish.",
                                )
                                yes=format!("Pause {queue}")
                                no="Keep running"
                                danger=true
                                busy=pause.pending()
                                on_yes=Callback::new(move |_| {
                                    pause.dispatch((yes.clone(), true));
                                })
                                on_no=Callback::new(move |_| {
                                    question.0.set(None);
                                    // The question and its buttons are gone:
                                    // the focus returns to the Pause button.
                                    #[cfg(feature = "hydrate")]
                                    if let Some(b) = asker.get_untracked() {
                                        let _ = b.focus();
                                    }
                                })
                            />
                        }
                    })
            }}
        </article>
    }
}

/// Rendering to HTML needs the `ssr` feature (`cargo test --workspace` turns
/// it on through `server`; alone: `cargo test -p app --features ssr`).
#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn embedder(up: bool) -> DependencyDto {
        DependencyDto {
            name: "embedder".into(),
            label: "embedding provider".into(),
            up,
            waiting_jobs: if up { 0 } else { 12 },
            next_probe_at: (!up).then(|| {
                chrono::Utc
                    .with_ymd_and_hms(2026, 12, 1, 14, 3, 22)
                    .single()
                    .expect("a valid time")
            }),
            error: (!up).then(|| format!("embedding endpoint unavailable: {}", "x".repeat(300))),
        }
    }

    #[test]
    fn a_down_dependency_is_red_and_says_what_waits_and_when_it_is_probed() {
        let html = view! { <DependencyCard dep=embedder(false) /> }.to_html();
        assert!(
            html.contains(r#"class="card stat-card dependency-card alert""#),
            "{html}"
        );
        assert!(
            html.contains(r#"aria-label="Embedding provider""#),
            "{html}"
        );
        assert!(html.contains(r#"data-dependency="embedder""#), "{html}");
        assert!(html.contains(r#"data-up="false""#), "{html}");
        assert!(html.contains(r#"data-value="down""#), "{html}");
        assert!(html.contains("12 jobs waiting"), "{html}");
        assert!(html.contains("next probe at"), "{html}");
        assert!(html.contains(">14:03:22</time>"), "{html}");
        assert!(
            html.contains("embedding endpoint unavailable: xxx"),
            "{html}"
        );
        // The card shows the start of a long error; the tooltip has all of it.
        assert!(html.contains(&format!("{}…", "x".repeat(10))), "{html}");
        assert!(
            !html.contains(&format!(
                ">embedding endpoint unavailable: {}<",
                "x".repeat(300)
            )),
            "{html}"
        );
    }

    fn queue(paused: bool) -> QueueStatsDto {
        QueueStatsDto {
            queue: "normal".into(),
            depth: Some(20),
            unacked: 0,
            consumers: Some(0),
            pending: 20,
            processing: 0,
            retrying: 0,
            age_p99_s: 3.0,
            oldest_age_s: 4.0,
            paused,
            eta_s: None,
            pages_parsed: 0,
            pages_total: 0,
            age_warn_s: 300.0,
        }
    }

    /// A queue card as HTML; its action needs a reactive owner to live in.
    fn card(q: QueueStatsDto) -> String {
        Owner::new().with(|| {
            provide_context(crate::components::layout::MayAct(true));
            let pause: PauseAction = Action::new(|(queue, pause): &(String, bool)| {
                let (queue, pause) = (queue.clone(), *pause);
                async move { (queue, pause, Ok(())) }
            });
            view! { <QueueCard q pause /> }.to_html()
        })
    }

    fn queue_card(paused: bool) -> String {
        card(queue(paused))
    }

    #[test]
    fn a_paused_queue_shows_the_badge_and_resume_and_is_not_short_of_consumers() {
        let html = queue_card(true);
        assert!(html.contains(r#"class="card queue-card paused""#), "{html}");
        assert!(html.contains(r#"data-paused="true""#), "{html}");
        assert!(
            html.contains(r#"<span class="badge paused">Paused</span>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"aria-label="Resume queue normal""#),
            "{html}"
        );
        assert!(!html.contains("Pause queue"), "{html}");
    }

    #[test]
    fn a_running_queue_offers_pause_and_warns_without_consumers() {
        let html = queue_card(false);
        assert!(html.contains(r#"class="card queue-card warn""#), "{html}");
        assert!(html.contains(r#"data-paused="false""#), "{html}");
        assert!(!html.contains("badge paused"), "{html}");
        assert!(
            html.contains(r#"aria-label="Pause queue normal""#),
            "{html}"
        );
    }

    #[test]
    fn a_viewer_sees_a_queue_card_without_its_pause_button() {
        let html = Owner::new().with(|| {
            provide_context(crate::components::layout::MayAct(false));
            let pause: PauseAction = Action::new(|(queue, pause): &(String, bool)| {
                let (queue, pause) = (queue.clone(), *pause);
                async move { (queue, pause, Ok(())) }
            });
            view! { <QueueCard q=queue(true) pause /> }.to_html()
        });
        assert!(html.contains(r#"data-paused="true""#), "{html}");
        assert!(!html.contains("<button"), "{html}");
        assert!(queue_card(true).contains("<button"));
    }

    #[test]
    fn a_queue_card_links_to_its_jobs_and_warns_when_its_oldest_job_is_too_old() {
        let aged = |oldest_age_s: f64| {
            card(QueueStatsDto {
                consumers: Some(2),
                oldest_age_s,
                ..queue(false)
            })
        };
        let young = aged(299.0);
        assert!(
            young.contains(r#"href="/admin/jobs?queue=normal""#),
            "{young}"
        );
        assert!(young.contains(r#"class="card queue-card""#), "{young}");
        assert!(young.contains(r#"data-old="false""#), "{young}");
        let old = aged(301.0);
        assert!(old.contains(r#"class="card queue-card warn""#), "{old}");
        assert!(old.contains(r#"data-old="true""#), "{old}");
        assert!(old.contains("Oldest job waiting over"), "{old}");
    }

    #[test]
    fn a_queue_card_says_when_its_backlog_clears_or_that_it_does_not_drain() {
        let html = queue_card(false);
        assert!(html.contains(r#"class="queue-eta stalled""#), "{html}");
        assert!(html.contains(r#"data-eta-s="null""#), "{html}");
        assert!(html.contains(">Not draining<"), "{html}");
        let html = card(QueueStatsDto {
            eta_s: Some(240.0),
            ..queue(false)
        });
        assert!(html.contains(r#"class="queue-eta""#), "{html}");
        assert!(html.contains(r#"data-eta-s="240""#), "{html}");
        assert!(html.contains(">Clears in about 4 min<"), "{html}");
        assert!(!html.contains("parsing"), "{html}");
    }

    #[test]
    fn a_queue_card_shows_the_pages_read_of_documents_being_parsed() {
        let html = card(QueueStatsDto {
            eta_s: Some(900.0),
            pages_parsed: 120,
            pages_total: 300,
            ..queue(false)
        });
        assert!(html.contains("Clears in about 15 min"), "{html}");
        assert!(html.contains(" · parsing 120/300 pages"), "{html}");
    }

    fn tenant(slug: &str, unfinished: i64, done: i64, dead_letters: i64) -> TenantStatsDto {
        TenantStatsDto {
            tenant: slug.into(),
            plan: "free".into(),
            unfinished,
            done,
            failed: 0,
            dead_letters,
            backlog_share: unfinished as f64 / 10.0,
        }
    }

    #[test]
    fn tenants_sort_by_the_clicked_column_and_a_second_click_turns_the_order() {
        let rows = vec![
            tenant("globex", 6, 1, 0),
            tenant("acme", 3, 9, 2),
            tenant("initech", 1, 4, 1),
            tenant("hooli", 0, 4, 0),
        ];
        let order = |sort: TenantSort| -> Vec<String> {
            sorted_tenants(rows.clone(), sort)
                .into_iter()
                .map(|t| t.tenant)
                .collect()
        };
        let sort = TenantSort::default();
        assert_eq!(order(sort), ["globex", "acme", "initech", "hooli"]);
        let sort = sort.clicked(TenantColumn::Tenant);
        assert_eq!(sort.by, TenantColumn::Tenant);
        assert_eq!(order(sort), ["acme", "globex", "hooli", "initech"]);
        let sort = sort.clicked(TenantColumn::Tenant);
        assert_eq!(order(sort), ["initech", "hooli", "globex", "acme"]);
        // Numbers: largest first, ties by name.
        let sort = sort.clicked(TenantColumn::Done);
        assert_eq!(order(sort), ["acme", "hooli", "initech", "globex"]);
        let sort = sort.clicked(TenantColumn::Done);
        assert_eq!(order(sort), ["globex", "hooli", "initech", "acme"]);
        let sort = sort.clicked(TenantColumn::DeadLetters);
        assert_eq!(order(sort), ["acme", "initech", "globex", "hooli"]);
        let sort = sort.clicked(TenantColumn::Share);
        assert_eq!(order(sort), ["globex", "acme", "initech", "hooli"]);
    }

    #[test]
    fn each_tenant_links_to_its_jobs_and_the_sorted_column_is_announced() {
        let html = Owner::new().with(|| {
            let sort = RwSignal::new(TenantSort::default());
            let tenants = vec![tenant("acme", 3, 9, 2), tenant("globex", 6, 1, 0)];
            view! { <TenantTable tenants sort /> }.to_html()
        });
        assert!(
            html.contains(r#"href="/admin/jobs?tenant=globex""#),
            "{html}"
        );
        assert!(html.contains(r#"aria-label="Jobs of acme""#), "{html}");
        assert!(html.contains(r#"aria-sort="descending""#), "{html}");
        assert!(html.contains("60 %"), "{html}");
        // globex (6 unfinished) comes first.
        let globex = html.find(r#"data-tenant="globex""#).expect("globex row");
        let acme = html.find(r#"data-tenant="acme""#).expect("acme row");
        assert!(globex < acme, "{html}");
    }

    #[test]
    fn each_steps_failure_bar_links_to_the_jobs_that_failed_at_that_step() {
        let steps: Vec<StepStatsDto> = [("parse", 0.0), ("embed", 0.25)]
            .into_iter()
            .map(|(step, failure_rate)| StepStatsDto {
                step: step.into(),
                attempts: 8,
                failures: (failure_rate * 8.0) as i64,
                failure_rate,
            })
            .collect();
        let bars = step_bars(&steps);
        let html =
            view! { <BarChart title="Failure rate per step".into() bars max=1.0 /> }.to_html();
        assert!(html.contains(r#"href="/admin/jobs?step=embed""#), "{html}");
        assert!(
            html.contains(r#"aria-label="embed: 25 % failed. Open the jobs that failed at embed""#),
            "{html}"
        );
        // A step without failures links too: its list says none failed.
        assert!(html.contains(r#"href="/admin/jobs?step=parse""#), "{html}");
        assert!(html.contains(r#"class="col alert""#), "{html}");
    }

    #[test]
    fn the_toast_says_what_a_pause_does_and_what_failed() {
        let (text, kind) = pause_toast("normal", true, &Ok(()));
        assert_eq!(kind, ToastKind::Ok);
        assert!(text.contains("running jobs finish"), "{text}");
        let (text, kind) = pause_toast("slow", false, &Err(AppError::Forbidden));
        assert_eq!(kind, ToastKind::Bad);
        assert!(text.starts_with("Resuming slow failed"), "{text}");
    }

    #[test]
    fn an_up_dependency_is_a_plain_card_and_no_dependencies_render_nothing() {
        let html = view! { <DependencyCard dep=embedder(true) /> }.to_html();
        assert!(
            html.contains(r#"class="card stat-card dependency-card""#),
            "{html}"
        );
        assert!(html.contains(r#"data-up="true""#), "{html}");
        assert!(html.contains(r#"data-value="up""#), "{html}");
        assert!(!html.contains("waiting"), "{html}");
        let none = view! { <DependencyCards deps=Vec::new() /> }.to_html();
        assert!(!none.contains("card"), "{none}");
        assert_eq!(waiting_jobs(1), "1 job waiting");
    }

    fn reembed(done: i64, pending: i64, failed: i64) -> ReembedDto {
        ReembedDto {
            model: "all-minilm-l6-v2".into(),
            from: vec!["docflow-local-hash".into()],
            total: done + pending + failed,
            done,
            failed,
            pending,
            rate_per_min: 30.0,
            eta_s: (pending > 0).then_some(pending as f64 * 2.0),
            paused: false,
            started_at: chrono::Utc::now(),
            finished_at: None,
        }
    }

    fn reembed_card(r: ReembedDto, may_act: bool) -> String {
        Owner::new().with(|| {
            provide_context(crate::components::layout::MayAct(may_act));
            provide_context(RetryFailed(Action::new(|_: &()| async { Ok(0) })));
            let pause: PauseAction = Action::new(|(queue, pause): &(String, bool)| {
                let (queue, pause) = (queue.clone(), *pause);
                async move { (queue, pause, Ok(())) }
            });
            view! { <ReembedCard r pause /> }.to_html()
        })
    }

    #[test]
    fn the_reembedding_card_shows_progress_rate_and_when_it_ends() {
        let html = reembed_card(reembed(150, 50, 0), true);
        assert!(
            html.contains("docflow-local-hash → all-minilm-l6-v2"),
            "{html}"
        );
        assert!(
            html.contains("150 of 200 documents · 30.0 per minute"),
            "{html}"
        );
        assert!(
            html.contains(r#"aria-label="Left" data-value="50""#),
            "{html}"
        );
        assert!(html.contains(r#"aria-valuenow="150""#), "{html}");
        assert!(html.contains("width: 75.0%"), "{html}");
        assert!(html.contains("Ends in about 2 min"), "{html}");
        assert!(html.contains("Pause re-embedding"), "{html}");
        assert!(!html.contains(" warn"), "no failure, no warning: {html}");

        let failed = reembed_card(reembed(150, 40, 10), true);
        assert!(failed.contains("reembed-card warn"), "{failed}");
        assert!(failed.contains("Retry 10 failed"), "{failed}");
        assert!(
            !html.contains("Retry"),
            "nothing failed, nothing to retry: {html}"
        );
        assert_eq!(retry_toast(&Ok(3)).0, "3 documents are re-embedded again.");

        let paused = reembed_card(
            ReembedDto {
                paused: true,
                ..reembed(10, 5, 0)
            },
            true,
        );
        assert!(paused.contains(r#"data-paused="true""#), "{paused}");
        assert!(paused.contains("Resume re-embedding"), "{paused}");

        let finished = reembed_card(
            ReembedDto {
                finished_at: Some(chrono::Utc::now()),
                eta_s: None,
                ..reembed(200, 0, 0)
            },
            true,
        );
        assert!(finished.contains("Finished at"), "{finished}");
        assert!(
            !finished.contains("<button"),
            "nothing left to pause: {finished}"
        );

        let viewer = reembed_card(reembed(150, 50, 0), false);
        assert!(
            !viewer.contains("<button"),
            "a viewer sees no button: {viewer}"
        );
    }
}
