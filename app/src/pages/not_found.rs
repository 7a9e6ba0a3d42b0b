use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
        resp.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <main class="page narrow">
            <h1>"Page not found"</h1>
            <p><a href="/">"Back to your documents"</a></p>
        </main>
    }
}
