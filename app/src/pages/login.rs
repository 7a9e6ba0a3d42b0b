//! `/login`: email and password; on success the session cookie is set and
//! the browser goes where the visitor was sent from (`?next=`, a local
//! path only), else home.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::{
    api::session::{whoami, Login},
    components::layout::HydrationMarker,
};

/// The longest `next` followed; a longer one is ignored.
const MAX_NEXT: usize = 2_000;

/// The login page for a visitor who asked for `path_and_query`: `/login`
/// for the home page, else `/login?next=<it, encoded>`.
pub fn login_url(path_and_query: &str) -> String {
    if path_and_query.is_empty() || path_and_query == "/" {
        "/login".into()
    } else {
        serde_urlencoded::to_string([("next", path_and_query)])
            .map(|query| format!("/login?{query}"))
            .unwrap_or_else(|_| "/login".into())
    }
}

/// Where to go after logging in: `next` when it is a path on this site,
/// else `/`. A path starts with one `/`; `//host` and `/\host` name another
/// site (browsers read `\` as `/`, and drop tabs and line breaks, so no
/// backslash or control character is allowed anywhere), and anything
/// without a leading `/` may carry a scheme (`https:`, `javascript:`).
/// The login page itself leads home.
pub fn after_login(next: Option<&str>) -> &str {
    let Some(next) = next else { return "/" };
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && next.len() <= MAX_NEXT;
    let is_login = next == "/login" || next.starts_with("/login?") || next.starts_with("/login/");
    if local && !is_login {
        next
    } else {
        "/"
    }
}

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let navigate = use_navigate();
    let query = use_query_map();
    Effect::new(move |_| {
        if let Some(Ok(_)) = login.value().get() {
            let next = query.with_untracked(|q| q.get("next"));
            navigate(after_login(next.as_deref()), Default::default());
        }
    });
    // A visitor already signed in goes where they were going: the page
    // answers 303 on the server. That is also where a login sent before the
    // page hydrated ends: the browser posts the form itself, the server
    // function signs in and sends the browser back here.
    let signed_in = Resource::new(|| (), |_| whoami());
    let onward = move || {
        Suspend::new(async move {
            match signed_in.await {
                Ok(Some(_)) => {
                    let to =
                        after_login(query.with_untracked(|q| q.get("next")).as_deref()).to_string();
                    #[cfg(feature = "ssr")]
                    leptos_axum::redirect(&to);
                    view! { <leptos_router::components::Redirect path=to /> }.into_any()
                }
                _ => ().into_any(),
            }
        })
    };
    let error = move || match login.value().get() {
        Some(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    view! {
        <Title text="Log in" />
        <Suspense fallback=|| ()>{onward}</Suspense>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_visitor_is_sent_to_login_with_where_they_were() {
        assert_eq!(login_url("/"), "/login");
        assert_eq!(login_url(""), "/login");
        assert_eq!(login_url("/admin"), "/login?next=%2Fadmin");
        assert_eq!(
            login_url("/admin/jobs?tenant=globex&state=pending"),
            "/login?next=%2Fadmin%2Fjobs%3Ftenant%3Dglobex%26state%3Dpending"
        );
    }

    #[test]
    fn after_login_only_a_local_path_is_followed() {
        for local in [
            "/",
            "/admin",
            "/jobs/0b6f6c1e-6f7a-4c44-9d1e-1a2b3c4d5e6f",
            "/search?q=harbour%20fees",
            "/admin/jobs?tenant=globex&state=pending",
            "/inbox#latest",
        ] {
            assert_eq!(after_login(Some(local)), local, "{local}");
        }
        for foreign in [
            "//evil.test",
            "//evil.test/admin",
            "/\\evil.test",
            "/\\/evil.test",
            "/\t/evil.test",
            "/\n/evil.test",
            "https://evil.test/",
            "http:/evil.test",
            "javascript:alert(1)",
            "evil.test",
            " /admin",
            "",
            "/jobs\\x",
        ] {
            assert_eq!(after_login(Some(foreign)), "/", "{foreign:?}");
        }
        assert_eq!(after_login(None), "/");
        // Back to the login page would only ask again.
        assert_eq!(after_login(Some("/login?next=%2Fadmin")), "/");
        assert_eq!(after_login(Some(&format!("/{}", "a".repeat(3_000)))), "/");
    }
}
