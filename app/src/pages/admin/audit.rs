//! `/admin/audit`: admin actions (re-enqueues, discards), newest first.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

use crate::{api::admin::audit, components::layout::AdminGate, format};

type PageResource = Resource<Result<crate::dto::AuditPage, crate::error::AppError>>;

#[component]
pub fn AuditPage() -> impl IntoView {
    let query = use_query_map();
    let before = move || query.with(|m| m.get("before").and_then(|b| b.parse::<i64>().ok()));
    let page: PageResource = Resource::new(before, audit);
    view! {
        <Title text="Audit log" />
        <AdminGate>
            <Audit page />
        </AdminGate>
    }
}

#[component]
fn Audit(page: PageResource) -> impl IntoView {
    view! {
        <div class="page-head">
            <h1>"Audit log"</h1>
            <p class="muted">"Every admin action, who did it and when."</p>
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(p) if p.entries.is_empty() => {
                        view! { <p class="empty">"No admin actions yet."</p> }.into_any()
                    }
                    Ok(p) => {
                        view! {
                            <div class="table-wrap">
                                <table class="table">
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
                                        {p
                                            .entries
                                            .iter()
                                            .map(|e| {
                                                view! {
                                                    <tr>
                                                        <td>
                                                            <time datetime=e.at.to_rfc3339()>{format::date_time(e.at)}</time>
                                                        </td>
                                                        <td>{e.actor.clone()}</td>
                                                        <th scope="row"><span class="chip">{e.action.clone()}</span></th>
                                                        <td class="mono small">{e.target.clone()}</td>
                                                        <td class="mono small detail">{e.detail.to_string()}</td>
                                                    </tr>
                                                }
                                            })
                                            .collect_view()}
                                    </tbody>
                                </table>
                            </div>
                            {p
                                .next_before
                                .map(|b| {
                                    view! {
                                        <p class="pager">
                                            <a class="btn" href=format!("/admin/audit?before={b}")>"Older →"</a>
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
