#![recursion_limit = "256"]
//! docflow's web UI: pages, components, DTOs and server functions. Compiled
//! for the server (`ssr`) and to WASM for the browser (`hydrate`); it holds no
//! SQL and no AMQP.

pub mod api;
#[cfg(feature = "ssr")]
pub mod backend;
#[cfg(feature = "hydrate")]
pub mod browser;
pub mod components;
pub mod dto;
pub mod error;
pub mod format;
pub mod hooks;
pub mod live;
pub mod pages;
pub mod url;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::{
    components::{ParentRoute, Route, Router, Routes},
    path, SsrMode,
};

use crate::{
    components::layout::Shell,
    pages::{
        admin::{
            audit::AuditPage, dashboard::DashboardPage, dead_letters::DeadLettersPage,
            jobs::AdminJobsPage, webhooks::WebhooksPage,
        },
        batch::BatchPage,
        home::HomePage,
        inbox::InboxPage,
        job::JobPage,
        login::LoginPage,
        not_found::NotFound,
        search::SearchPage,
    },
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
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <link rel="icon" href="/favicon.ico" sizes="32x32" />
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
                // Async: a signed-in visitor's 303 onward is set before the
                // response starts.
                <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async />
                // Signed-in pages share the shell (and its event stream).
                // Admin pages render in Async mode so a member's 403 status
                // is set before the response starts.
                <ParentRoute path=path!("") view=Shell>
                    <Route path=path!("/") view=HomePage />
                    <Route path=path!("/jobs/:id") view=JobPage />
                    <Route path=path!("/batches/:id") view=BatchPage />
                    <Route path=path!("/inbox") view=InboxPage />
                    <Route path=path!("/search") view=SearchPage />
                    <Route path=path!("/admin") view=DashboardPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/jobs") view=AdminJobsPage ssr=SsrMode::Async />
                    <Route
                        path=path!("/admin/dead-letters")
                        view=DeadLettersPage
                        ssr=SsrMode::Async
                    />
                    <Route path=path!("/admin/audit") view=AuditPage ssr=SsrMode::Async />
                    <Route path=path!("/admin/webhooks") view=WebhooksPage ssr=SsrMode::Async />
                </ParentRoute>
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
