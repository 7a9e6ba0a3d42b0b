//! `/search?q=`: the user's tenant's best passages for a query, with the
//! query's words highlighted, each file name linking to its job's page and
//! a relevance bar (no raw scores). The server leaves out passages below a
//! relevance threshold and repeats; none left reads "No passages match".
//! The address carries the query only when there is one (`/search`, never
//! `/search?q=`).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::{api::search::search, dto::SearchHitDto, format};

/// Results per query.
const K: usize = 10;

/// The page's address for a query: no parameter for an empty one.
fn search_url(q: &str) -> String {
    match q.trim() {
        "" => "/search".into(),
        q => format!("/search?q={}", format::encode_query(q)),
    }
}

/// A hit's relevance next to the best hit's, 0–100, and its word.
fn relevance(score: f32, best: f32) -> (u32, &'static str) {
    let share = if best > 0.0 {
        (score / best).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let word = match share {
        s if s >= 0.9 => "high",
        s if s >= 0.7 => "medium",
        _ => "lower",
    };
    ((share * 100.0).round() as u32, word)
}

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
        <SearchForm current=Signal::derive(q) />
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

/// The query box; submitting goes to [`search_url`], so an empty query
/// leaves no `q=` behind.
#[component]
fn SearchForm(current: Signal<String>) -> impl IntoView {
    let navigate = use_navigate();
    let input = NodeRef::<leptos::html::Input>::new();
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let q = input.get().map(|i| i.value()).unwrap_or_default();
        navigate(&search_url(&q), Default::default());
    };
    view! {
        <form method="GET" action="/search" class="searchbar" role="search" on:submit=on_submit>
            <label for="q" class="sr-only">"Search your documents"</label>
            <input
                id="q"
                type="search"
                name="q"
                placeholder="Search your documents"
                prop:value=current
                autocomplete="off"
                node_ref=input
            />
            <button type="submit" class="btn primary">"Search"</button>
        </form>
    }
}

#[component]
fn Hits(list: Vec<SearchHitDto>, query: String) -> impl IntoView {
    let best = list.iter().map(|h| h.score).fold(0.0_f32, f32::max);
    view! {
        <ol class="hits" aria-label="Results">
            {list
                .into_iter()
                .map(|h| {
                    let runs = format::highlight(&h.text, &query);
                    let (pct, word) = relevance(h.score, best);
                    let name = match &h.job_id {
                        Some(job) => {
                            view! { <a class="hit-doc" href=format!("/jobs/{job}")>{h.filename.clone()}</a> }
                                .into_any()
                        }
                        None => view! { <span class="hit-doc">{h.filename.clone()}</span> }.into_any(),
                    };
                    view! {
                        <li class="hit card">
                            <div class="hit-head">
                                {name}
                                <span class="chip">{format!("passage {}", h.chunk_index + 1)}</span>
                                <span class="relevance-wrap">
                                    <span class="muted small" aria-hidden="true">"Relevance"</span>
                                    <span
                                        class="relevance"
                                        role="img"
                                        aria-label=format!("Relevance: {word}")
                                        title=format!("Relevance: {word}")
                                    >
                                        <span class="relevance-fill" style=format!("width: {pct}%")></span>
                                    </span>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_query_leaves_no_parameter_in_the_address() {
        assert_eq!(search_url(""), "/search");
        assert_eq!(search_url("   "), "/search");
        assert_eq!(search_url(" harbour fees "), "/search?q=harbour%20fees");
    }

    #[test]
    fn relevance_is_a_share_of_the_best_hit_in_words() {
        assert_eq!(relevance(0.8, 0.8), (100, "high"));
        assert_eq!(relevance(0.6, 0.8), (75, "medium"));
        assert_eq!(relevance(0.2, 0.8), (25, "lower"));
        assert_eq!(relevance(0.5, 0.0), (0, "lower"));
    }
}
