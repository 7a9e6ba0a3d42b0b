//! `/search?q=`: the user's tenant's best passages for a query, each as a
//! snippet around the match with the query's words marked, its PDF page,
//! its file name linking to its job's page and a relevance bar (no raw
//! scores). The server leaves out passages that neither hold the query's
//! words nor come near its meaning, and repeats; none left reads "No
//! passages match".
//! The address carries the query only when there is one (`/search`, never
//! `/search?q=`).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::{api::search::search, dto::SearchHitDto};

/// Results per query.
const K: usize = 10;

/// The page's address for a query: no parameter for an empty one.
fn search_url(q: &str) -> String {
    match q.trim() {
        "" => "/search".into(),
        q => serde_urlencoded::to_string([("q", q)])
            .map(|query| format!("/search?{query}"))
            .unwrap_or_else(|_| "/search".into()),
    }
}

/// A hit's relevance from its similarity to the query (absolute, so a page
/// of poor matches never shows full bars), 0–100, and its word; a passage
/// without a vector of the configured model yet has none.
fn relevance(score: Option<f32>) -> Option<(u32, &'static str)> {
    let s = score?.clamp(0.0, 1.0);
    let word = match s {
        s if s >= 0.6 => "high",
        s if s >= 0.4 => "medium",
        _ => "lower",
    };
    Some(((s * 100.0).round() as u32, word))
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
                match hits.await {
                    Ok(None) => ().into_any(),
                    Ok(Some(list)) if list.is_empty() => {
                        view! { <p class="empty">"No passages match. Try other words."</p> }
                            .into_any()
                    }
                    Ok(Some(list)) => view! { <Hits list /> }.into_any(),
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
fn Hits(list: Vec<SearchHitDto>) -> impl IntoView {
    view! {
        <ol class="hits" aria-label="Results">
            {list
                .into_iter()
                .map(|h| {
                    let name = match &h.job_id {
                        Some(job) => {
                            view! { <a class="hit-doc" href=format!("/jobs/{job}")>{h.filename.clone()}</a> }
                                .into_any()
                        }
                        None => view! { <span class="hit-doc">{h.filename.clone()}</span> }.into_any(),
                    };
                    let place = match h.page {
                        Some(page) => format!("page {page}"),
                        None => format!("passage {}", h.chunk_index + 1),
                    };
                    let bar = relevance(h.score).map(|(pct, word)| {
                        view! {
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
                        }
                    });
                    let snippet = if h.snippet.is_empty() {
                        vec![(h.text.clone(), false)]
                    } else {
                        h.snippet
                    };
                    view! {
                        <li class="hit card">
                            <div class="hit-head">
                                {name}
                                <span class="chip">{place}</span>
                                {(!h.matched_words)
                                    .then(|| view! { <span class="chip" title="No word of the query is in this passage; it is near in meaning">"by meaning"</span> })}
                                {bar}
                            </div>
                            <p class="hit-text">
                                {snippet
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
        assert_eq!(search_url(" harbour fees "), "/search?q=harbour+fees");
    }

    #[test]
    fn relevance_is_the_similarity_itself_in_words() {
        assert_eq!(relevance(Some(0.8)), Some((80, "high")));
        assert_eq!(relevance(Some(0.45)), Some((45, "medium")));
        assert_eq!(relevance(Some(0.2)), Some((20, "lower")));
        assert_eq!(relevance(Some(-0.3)), Some((0, "lower")));
        assert_eq!(relevance(None), None);
    }
}
