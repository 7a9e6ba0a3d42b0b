//! What the admin pages do alike, written once: keep what they show
//! current ([`use_live_refresh`]) and run an action that ends in a toast
//! ([`use_action_toast`]).

use std::future::Future;

use leptos::prelude::*;

use crate::{
    components::toast::{use_toasts, ToastKind},
    dto::LiveJobEvent,
};

/// How a page keeps what it shows current.
#[derive(Clone, Copy)]
pub struct Refresh {
    /// Read again this often (seconds) while nothing asks for it sooner.
    pub every_s: u32,
    /// A job event on the live feed that makes the page stale: it is read
    /// again within a second. `None`: events do not matter to it.
    pub on_event: Option<fn(&LiveJobEvent) -> bool>,
}

/// While the live feed is down, pages read this often at most (seconds),
/// as the header promises ("refreshing every 2 s").
#[cfg(feature = "hydrate")]
const OFFLINE_EVERY_S: u32 = 2;

/// Calls `refresh` when the page is stale: within a second of a job event
/// `how.on_event` picks, every `how.every_s` seconds otherwise (every 2 s
/// while the live feed is down). Not while the tab is hidden, nor while
/// `held` says so (a question is open: a redraw would take its focus).
/// Browser only; the timer stops with the page.
pub fn use_live_refresh(
    how: Refresh,
    held: impl Fn() -> bool + 'static,
    refresh: impl Fn() + 'static,
) {
    #[cfg(feature = "hydrate")]
    {
        use crate::live::{use_live, LiveStatus};
        let live = use_live();
        let stale = StoredValue::new(false);
        if let Some(relevant) = how.on_event {
            let start = live
                .jobs
                .with_untracked(|m| m.values().map(|(s, _)| *s).max().unwrap_or(0));
            Effect::new(move |last: Option<u64>| {
                let last = last.unwrap_or(start);
                live.jobs.with(|m| {
                    let fresh = m.values().filter(|(s, _)| *s > last);
                    if fresh.clone().any(|(_, e)| relevant(e)) {
                        stale.set_value(true);
                    }
                    fresh.map(|(s, _)| *s).max().unwrap_or(last)
                })
            });
        }
        let waited = StoredValue::new(0u32);
        let every_second = move || {
            waited.update_value(|w| *w += 1);
            let hidden = web_sys::window()
                .and_then(|w| w.document())
                .is_some_and(|d| d.hidden());
            let every = match live.status.get_untracked() {
                LiveStatus::Live => how.every_s,
                _ => how.every_s.min(OFFLINE_EVERY_S),
            };
            if hidden || held() || !(stale.get_value() || waited.get_value() >= every) {
                return;
            }
            stale.set_value(false);
            waited.set_value(0);
            refresh();
        };
        if let Ok(handle) =
            set_interval_with_handle(every_second, std::time::Duration::from_secs(1))
        {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (how, held, refresh);
}

/// An action whose outcome is said in a toast (`say`), then handed to
/// `then` (read the list again, close the question). The page owns it, not
/// the row or card that started it, so a refresh that redraws them loses
/// no answer.
pub fn use_action_toast<I, O, Fut>(
    run: impl Fn(I) -> Fut + Send + Sync + 'static,
    say: impl Fn(&O) -> (String, ToastKind) + 'static,
    then: impl Fn(O) + 'static,
) -> Action<I, O>
where
    I: Clone + Send + Sync + 'static,
    O: Clone + Send + Sync + 'static,
    Fut: Future<Output = O> + Send + 'static,
{
    let toasts = use_toasts();
    let action = Action::new(move |input: &I| run(input.clone()));
    Effect::new(move |_| {
        if let Some(outcome) = action.value().get() {
            let (text, kind) = say(&outcome);
            toasts.show(text, kind);
            then(outcome);
        }
    });
    action
}
