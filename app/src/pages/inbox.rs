//! `/inbox`: the user's notifications (one per finished upload), newest
//! first; marking one read updates the bell at once.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::inbox::{inbox, mark_all_read, mark_read},
    components::toast::{use_toasts, ToastKind},
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
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match list.await {
                    Ok(i) => view! { <InboxList items=i.notifications /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn InboxList(items: Vec<NotificationDto>) -> impl IntoView {
    let live = use_live();
    let toasts = use_toasts();
    let items: Vec<(NotificationDto, RwSignal<bool>)> = items
        .into_iter()
        .map(|n| {
            let read = n.read_at.is_some();
            (n, RwSignal::new(read))
        })
        .collect();
    let flags: Vec<(String, RwSignal<bool>)> =
        items.iter().map(|(n, r)| (n.id.clone(), *r)).collect();
    let flags = StoredValue::new(flags);
    let unread_here = move || {
        flags.with_value(|f| {
            f.iter()
                .filter(|(id, r)| !r.get() && !live.read.with(|s| s.contains(id)))
                .count()
        })
    };
    let all = Action::new(move |_: &()| mark_all_read());
    Effect::new(move |_| {
        if let Some(r) = all.value().get() {
            match r {
                Ok(_) => {
                    flags.with_value(|f| {
                        for (id, r) in f {
                            r.set(true);
                            live.mark_read(id);
                        }
                    });
                    toasts.show("All notifications marked read.", ToastKind::Ok);
                }
                Err(e) => toasts.show(e.to_string(), ToastKind::Bad),
            }
        }
    });
    let empty = items.is_empty();
    view! {
        <div class="page-head row">
            <h1>"Inbox"</h1>
            <button
                class="btn"
                disabled=move || unread_here() == 0 || all.pending().get()
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
fn NotificationRow(n: NotificationDto, read: RwSignal<bool>) -> impl IntoView {
    let live = use_live();
    let toasts = use_toasts();
    let id = n.id.clone();
    let is_read = {
        let id = id.clone();
        move || read.get() || live.read.with(|s| s.contains(&id))
    };
    let mark = Action::new(move |id: &String| mark_read(id.clone()));
    Effect::new({
        let id = id.clone();
        move |_| match mark.value().get() {
            Some(Ok(())) => {
                read.set(true);
                live.mark_read(&id);
            }
            Some(Err(e)) => toasts.show(e.to_string(), ToastKind::Bad),
            None => {}
        }
    });
    let kind = if n.kind == "job_failed" { "bad" } else { "ok" };
    let title = n.title.clone();
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
                    <a href=n.link.clone()>"Open job"</a>
                    <Show
                        when=move || !is_read_btn()
                        fallback=|| view! { <span class="muted small">"Read"</span> }
                    >
                        <button
                            class="btn small"
                            disabled=move || mark.pending().get()
                            on:click={
                                let id = id.clone();
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
