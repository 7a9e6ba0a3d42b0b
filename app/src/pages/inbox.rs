//! `/inbox`: the user's notifications (one per finished upload), newest
//! first; marking one read updates the bell at once.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::inbox::{inbox, mark_all_read, mark_read},
    components::{
        loaded::Loaded,
        toast::{use_toasts, ToastKind},
    },
    dto::NotificationDto,
    format,
    live::use_live,
};

#[component]
pub fn InboxPage() -> impl IntoView {
    let live = use_live();
    // Refetch when a notification arrives on the stream.
    let arrivals = Memo::new(move |_| live.unread.with(|u| u.len()));
    let list = Resource::new(move || arrivals.get(), |_| inbox());
    view! {
        <Title text="Inbox" />
        <Loaded data=list view=|i| view! { <InboxList items=i.notifications /> } />
    }
}

#[component]
fn InboxList(items: Vec<NotificationDto>) -> impl IntoView {
    let live = use_live();
    let toasts = use_toasts();
    // Arc signals and actions, owned by what holds them, not by this list:
    // a notification arriving re-creates the list and disposes what it owns,
    // while its old buttons stay on screen until the new list is read
    // (leptos#4350). A click there must still mark read, and the old view's
    // closures, run again when `live.read` changes, must find their values.
    // So the actions handle their own answers (no `Effect` owned here).
    let items: Vec<(NotificationDto, ArcRwSignal<bool>)> = items
        .into_iter()
        .map(|n| {
            let read = n.read_at.is_some();
            (n, ArcRwSignal::new(read))
        })
        .collect();
    let flags: Vec<(String, ArcRwSignal<bool>)> = items
        .iter()
        .map(|(n, r)| (n.id.clone(), r.clone()))
        .collect();
    let all = {
        let flags = flags.clone();
        ArcAction::new(move |_: &()| {
            let flags = flags.clone();
            async move {
                match mark_all_read().await {
                    Ok(_) => {
                        for (id, r) in &flags {
                            r.set(true);
                            live.mark_read(id);
                        }
                        toasts.show("All notifications marked read.", ToastKind::Ok);
                    }
                    Err(e) => toasts.show(e.to_string(), ToastKind::Bad),
                }
            }
        })
    };
    let all_pending = all.pending();
    let unread_here = move || {
        flags
            .iter()
            .filter(|(id, r)| !r.get() && !live.read.with(|s| s.contains(id)))
            .count()
    };
    let empty = items.is_empty();
    view! {
        <div class="page-head row">
            <h1>"Inbox"</h1>
            <button
                class="btn"
                disabled=move || unread_here() == 0 || all_pending.get()
                on:click=move |_| {
                    all.dispatch(());
                }
            >
                "Mark all read"
            </button>
        </div>
        {empty
            .then(|| {
                view! {
                    <p class="empty">
                        "Nothing yet. You get a notification when an upload is done or fails."
                    </p>
                }
            })}
        <ul class="inbox">
            {items
                .into_iter()
                .map(|(n, read)| view! { <NotificationRow n read /> })
                .collect_view()}
        </ul>
    }
}

#[component]
fn NotificationRow(n: NotificationDto, read: ArcRwSignal<bool>) -> impl IntoView {
    let live = use_live();
    let toasts = use_toasts();
    let id = n.id.clone();
    let is_read = {
        let (id, read) = (id.clone(), read.clone());
        move || read.get() || live.read.with(|s| s.contains(&id))
    };
    // Like "Mark all read": the row may be a stale one whose owner is
    // disposed, so the action is an `ArcAction` handling its own answer.
    let mark = ArcAction::new(move |id: &String| {
        let (id, read) = (id.clone(), read.clone());
        async move {
            match mark_read(id.clone()).await {
                Ok(()) => {
                    read.set(true);
                    live.mark_read(&id);
                }
                Err(e) => toasts.show(e.to_string(), ToastKind::Bad),
            }
        }
    });
    let marking = mark.pending();
    let kind = match n.kind.as_str() {
        "job_failed" => "bad",
        "job_cancelled" => "stopped",
        _ => "ok",
    };
    let title = n.title.clone();
    let mark_label = format!("Mark read: {title}");
    let is_read_class = is_read.clone();
    let is_read_btn = is_read.clone();
    view! {
        <li
            class=move || format!("note card {kind} {}", if is_read_class() { "read" } else { "unread" })
            aria-label=title.clone()
        >
            <span class="note-dot" aria-hidden="true"></span>
            <div class="note-body">
                <div class="note-head">
                    <strong>{n.title.clone()}</strong>
                    <time class="muted small" datetime=n.created_at.to_rfc3339()>
                        {format::date_time(n.created_at)}
                    </time>
                </div>
                <p>{n.body.clone()}</p>
                <div class="note-actions">
                    // Named after their notice: a screen reader's list of
                    // links and buttons tells one from the next.
                    <a href=n.link.clone() aria-label=format!("Open job: {}", n.title)>
                        "Open job"
                    </a>
                    <Show
                        when=move || !is_read_btn()
                        fallback=|| view! { <span class="muted small">"Read"</span> }
                    >
                        <button
                            class="btn small"
                            aria-label=mark_label.clone()
                            disabled={
                                let marking = marking.clone();
                                move || marking.get()
                            }
                            on:click={
                                let (id, mark) = (id.clone(), mark.clone());
                                move |_| {
                                    mark.dispatch(id.clone());
                                }
                            }
                        >
                            "Mark read"
                        </button>
                    </Show>
                </div>
            </div>
        </li>
    }
}
