//! `/`: the user's documents and their jobs.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{api::jobs::my_jobs, dto::JobDto};

#[component]
pub fn HomePage() -> impl IntoView {
    let jobs = Resource::new(|| (), |_| my_jobs(50));
    view! {
        <Title text="Documents" />
        <h1>"Your documents"</h1>
        <Suspense fallback=|| view! { <p class="muted">"Loading jobs…"</p> }>
            {move || Suspend::new(async move {
                match jobs.await {
                    Ok(list) if list.is_empty() => view! {
                        <p class="empty">"No documents yet. Uploads appear here with their progress."</p>
                    }.into_any(),
                    Ok(list) => view! { <JobTable jobs=list /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn JobTable(jobs: Vec<JobDto>) -> impl IntoView {
    view! {
        <table class="table">
            <thead>
                <tr><th>"File"</th><th>"Queue"</th><th>"State"</th><th>"Step"</th></tr>
            </thead>
            <tbody>
                {jobs.into_iter().map(|j| view! {
                    <tr>
                        <td>{j.filename}</td>
                        <td>{j.queue}</td>
                        <td><span class=format!("badge {}", j.state)>{j.state.clone()}</span></td>
                        <td>{j.current_step.unwrap_or_default()}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}
