//! The frame around every signed-in page: header with navigation, the
//! notification bell and the user menu; the live event stream; toasts.
//! [`Shell`] is the layout route, so it (and its stream) survives
//! navigation between pages. Pages read the user from context.

use leptos::prelude::*;
use leptos_router::{
    components::{Outlet, A},
    hooks::use_navigate,
};

use crate::{
    api::{inbox::inbox, jobs::live_cursor, session::logout, session::whoami},
    components::toast::{ToastRegion, Toasts},
    dto::UserDto,
    error::AppError,
    live::{Live, LiveStatus},
};

/// The signed-in user, provided by [`Shell`] to the page inside it.
pub type UserResource = Resource<Result<Option<UserDto>, AppError>>;

/// Unread notification ids as the server knew them when the page loaded.
pub type UnreadSeed = Resource<Result<Vec<String>, AppError>>;

/// Sets `data-hydrated="true"` on the root once the WASM app runs (effects never
/// run on the server), so browser tests know when clicks will be heard.
#[component]
pub fn HydrationMarker(children: Children) -> impl IntoView {
    let hydrated = RwSignal::new(false);
    Effect::new(move |_| hydrated.set(true));
    view! { <div id="root" data-hydrated=move || hydrated.get().to_string()>{children()}</div> }
}

#[component]
pub fn Shell() -> impl IntoView {
    let user: UserResource = Resource::new(|| (), |_| whoami());
    provide_context(user);
    let live = Live::new();
    provide_context(live);
    provide_context(Toasts::new());
    let cursor = Resource::new(|| (), |_| live_cursor());
    let seed: UnreadSeed = Resource::new(
        || (),
        |_| async move {
            inbox().await.map(|i| {
                i.notifications
                    .into_iter()
                    .filter(|n| n.read_at.is_none())
                    .map(|n| n.id)
                    .collect()
            })
        },
    );

    #[cfg(feature = "hydrate")]
    {
        use std::sync::{Arc, Mutex};
        type Slot = Arc<Mutex<Option<send_wrapper::SendWrapper<crate::live::Connection>>>>;
        let slot: Slot = Arc::default();
        let opened = slot.clone();
        Effect::new(move |_| {
            if let Some(Ok(c)) = cursor.get() {
                if let Ok(mut s) = opened.lock() {
                    if s.is_none() {
                        *s = crate::live::connect(live, c).map(send_wrapper::SendWrapper::new);
                    }
                }
            }
        });
        on_cleanup(move || {
            if let Ok(mut s) = slot.lock() {
                s.take();
            }
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = cursor;

    let navigate = use_navigate();
    let logout_action = Action::new(move |_: &()| logout());
    Effect::new(move |_| {
        if let Some(Ok(())) = logout_action.value().get() {
            navigate("/login", Default::default());
        }
    });
    view! {
        <HydrationMarker>
            <a class="skip-link" href="#main">"Skip to content"</a>
            <header class="topbar">
                <A href="/" attr:class="brand">
                    <span class="brand-mark" aria-hidden="true"></span>
                    "docflow"
                </A>
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        let me = user.await;
                        let unread = seed.await.unwrap_or_default();
                        match me {
                            Ok(Some(u)) => {
                                let admin = u.is_operator();
                                view! {
                                    <nav class="nav" aria-label="Main">
                                        <A href="/" exact=true>"Documents"</A>
                                        <A href="/search">"Search"</A>
                                        <A href="/inbox">"Inbox"</A>
                                        {admin.then(|| view! { <A href="/admin">"Admin"</A> })}
                                    </nav>
                                    <div class="user">
                                        <LiveDot />
                                        <Bell seed=unread />
                                        <span class="muted user-id">
                                            {format!("{} · {}", u.email, u.tenant)}
                                        </span>
                                        <button
                                            class="btn ghost"
                                            on:click=move |_| {
                                                logout_action.dispatch(());
                                            }
                                        >
                                            "Log out"
                                        </button>
                                    </div>
                                }
                                    .into_any()
                            }
                            _ => view! { <a class="btn" href="/login">"Log in"</a> }.into_any(),
                        }
                    })}
                </Suspense>
            </header>
            <main class="page" id="main">
                // Only the verdict waits for the user; the page itself stays
                // outside this Suspend, so its resources are made once (a
                // re-run would make new ones and break hydration).
                <Suspense fallback=|| ()>
                    {move || Suspend::new(async move {
                        match user.await {
                            Ok(Some(_)) => ().into_any(),
                            Ok(None) | Err(AppError::Unauthorized) => {
                                view! { <LoginRedirect /> }.into_any()
                            }
                            Err(e) => {
                                view! { <p class="error" role="alert">{e.to_string()}</p> }
                                    .into_any()
                            }
                        }
                    })}
                </Suspense>
                <Outlet />
            </main>
            <ToastRegion />
        </HydrationMarker>
    }
}

