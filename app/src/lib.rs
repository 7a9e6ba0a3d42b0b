//! docflow's web UI: pages, components, DTOs and server functions. Compiled
//! for the server (`ssr`) and to WASM for the browser (`hydrate`); it holds no
//! SQL and no AMQP.

pub mod api;
#[cfg(feature = "ssr")]
pub mod backend;
pub mod components;
pub mod dto;
pub mod error;
pub mod pages;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::{
    components::{Route, Router, Routes},
    path,
};

use crate::{
    components::layout::Shell,
    pages::{home::HomePage, login::LoginPage, not_found::NotFound},
};

/// The HTML document around the app, rendered on the server.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="docflow" href="/pkg/docflow.css" />
        <Title formatter=|t: String| if t.is_empty() { "docflow".to_string() } else { format!("{t} · docflow") } />
        <Router>
            <Routes fallback=NotFound>
                <Route path=path!("/login") view=LoginPage />
                <Route path=path!("/") view=move || view! { <Shell><HomePage /></Shell> } />
            </Routes>
        </Router>
    }
}

/// The browser entry point: attaches the WASM app to the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
