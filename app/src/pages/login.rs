//! `/login`: email and password; on success the session cookie is set and
//! the browser goes home.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_navigate;

use crate::{api::session::Login, components::layout::HydrationMarker};

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(_)) = login.value().get() {
            navigate("/", Default::default());
        }
    });
    let error = move || match login.value().get() {
        Some(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    view! {
        <Title text="Log in" />
        <HydrationMarker>
            <main class="page narrow login">
                <h1 class="brand-large">"docflow"</h1>
                <p class="muted">"Upload documents; watch them become searchable."</p>
                <ActionForm action=login attr:class="card form">
                    <label for="email">"Email"</label>
                    <input id="email" type="email" name="email" autocomplete="username" required />
                    <label for="password">"Password"</label>
                    <input id="password" type="password" name="password" autocomplete="current-password" required />
                    {move || error().map(|e| view! { <p class="error" role="alert">{e}</p> })}
                    <button type="submit" class="btn primary" disabled=move || login.pending().get()>
                        {move || if login.pending().get() { "Logging in…" } else { "Log in" }}
                    </button>
                </ActionForm>
            </main>
        </HydrationMarker>
    }
}
