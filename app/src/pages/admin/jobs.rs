//! `/admin/jobs`: jobs of every tenant, filtered by state, queue, tenant and
//! filename (kept in the URL), newest first, paged by keyset.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Form, hooks::use_query_map};

use crate::{
    api::admin::admin_jobs,
    components::{layout::AdminGate, progress::progress_text},
    dto::{AdminJobQuery, JobPage},
    format,
};

const STATES: [&str; 5] = ["pending", "processing", "retrying", "done", "failed"];
const QUEUES: [&str; 3] = ["high", "normal", "slow"];

type PageResource = Resource<Result<JobPage, crate::error::AppError>>;

fn filters_from(m: &leptos_router::params::ParamsMap) -> AdminJobQuery {
    AdminJobQuery {
        state: m.get("state").unwrap_or_default(),
        queue: m.get("queue").unwrap_or_default(),
        tenant: m.get("tenant").unwrap_or_default(),
        q: m.get("q").unwrap_or_default(),
        before: m.get("before").unwrap_or_default(),
    }
}

#[component]
pub fn AdminJobsPage() -> impl IntoView {
    let query = use_query_map();
    let page: PageResource = Resource::new(move || query.with(filters_from), admin_jobs);
    view! {
        <Title text="All jobs" />
        <AdminGate>
            <AdminJobs page />
        </AdminGate>
    }
}

#[component]
fn AdminJobs(page: PageResource) -> impl IntoView {
    let query = use_query_map();
    let filters = move || query.with(filters_from);
    let select = move |id: &'static str,
                       label: &'static str,
                       options: &'static [&'static str],
                       current: String| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <select id=id name=id>
                    <option value="" selected=current.is_empty()>"Any"</option>
                    {options
                        .iter()
                        .map(|o| view! { <option value=*o selected=current == *o>{*o}</option> })
                        .collect_view()}
                </select>
            </div>
        }
    };
    view! {
        <div class="page-head">
            <h1>"All jobs"</h1>
        </div>
        {move || {
            let f = filters();
            view! {
                <Form method="GET" action="/admin/jobs" attr:class="filters card" attr:aria-label="Filters">
                    {select("state", "State", &STATES, f.state.clone())}
                    {select("queue", "Queue", &QUEUES, f.queue.clone())}
                    <div class="field">
                        <label for="tenant">"Tenant"</label>
                        <input id="tenant" name="tenant" value=f.tenant.clone() placeholder="slug, e.g. acme" />
                    </div>
                    <div class="field grow">
                        <label for="filename">"Filename"</label>
                        <input id="filename" name="q" type="search" value=f.q.clone() placeholder="part of the name" />
                    </div>
                    <div class="field buttons">
                        <button type="submit" class="btn primary">"Apply"</button>
                        <a class="btn ghost" href="/admin/jobs">"Reset"</a>
                    </div>
                </Form>
            }
        }}
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let f = filters();
                match page.await {
                    Ok(p) => view! { <JobsTable page=p filters=f /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

fn page_link(f: &AdminJobQuery, before: &str) -> String {
    let mut parts = Vec::new();
    for (k, v) in [
        ("state", &f.state),
        ("queue", &f.queue),
        ("tenant", &f.tenant),
        ("q", &f.q),
    ] {
        if !v.is_empty() {
            parts.push(format!("{k}={}", encode(v)));
        }
    }
    if !before.is_empty() {
        parts.push(format!("before={}", encode(before)));
    }
    if parts.is_empty() {
        "/admin/jobs".into()
    } else {
        format!("/admin/jobs?{}", parts.join("&"))
    }
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[component]
fn JobsTable(page: JobPage, filters: AdminJobQuery) -> impl IntoView {
    if page.jobs.is_empty() {
        return view! { <p class="empty">"No jobs match these filters."</p> }.into_any();
    }
    let older = page.next_before.as_deref().map(|b| page_link(&filters, b));
    let newest = (!filters.before.is_empty()).then(|| page_link(&filters, ""));
    view! {
        <div class="table-wrap">
            <table class="table">
                <thead>
                    <tr>
                        <th scope="col">"File"</th>
                        <th scope="col">"Tenant"</th>
                        <th scope="col">"Queue"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Progress"</th>
                        <th scope="col">"Attempt"</th>
                        <th scope="col">"Enqueued"</th>
                    </tr>
                </thead>
                <tbody>
                    {page
                        .jobs
                        .iter()
                        .map(|j| {
                            view! {
                                <tr>
                                    <th scope="row"><a href=format!("/jobs/{}", j.id)>{j.filename.clone()}</a></th>
                                    <td>{j.tenant.clone()}</td>
                                    <td class="mono">{j.queue.clone()}</td>
                                    <td><span class=format!("badge {}", j.state)>{j.state.clone()}</span></td>
                                    <td>{progress_text(j)}</td>
                                    <td>{j.attempt}</td>
                                    <td>
                                        <time datetime=j.enqueued_at.to_rfc3339()>{format::date_time(j.enqueued_at)}</time>
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
            page_link(&f, "x"),
            "/admin/jobs?state=failed&q=a%20b.pdf&before=x"
        );
    }
}
