//! `/admin/audit`: every action taken through the controls (re-enqueues,
//! discards, cancels, retries, deletions, queue pauses), newest first,
//! filtered by who acted, by action and by how recent (kept in the URL). A target that
//! leads to a job shows its file name, linked to the job's page; the
//! detail is a sentence, not the stored JSON.

use leptos::prelude::*;
use leptos_meta::Title;
use serde_json::Value;

use crate::{
    api::admin::audit,
    components::{
        filters::{choices, pick_into, since_options, FilterBar, FilterSelect},
        layout::AdminGate,
        loaded::Loaded,
    },
    dto::{AuditEntryDto, AuditPage, AuditQuery},
    error::AppError,
    format,
    url::{use_url_query, UrlQuery},
};

type PageResource = Resource<Result<AuditPage, AppError>>;

impl UrlQuery for AuditQuery {
    const PATH: &'static str = "/admin/audit";

    fn first_page(&mut self) {
        self.before = None;
    }
}

fn given(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// A JSON value as plain words: strings without quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

/// What a bulk action's filter selected: `state pending, tenant globex,
/// filename containing “memo”, failed at embed, enqueued in the last 24h`.
fn filter_words(d: &Value) -> String {
    let mut parts = Vec::new();
    for (key, words) in [("state", "state"), ("queue", "queue"), ("tenant", "tenant")] {
        if let Some(v) = d[key].as_str().filter(|v| !v.is_empty()) {
            parts.push(format!("{words} {v}"));
        }
    }
    if let Some(q) = d["q"].as_str().filter(|v| !v.is_empty()) {
        parts.push(format!("filename containing “{q}”"));
    }
    if let Some(step) = d["step"].as_str().filter(|v| !v.is_empty()) {
        parts.push(format!("failed at {step}"));
    }
    if let Some(since) = d["since"].as_str().filter(|v| !v.is_empty()) {
        parts.push(format!("enqueued in the last {since}"));
    }
    if parts.is_empty() {
        "any job".into()
    } else {
        parts.join(", ")
    }
}

/// An entry's detail as a sentence.
fn detail_text(action: &str, d: &Value) -> String {
    let was = d["was"].as_str();
    let changed = d["changed"].as_bool();
    let count = d["count"].as_u64();
    let jobs = |n: u64| {
        if n == 1 {
            "1 job".to_string()
        } else {
            format!("{n} jobs")
        }
    };
    match action {
        "dead_letter.requeue" => {
            "Re-enqueued: its job is pending again, at the step that failed.".into()
        }
        "dead_letter.discard" => "Discarded: its job stays failed.".into(),
        "job.cancel" => match was {
            Some(w) => format!("Cancelled the job while it was {w}."),
            None => "Cancelled the job.".into(),
        },
        "job.retry" => match was {
            Some("retrying") => "Retried the job at once instead of waiting.".into(),
            Some(w) => format!("Retried the job, which was {w}."),
            None => "Retried the job.".into(),
        },
        "document.delete" => "Deleted the document: its file, text and passages.".into(),
        "job.cancel_matching" => format!(
            "Cancelled {} matching {}.",
            jobs(count.unwrap_or(0)),
            filter_words(d)
        ),
        "job.retry_matching" => format!(
            "Retried {} matching {}.",
            jobs(count.unwrap_or(0)),
            filter_words(d)
        ),
        "batch.close" => "Closed the batch to uploads.".into(),
        "batch.cancel" => format!(
            "Cancelled the batch and its {} unfinished.",
            jobs(d["jobs"].as_u64().unwrap_or(0))
        ),
        "batch.retry" => format!(
            "Retried the batch's {}.",
            jobs(d["jobs"].as_u64().unwrap_or(0))
        ),
        "webhook.create" => format!(
            "Registered a webhook to {} for {}.",
            plain(&d["url"]),
            d["events"]
                .as_array()
                .map(|e| e.iter().map(plain).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ),
        "webhook.delete" => format!("Deleted the webhook to {}.", plain(&d["url"])),
        "webhook.redeliver" => "Sent a webhook delivery again.".into(),
        "queue.pause" => match changed {
            Some(false) => "Paused the queue (it was paused already).".into(),
            _ => "Paused the queue: workers take no new jobs from it.".into(),
        },
        "queue.resume" => match changed {
            Some(false) => "Resumed the queue (it was running already).".into(),
            _ => "Resumed the queue: workers take its jobs again.".into(),
        },
        _ => match d.as_object() {
            Some(o) if !o.is_empty() => o
                .iter()
                .map(|(k, v)| format!("{}: {}", k.replace('_', " "), plain(v)))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "—".into(),
        },
    }
}

/// What a target is when it leads to no job: `queue high`, `jobs matching
/// a filter`, or the id as recorded.
fn target_words(e: &AuditEntryDto) -> String {
    match e.action.split_once('.').map(|(noun, _)| noun) {
        Some("queue") => format!("queue {}", e.target),
        _ if e.target == "jobs" => "jobs matching a filter".into(),
        Some("dead_letter") => format!("dead letter {}", e.target),
        _ => e.target.clone(),
    }
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let filters = use_url_query::<AuditQuery>();
    let page: PageResource = Resource::new(
        move || filters.get(),
        |q| audit(q.before, given(&q.actor), given(&q.action), given(&q.since)),
    );
    view! {
        <Title text="Audit log" />
        <AdminGate>
            <Audit page filters />
        </AdminGate>
    }
}

#[component]
fn Audit(page: PageResource, filters: Memo<AuditQuery>) -> impl IntoView {
    view! {
        <div class="page-head">
            <h1>"Audit log"</h1>
            <p class="muted">"Every action taken through the controls, who did it and when."</p>
        </div>
        <Loaded data=page view=move |p| view! { <AuditView page=p filters=filters.get_untracked() current=filters /> } />
    }
}

/// The filters, the entries and the pager of one loaded page.
#[component]
fn AuditView(page: AuditPage, filters: AuditQuery, current: Memo<AuditQuery>) -> impl IntoView {
    let filtered = !(filters.actor.is_empty() && filters.action.is_empty());
    let older = page.next_before.map(|b| {
        AuditQuery {
            before: Some(b),
            ..filters.clone()
        }
        .url()
    });
    view! {
        <Filters filters=filters current actors=page.actors actions=page.actions />
        {if page.entries.is_empty() {
            view! {
                <p class="empty">
                    {if filtered { "No entries match these filters." } else { "No admin actions yet." }}
                </p>
            }
                .into_any()
        } else {
            view! { <Entries entries=page.entries /> }.into_any()
        }}
        {older
            .map(|href| {
                view! {
                    <p class="pager">
                        <a class="btn" href=href>"Older →"</a>
                    </p>
                }
            })}
    }
}

/// Who and what; a change applies at once (the URL keeps it).
#[component]
fn Filters(
    filters: AuditQuery,
    current: Memo<AuditQuery>,
    actors: Vec<String>,
    actions: Vec<String>,
) -> impl IntoView {
    let pick = move |set: fn(&mut AuditQuery, String)| pick_into(current, set);
    let filtered =
        !(filters.actor.is_empty() && filters.action.is_empty() && filters.since.is_empty());
    view! {
        <FilterBar action=AuditQuery::PATH reset="Clear filters" filtered compact=true>
            <FilterSelect
                id="audit-actor"
                name="actor"
                label="Admin"
                options=choices("Anyone", &actors)
                value=filters.actor.clone()
                on_pick=pick(|q, v| q.actor = v)
            />
            <FilterSelect
                id="audit-action"
                name="action"
                label="Action"
                options=choices("Any action", &actions)
                value=filters.action.clone()
                on_pick=pick(|q, v| q.action = v)
            />
            <FilterSelect
                id="audit-since"
                name="since"
                label="When"
                options=since_options(&filters.since)
                value=filters.since.clone()
                on_pick=pick(|q, v| q.since = v)
            />
        </FilterBar>
    }
}

#[component]
fn Entries(entries: Vec<AuditEntryDto>) -> impl IntoView {
    view! {
        <div class="table-wrap">
            <table class="table audit">
                <thead>
                    <tr>
                        <th scope="col">"When"</th>
                        <th scope="col">"Who"</th>
                        <th scope="col">"Action"</th>
                        <th scope="col">"Target"</th>
                        <th scope="col">"Detail"</th>
                    </tr>
                </thead>
                <tbody>
                    {entries
                        .into_iter()
                        .map(|e| {
                            let target = match (&e.job_id, &e.filename) {
                                (Some(job), Some(name)) => {
                                    view! {
                                        <a href=format!("/jobs/{job}")>{name.clone()}</a>
                                        <span class="target-id mono small muted">{e.target.clone()}</span>
                                    }
                                        .into_any()
                                }
                                _ => view! { <span class="small">{target_words(&e)}</span> }.into_any(),
                            };
                            view! {
                                <tr>
                                    <td class="nowrap">
                                        <time datetime=e.at.to_rfc3339()>{format::date_time(e.at)}</time>
                                    </td>
                                    <td class="actor">{e.actor.clone()}</td>
                                    <th scope="row"><span class="chip">{e.action.clone()}</span></th>
                                    <td class="target">{target}</td>
                                    <td class="detail">{detail_text(&e.action, &e.detail)}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_action_reads_as_a_sentence_not_as_json() {
        assert_eq!(
            detail_text("job.cancel", &json!({"was": "processing"})),
            "Cancelled the job while it was processing."
        );
        assert_eq!(
            detail_text(
                "job.cancel_matching",
                &json!({"state": "pending", "queue": null, "tenant": "globex", "q": "memo", "count": 3})
            ),
            "Cancelled 3 jobs matching state pending, tenant globex, filename containing “memo”."
        );
        assert_eq!(
            detail_text(
                "job.retry_matching",
                &json!({"state": null, "step": "embed", "since": "24h", "count": 1})
            ),
            "Retried 1 job matching failed at embed, enqueued in the last 24h."
        );
        assert_eq!(
            detail_text("queue.pause", &json!({"changed": false})),
            "Paused the queue (it was paused already)."
        );
        assert_eq!(
            detail_text("dead_letter.requeue", &json!({"job_id": "0193"})),
            "Re-enqueued: its job is pending again, at the step that failed."
        );
        assert_eq!(
            detail_text(
                "user.invite",
                &json!({"email": "x@y.test", "admin_role": true})
            ),
            "admin role: true, email: x@y.test"
        );
        assert_eq!(detail_text("user.invite", &json!({})), "—");
    }

    #[test]
    fn the_audit_url_keeps_only_the_filters_that_are_set() {
        assert_eq!(AuditQuery::default().url(), "/admin/audit");
        let q = AuditQuery {
            actor: "admin@demo.test".into(),
            action: String::new(),
            since: "24h".into(),
            before: Some(40),
        };
        assert_eq!(
            q.url(),
            "/admin/audit?actor=admin%40demo.test&since=24h&before=40"
        );
    }
}