/// The header's notification bell with the live unread count: the unread
/// notifications the page was rendered with (`seed`), plus those the stream
/// announces, less those read in this tab.
#[component]
fn Bell(seed: Vec<String>) -> impl IntoView {
    let live = crate::live::use_live();
    let seed = StoredValue::new(seed);
    let count = move || seed.with_value(|ids| live.unread_count(ids));
    view! {
        <A
            href="/inbox"
            attr:class="bell"
            attr:aria-label=move || match count() {
                0 => "Notifications, none unread".to_string(),
                n => format!("Notifications, {n} unread"),
            }
        >
            <svg viewBox="0 0 24 24" width="20" height="20" aria-hidden="true">
                <path
                    d="M12 3a6 6 0 0 0-6 6v3.6l-1.7 2.9A1 1 0 0 0 5.2 17h13.6a1 1 0 0 0 .9-1.5L18 12.6V9a6 6 0 0 0-6-6Zm0 19a3 3 0 0 0 2.8-2H9.2A3 3 0 0 0 12 22Z"
                    fill="currentColor"
                />
            </svg>
            <span class="bell-count" class:hidden=move || count() == 0 aria-hidden="true">
                {count}
            </span>
        </A>
    }
}

/// A dot and a word saying whether updates arrive live or by polling (the
/// colour alone would say nothing to a colour-blind or screen-reader user).
#[component]
fn LiveDot() -> impl IntoView {
    let live = crate::live::use_live();
    let label = move || live.status.get().description();
    view! {
        <span class="live-state">
            <span
                class=move || match live.status.get() {
                    LiveStatus::Connecting => "live-dot connecting",
                    LiveStatus::Live => "live-dot on",
                    LiveStatus::Polling => "live-dot polling",
                }
                title=label
                aria-hidden="true"
            ></span>
            <span class="live-text" aria-hidden="true">
                {move || live.status.get().word()}
            </span>
            <span class="sr-only">{label}</span>
        </span>
    }
}

/// Whether the operator on an admin page may act (an admin) or only reads
/// (a viewer, whose pages show no action buttons); [`AdminGate`] provides
/// it.
#[derive(Clone, Copy, Debug)]
pub struct MayAct(pub bool);

/// Whether the admin page's operator may act.
pub fn may_act() -> bool {
    use_context::<MayAct>().is_some_and(|m| m.0)
}

/// Renders `children` for operators (admins, and viewers without action
/// buttons: [`may_act`]); members get the 403 page (with a 403
/// status when rendered on the server: admin routes render in `Async` mode
/// so the status is set before the response starts). An anonymous visitor
/// gets nothing here: [`Shell`] sends them to log in. `children` may be
/// rendered more than once: pages create their resources outside it.
#[component]
pub fn AdminGate(children: ChildrenFn) -> impl IntoView {
    let user = use_context::<UserResource>();
    let children = StoredValue::new(children);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                let me = match user {
                    Some(u) => u.await,
                    None => Ok(None),
                };
                match me {
                    Ok(Some(u)) if u.is_operator() => {
                        provide_context(MayAct(u.is_admin()));
                        view! {
                            <nav class="tabs" aria-label="Admin">
                                <A href="/admin" exact=true>"Dashboard"</A>
                                <A href="/admin/jobs">"Jobs"</A>
                                <A href="/admin/dead-letters">"Dead letters"</A>
                                <A href="/admin/audit">"Audit log"</A>
                                <A href="/admin/webhooks">"Webhooks"</A>
                            </nav>
                            {children.with_value(|c| c())}
                        }
                            .into_any()
                    }
                    Ok(None) | Err(AppError::Unauthorized) => ().into_any(),
                    _ => view! { <Forbidden /> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The 403 page.
#[component]
pub fn Forbidden() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(resp) = use_context::<leptos_axum::ResponseOptions>() {
        resp.set_status(http::StatusCode::FORBIDDEN);
    }
    view! {
        <leptos_meta::Title text="Not allowed" />
        <section class="empty-state">
            <p class="big-code" aria-hidden="true">"403"</p>
            <h1>"You are not allowed to see this page"</h1>
            <p class="muted">"This page is for administrators. Ask one if you need access."</p>
            <p>
                <a class="btn" href="/">"Back to your documents"</a>
            </p>
        </section>
    }
}

/// Sends an anonymous visitor to the login page (on the server by redirect),
/// which brings them back here (`?next=`) once they have logged in.
#[component]
fn LoginRedirect() -> impl IntoView {
    let location = leptos_router::hooks::use_location();
    let path = location.pathname.get_untracked();
    let search = location.search.get_untracked();
    let here = if search.is_empty() {
        path
    } else {
        format!("{path}?{search}")
    };
    let to = crate::pages::login::login_url(&here);
    #[cfg(feature = "ssr")]
    leptos_axum::redirect(&to);
    view! { <leptos_router::components::Redirect path=to /> }
}
