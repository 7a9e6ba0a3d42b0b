//! `/search?q=`: the user's tenant's best passages for a query, with the
//! query's words highlighted.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{components::Form, hooks::use_query_map};

use crate::{api::search::search, dto::SearchHitDto, format};

/// Results per query.
const K: usize = 10;

#[component]
pub fn SearchPage() -> impl IntoView {
    let query = use_query_map();
    let q = move || query.with(|m| m.get("q").unwrap_or_default());
    let hits = Resource::new(q, |q| async move {
        if q.trim().is_empty() {
            Ok(None)
        } else {
            search(q, K).await.map(Some)
        }
    });
    view! {
        <Title text="Search" />
        <div class="page-head">
            <h1>"Search"</h1>
            <p class="muted">"Find passages in your indexed documents."</p>
        </div>
        <Form method="GET" action="/search" attr:class="searchbar" attr:role="search">
            <label for="q" class="sr-only">"Search your documents"</label>
            <input
                id="q"
                type="search"
                name="q"
                placeholder="Search your documents"
                prop:value=q
                autocomplete="off"
            />
            <button type="submit" class="btn primary">"Search"</button>
        </Form>
        <Transition fallback=|| view! { <p class="muted">"Searching…"</p> }>
            {move || Suspend::new(async move {
                let query = q();
                match hits.await {
                    Ok(None) => ().into_any(),
                    Ok(Some(list)) if list.is_empty() => {
                        view! { <p class="empty">"No passages match. Try other words."</p> }
                            .into_any()
                    }
                    Ok(Some(list)) => view! { <Hits list query /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn Hits(list: Vec<SearchHitDto>, query: String) -> impl IntoView {
    view! {
        <ol class="hits" aria-label="Results">
            {list
                .into_iter()
                .map(|h| {
                    let runs = format::highlight(&h.text, &query);
                    view! {
                        <li class="hit card">
                            <div class="hit-head">
                                <span class="hit-doc">{h.filename.clone()}</span>
                                <span class="chip">{format!("passage {}", h.chunk_index + 1)}</span>
                                <span class="score" title="Cosine similarity">
                                    {format!("score {:.3}", h.score)}
                                </span>
                            </div>
                            <p class="hit-text">
                                {runs
                                    .into_iter()
                                    .map(|(t, hit)| {
                                        if hit {
                                            view! { <mark>{t}</mark> }.into_any()
                                        } else {
                                            t.into_any()
                                        }
                                    })
                                    .collect_view()}
                            </p>
                        </li>
                    }
                })
                .collect_view()}
        </ol>
    }
}
