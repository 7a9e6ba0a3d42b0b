//! `/admin/audit`: every action taken through the controls (re-enqueues,
//! discards, cancels, retries, deletions, queue pauses), newest first,
//! filtered by who acted, by action and by how recent (kept in the URL). A target that
//! leads to a job shows its file name, linked to the job's page; the
//! detail is a sentence, not the stored JSON.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};
use serde_json::Value;

use crate::{
    api::admin::audit,
    components::layout::AdminGate,
    dto::{AuditEntryDto, AuditPage, AuditQuery},
    error::AppError,
    format,
};

type PageResource = Resource<Result<AuditPage, AppError>>;

/// The time ranges offered, as the URL and the API name them.
const SINCE: [(&str, &str); 3] = [
    ("1h", "Last hour"),
    ("24h", "Last 24 hours"),
    ("7d", "Last 7 days"),
];

fn filters_from(m: &leptos_router::params::ParamsMap) -> AuditQuery {
    AuditQuery {
        actor: m.get("actor").unwrap_or_default(),
        action: m.get("action").unwrap_or_default(),
        since: m.get("since").unwrap_or_default(),
        before: m.get("before").and_then(|b| b.parse::<i64>().ok()),
    }
}

/// The log's address for `q`, without empty parameters.
fn list_url(q: &AuditQuery) -> String {
    let mut parts: Vec<String> = [
        ("actor", &q.actor),
        ("action", &q.action),
        ("since", &q.since),
    ]
    .into_iter()
    .filter(|(_, v)| !v.trim().is_empty())
    .map(|(k, v)| format!("{k}={}", format::encode_query(v.trim())))
    .collect();
    if let Some(b) = q.before {
        parts.push(format!("before={b}"));
    }
    if parts.is_empty() {
        "/admin/audit".into()
    } else {
        format!("/admin/audit?{}", parts.join("&"))
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
    let query = use_query_map();
    let filters = Memo::new(move |_| query.with(filters_from));
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
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) => {
                        let f = filters.get_untracked();
                        let filtered = !(f.actor.is_empty() && f.action.is_empty());
                        view! {
                            <Filters filters=f.clone() current=filters actors=p.actors.clone() actions=p.actions.clone() />
                            {if p.entries.is_empty() {
                                view! {
                                    <p class="empty">
                                        {if filtered { "No entries match these filters." } else { "No admin actions yet." }}
                                    </p>
                                }
                                    .into_any()
                            } else {
                                view! { <Entries entries=p.entries.clone() /> }.into_any()
                            }}
                            {p
                                .next_before
                                .map(|b| {
                                    let older = list_url(&AuditQuery { before: Some(b), ..f.clone() });
                                    view! {
                                        <p class="pager">
                                            <a class="btn" href=older>"Older →"</a>
                                        </p>
                                    }
                                })}
                        }
                            .into_any()
                    }
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
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
    let navigate = use_navigate();
    // A change applies to the filters in the URL now (the page's memo), not
    // to this form's copy: a change on a form that a refetch is replacing
    // (its owner already disposed, leptos#4350) must keep the filter the
    // previous change just set, and must not read a disposed value.
    let apply = move |field: &'static str, value: String| {
        let mut q = current.get_untracked();
        match field {
            "actor" => q.actor = value,
            "since" => q.since = value,
            _ => q.action = value,
        }
        q.before = None;
        navigate(&list_url(&q), Default::default());
    };
    let select = move |field: &'static str,
                       label: &'static str,
                       any: &'static str,
                       options: Vec<(String, String)>,
                       value: String| {
        let id = format!("audit-{field}");
        let apply = apply.clone();
        view! {
            <div class="field">
                <label for=id.clone()>{label}</label>
                <select id=id name=field on:change=move |ev| apply(field, event_target_value(&ev))>
                    <option value="" selected=value.is_empty()>{any}</option>
                    {options
                        .into_iter()
                        .map(|(o, shown)| {
                            let selected = o == value;
                            view! { <option value=o selected=selected>{shown}</option> }
                        })
                        .collect_view()}
                </select>
            </div>
        }
    };
    let filtered =
        !(filters.actor.is_empty() && filters.action.is_empty() && filters.since.is_empty());
    let as_is = |v: Vec<String>| -> Vec<(String, String)> {
        v.into_iter().map(|o| (o.clone(), o)).collect()
    };
    let mut ranges: Vec<(String, String)> = SINCE
        .iter()
        .map(|(v, shown)| (v.to_string(), shown.to_string()))
        .collect();
    // A range typed into the URL (`since=2h`) is shown as it is.
    if !filters.since.is_empty() && !SINCE.iter().any(|(v, _)| *v == filters.since) {
        ranges.push((filters.since.clone(), format!("Last {}", filters.since)));
    }
    view! {
        <form class="filters card compact" aria-label="Filters" method="GET" action="/admin/audit">
            {select("actor", "Admin", "Anyone", as_is(actors), filters.actor.clone())}
            {select("action", "Action", "Any action", as_is(actions), filters.action.clone())}
            {select("since", "When", "Any time", ranges, filters.since.clone())}
            {filtered
                .then(|| {
                    view! {
                        <div class="field buttons">
                            <a class="btn ghost" href="/admin/audit">"Clear filters"</a>
                        </div>
                    }
                })}
        </form>
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
        assert_eq!(list_url(&AuditQuery::default()), "/admin/audit");
        let q = AuditQuery {
            actor: "admin@demo.test".into(),
            action: String::new(),
            since: "24h".into(),
            before: Some(40),
        };
        assert_eq!(
            list_url(&q),
            "/admin/audit?actor=admin%40demo.test&since=24h&before=40"
        );
    }
}
