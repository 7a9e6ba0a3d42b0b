//! The frame around every signed-in page: header with navigation and the
//! user menu. Pages inside it can read the user from context.

use leptos::prelude::*;
use leptos_router::{components::A, hooks::use_navigate};

use crate::{
    api::session::{logout, whoami},
    dto::UserDto,
    error::AppError,
};

/// The signed-in user, provided by [`Shell`] to the page inside it.
pub type UserResource = Resource<Result<Option<UserDto>, AppError>>;

/// Sets `data-hydrated="true"` on the root once the WASM app runs (effects never
/// run on the server), so browser tests know when clicks will be heard.
#[component]
pub fn HydrationMarker(children: Children) -> impl IntoView {
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    view! { <div id="root" data-hydrated=move || hydrated.get().to_string()>{children()}</div> }
}

#[component]
pub fn Shell(children: ChildrenFn) -> impl IntoView {
    let user: UserResource = Resource::new(|| (), |_| whoami());
    provide_context(user);
    let navigate = use_navigate();
    let logout_action = Action::new(move |_: &()| logout());
    Effect::new(move |_| {
        if let Some(Ok(())) = logout_action.value().get() {
            navigate("/login", Default::default());
        }
    });
    let children = StoredValue::new(children);
    view! {
        <HydrationMarker>
            <header class="topbar">
                <A href="/" attr:class="brand">"docflow"</A>
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        match user.await {
                            Ok(Some(u)) => view! {
                                <nav class="nav" aria-label="Main">
                                    <A href="/">"Documents"</A>
                                    {u.is_admin().then(|| view! { <A href="/admin">"Admin"</A> })}
                                </nav>
                                <div class="user">
                                    <span class="muted">{format!("{} · {}", u.email, u.tenant)}</span>
                                    <button class="btn ghost" on:click=move |_| { logout_action.dispatch(()); }>
                                        "Log out"
                                    </button>
                                </div>
                            }.into_any(),
                            _ => view! { <a class="btn" href="/login">"Log in"</a> }.into_any(),
                        }
                    })}
                </Suspense>
            </header>
            <main class="page">
                <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                    {move || Suspend::new(async move {
                        match user.await {
                            Ok(Some(_)) => children.with_value(|c| c()).into_any(),
                            Ok(None) | Err(AppError::Unauthorized) => view! { <LoginRedirect /> }.into_any(),
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
            </main>
        </HydrationMarker>
    }
}

/// Sends an anonymous visitor to the login page (on the server by redirect).
#[component]
fn LoginRedirect() -> impl IntoView {
    #[cfg(feature = "ssr")]
    leptos_axum::redirect("/login");
    view! { <leptos_router::components::Redirect path="/login" /> }
}
