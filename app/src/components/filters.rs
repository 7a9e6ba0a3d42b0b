//! The filter bar of a list kept in the URL: a GET form of the list's own
//! address whose selects apply as they are chosen, with an optional Apply
//! (for typed fields) and a link back to the unfiltered list.

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::{components::Form, hooks::use_navigate};

use crate::url::UrlQuery;

/// `(value, label)` of a select's options.
pub type Options = Vec<(String, String)>;

/// "Any" (the blank value), then each of `values` as its own label.
pub fn any_of<S: AsRef<str>>(values: &[S]) -> Options {
    choices("Any", values)
}

/// `any` for the blank value, then each of `values` as its own label.
pub fn choices<S: AsRef<str>>(any: &str, values: &[S]) -> Options {
    std::iter::once((String::new(), any.to_string()))
        .chain(
            values
                .iter()
                .map(|v| (v.as_ref().to_string(), v.as_ref().to_string())),
        )
        .collect()
}

/// What a select does with its choice. A plain closure, not a `Callback`:
/// a callback lives in the reactive arena and is disposed with the form a
/// refetch replaces, while that form's select can still fire (leptos#4350).
pub type Pick = Arc<dyn Fn(String) + Send + Sync>;

/// A select's choice applied at once by a navigation to the list with it
/// set (`set`) and from its first page. It starts from the filters in the
/// URL now (`current`, the page's, which outlives its forms), not from the
/// form's copy: a change on a form that a refetch is replacing keeps the
/// filter the previous change just set, and reads no disposed value.
pub fn pick_into<Q: UrlQuery + 'static>(current: Memo<Q>, set: fn(&mut Q, String)) -> Pick {
    let navigate = use_navigate();
    Arc::new(move |value: String| {
        let Some(mut q) = current.try_get_untracked() else {
            return;
        };
        set(&mut q, value);
        q.first_page();
        navigate(&q.url(), Default::default());
    })
}

/// Options from `(value, label)` pairs.
pub fn labelled(pairs: &[(&str, &str)]) -> Options {
    pairs
        .iter()
        .map(|(v, l)| (v.to_string(), l.to_string()))
        .collect()
}

/// The time ranges lists are filtered by, as the URL and the API name
/// them, and their labels.
const SINCE: [(&str, &str); 4] = [
    ("", "Any time"),
    ("1h", "Last hour"),
    ("24h", "Last 24 hours"),
    ("7d", "Last 7 days"),
];

/// The time ranges offered; a range typed into the URL (`since=2h`) is
/// offered too, as it is.
pub fn since_options(current: &str) -> Options {
    let mut ranges = labelled(&SINCE);
    if !SINCE.iter().any(|(v, _)| *v == current) {
        ranges.push((current.to_string(), format!("Last {current}")));
    }
    ranges
}

/// `Filters`, or `Filters · 2 set`: the folded bar's summary.
pub fn summary(set: usize) -> String {
    match set {
        0 => "Filters".to_string(),
        n => format!("Filters · {n} set"),
    }
}

/// The bar: a GET form to `action` (a submission is a navigation by the
/// router) holding the fields, then Apply when `apply`, and `reset` (a link
/// to the bare list) while `filtered`.
#[component]
pub fn FilterBar(
    action: &'static str,
    #[prop(optional)] apply: bool,
    #[prop(optional)] reset: Option<&'static str>,
    #[prop(optional, into)] filtered: Signal<bool>,
    #[prop(optional)] compact: bool,
    children: Children,
) -> impl IntoView {
    let buttons = move || {
        let reset = reset.filter(|_| apply || filtered.get());
        (apply || reset.is_some()).then(|| {
            view! {
                <div class="field buttons">
                    {apply.then(|| view! { <button type="submit" class="btn primary">"Apply"</button> })}
                    {reset.map(|r| view! { <a class="btn ghost" href=action>{r}</a> })}
                </div>
            }
        })
    };
    view! {
        <Form
            method="GET"
            action=action
            on_form_data=Arc::new(drop_unnamed)
            attr:class=if compact { "filters card compact" } else { "filters card" }
            attr:aria-label="Filters"
        >
            {children()}
            {buttons}
        </Form>
    }
}

/// A labelled select of the bar. `value` is the URL's and the field
/// follows it (a link to another filter, the back button). A choice applies
/// at once: `on_pick` when given, else the form is submitted.
#[component]
pub fn FilterSelect(
    #[prop(into)] id: String,
    name: &'static str,
    label: &'static str,
    options: Options,
    #[prop(into)] value: Signal<String>,
    #[prop(optional)] on_pick: Option<Pick>,
) -> impl IntoView {
    let first = value.get_untracked();
    let mut options = options;
    // A value typed into the URL that no option offers is shown as it is.
    if !first.is_empty() && !options.iter().any(|(v, _)| *v == first) {
        options.push((first.clone(), first.clone()));
    }
    view! {
        <div class="field">
            <label for=id.clone()>{label}</label>
            <select
                id=id
                name=name
                prop:value=move || value.get()
                on:change=move |ev| match &on_pick {
                    Some(pick) => pick(event_target_value(&ev)),
                    None => submit_form_of(ev),
                }
            >
                {options
                    .into_iter()
                    .map(|(v, l)| {
                        let selected = v == first;
                        view! { <option value=v selected=selected>{l}</option> }
                    })
                    .collect_view()}
            </select>
        </div>
    }
}

/// Submits the form of the select that changed (the router's `Form` turns
/// the submission into a navigation).
fn submit_form_of(ev: leptos::ev::Event) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if let Some(form) = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlSelectElement>().ok())
            .and_then(|s| s.form())
        {
            let _ = form.request_submit();
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = ev;
}

/// Leaves out of a GET form's query what has no name: the router adds the
/// button that submitted the form (Enter in a field, "Apply"), which would
/// put a stray `&=` in the URL.
fn drop_unnamed(data: &leptos::web_sys::FormData) {
    data.delete("");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_start_with_any_and_the_summary_counts_what_is_set() {
        assert_eq!(
            any_of(&["high", "slow"]),
            vec![
                (String::new(), "Any".to_string()),
                ("high".to_string(), "high".to_string()),
                ("slow".to_string(), "slow".to_string())
            ]
        );
        assert_eq!(since_options("24h").len(), 4);
        assert_eq!(
            since_options("2h").last(),
            Some(&("2h".to_string(), "Last 2h".to_string()))
        );
        assert_eq!(summary(0), "Filters");
        assert_eq!(summary(2), "Filters · 2 set");
    }
}
