//! What a page shows of something it loads: a line while the first answer
//! is on its way, the answer drawn by the page once it is in (kept on
//! screen while a refresh is in flight, so live pages do not flicker), and
//! the error as an alert when loading failed. Under a `Transition`, so the
//! server renders the loaded page and hands its data to the browser.

use leptos::prelude::*;
use serde::{de::DeserializeOwned, Serialize};

use crate::error::AppError;

#[component]
pub fn Loaded<T, V, F>(
    /// What is loaded.
    data: Resource<Result<T, AppError>>,
    /// Draws the loaded value.
    view: F,
    /// Said while nothing has arrived yet.
    #[prop(default = "Loading…")]
    waiting: &'static str,
) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    V: IntoView + 'static,
    F: Fn(T) -> V + Clone + Send + Sync + 'static,
{
    view! {
        <Transition fallback=move || view! { <p class="muted">{waiting}</p> }>
            {move || {
                let view = view.clone();
                Suspend::new(async move {
                    match data.await {
                        Ok(value) => view(value).into_any(),
                        Err(e) => failed(&e).into_any(),
                    }
                })
            }}
        </Transition>
    }
}

/// An error said where its content would have been.
pub fn failed(e: &AppError) -> impl IntoView {
    view! { <p class="error" role="alert">{e.to_string()}</p> }
}
