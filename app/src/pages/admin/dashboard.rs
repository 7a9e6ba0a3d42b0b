//! `/admin`: per-queue cards, charts over the last hour or day, failure
//! rate per step, the retry distribution, dead letters, throughput and
//! workers, and a card per dependency behind a circuit breaker. The numbers
//! come from the same `stats::collect` as `/api/admin/stats`; the page
//! refreshes them every 5 s without reloading.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::admin::dashboard,
    components::{
        charts::{Bar, BarChart, Line, LineChart},
        layout::AdminGate,
    },
    dto::{DashboardDto, DependencyDto, QueueStatsDto, SeriesDto},
    format,
};

/// Dead letters above this many turn the card red (the alert rule's threshold).
const DEAD_LETTER_ALERT: i64 = 10;

/// How much of a dependency's error the card shows; the rest is in its tooltip.
const DEPENDENCY_ERROR_CHARS: usize = 140;

type DataResource = Resource<Result<DashboardDto, crate::error::AppError>>;

#[component]
pub fn DashboardPage() -> impl IntoView {
    let since = RwSignal::new(3600u64);
    let tick = RwSignal::new(0u64);
    let data: DataResource =
        Resource::new(move || (since.get(), tick.get()), |(s, _)| dashboard(s));
    #[cfg(feature = "hydrate")]
    if let Ok(handle) = set_interval_with_handle(
        move || tick.update(|t| *t += 1),
        std::time::Duration::from_secs(5),
    ) {
        on_cleanup(move || handle.clear());
    }
    view! {
        <Title text="Admin" />
        <AdminGate>
            <Dashboard since data />
        </AdminGate>
    }
}

#[component]
fn Dashboard(since: RwSignal<u64>, data: DataResource) -> impl IntoView {
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
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(d) => view! { <DashboardView d /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
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
fn DashboardView(d: DashboardDto) -> impl IntoView {
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
    let step_bars: Vec<Bar> = d
        .stats
        .steps
        .iter()
        .map(|s| Bar {
            label: s.step.clone(),
            value: s.failure_rate,
            shown: format!("{:.0} %", s.failure_rate * 100.0),
            alert: s.failure_rate > 0.1,
        })
        .collect();
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
            {d.stats.queues.iter().cloned().map(|q| view! { <QueueCard q /> }).collect_view()}
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
                                                                    {j.chars().take(8).collect::<String>()}
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

#[component]
fn QueueCard(q: QueueStatsDto) -> impl IntoView {
    let stat = |label: &'static str, value: String, shown: String| {
        view! {
            <div class="stat" role="group" aria-label=label data-value=value>
                <span class="stat-label" aria-hidden="true">{label}</span>
                <span class="stat-value">{shown}</span>
            </div>
        }
    };
    let depth = q.depth.map(|d| d.to_string()).unwrap_or_else(|| "?".into());
    let consumers = q
        .consumers
        .map(|d| d.to_string())
        .unwrap_or_else(|| "?".into());
    let no_consumers = q.consumers == Some(0);
    view! {
        <article
            class=if no_consumers { "card queue-card warn" } else { "card queue-card" }
            aria-label=format!("Queue {}", q.queue)
        >
            <h3>
                <span class="mono">{q.queue.clone()}</span>
                <span class="muted small">{format!(" {} pending · {} retrying", q.pending, q.retrying)}</span>
            </h3>
            <div class="stats">
                {stat("Depth", depth.clone(), depth)}
                {stat("Unacked", q.unacked.to_string(), q.unacked.to_string())}
                {stat("Consumers", consumers.clone(), consumers)}
                {stat("Age P99", format!("{:.1}", q.age_p99_s), format::age_s(q.age_p99_s))}
                {stat("Oldest", format!("{:.1}", q.oldest_age_s), format::age_s(q.oldest_age_s))}
            </div>
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
}
