//! Live updates for the signed-in pages: one `EventSource` on `/api/events`
//! per tab (opened by the shell in the browser only), its job events kept as
//! the latest event per job, its notifications as the set of unread ids.
//! When the stream errors the status turns to [`LiveStatus::Polling`] and
//! pages poll instead, until the browser's automatic reconnect succeeds.

use std::collections::{HashMap, HashSet};

use leptos::prelude::*;

use crate::dto::LiveJobEvent;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveStatus {
    /// Not connected yet (and always on the server).
    Connecting,
    /// Events arrive as they happen.
    Live,
    /// The stream failed; pages poll every 2 s.
    Polling,
}

impl LiveStatus {
    /// The word shown beside the header's dot.
    pub fn word(self) -> &'static str {
        match self {
            Self::Connecting => "Connecting",
            Self::Live => "Live",
            Self::Polling => "Polling",
        }
    }

    /// The whole sentence, for screen readers and the tooltip.
    pub fn description(self) -> &'static str {
        match self {
            Self::Connecting => "Connecting to live updates",
            Self::Live => "Live updates on",
            Self::Polling => "Live updates interrupted; refreshing every 2 s",
        }
    }
}

/// The shell's live state, provided as context to every signed-in page.
#[derive(Debug, Clone, Copy)]
pub struct Live {
    /// The latest event of each job, with an increasing sequence number so a
    /// repeated event still counts as new.
    pub jobs: RwSignal<HashMap<String, (u64, LiveJobEvent)>>,
    pub status: RwSignal<LiveStatus>,
    /// Unread notifications announced on the stream.
    pub unread: RwSignal<HashSet<String>>,
    /// Notifications marked read in this tab.
    pub read: RwSignal<HashSet<String>>,
    seq: StoredValue<u64>,
}

impl Default for Live {
    fn default() -> Self {
        Self::new()
    }
}

impl Live {
    pub fn new() -> Self {
        Self {
            jobs: RwSignal::new(HashMap::new()),
            status: RwSignal::new(LiveStatus::Connecting),
            unread: RwSignal::new(HashSet::new()),
            read: RwSignal::new(HashSet::new()),
            seq: StoredValue::new(0),
        }
    }

    /// Records a job event from the stream.
    pub fn push(&self, e: LiveJobEvent) {
        let seq = self.seq.get_value() + 1;
        self.seq.set_value(seq);
        self.jobs.update(|m| {
            m.insert(e.job_id.clone(), (seq, e));
        });
    }

    /// The number to show on the bell: unread notifications known from the
    /// server (`seed`) or the stream, less those read in this tab.
    pub fn unread_count(&self, seed: &[String]) -> usize {
        let read = self.read.get();
        let live = self.unread.get();
        seed.iter()
            .chain(live.iter().filter(|id| !seed.contains(id)))
            .filter(|id| !read.contains(*id))
            .count()
    }

    pub fn mark_read(&self, id: &str) {
        self.read.update(|r| {
            r.insert(id.to_string());
        });
    }
}

/// Returns the shell's live state.
pub fn use_live() -> Live {
    use_context::<Live>().unwrap_or_default()
}

/// The open stream and the callbacks it holds; closed on drop.
#[cfg(feature = "hydrate")]
pub struct Connection {
    source: web_sys::EventSource,
    _callbacks: Vec<wasm_bindgen::closure::Closure<dyn FnMut(web_sys::Event)>>,
}

#[cfg(feature = "hydrate")]
impl Drop for Connection {
    fn drop(&mut self) {
        self.source.close();
    }
}

/// Opens `/api/events`, resuming after event `cursor`.
#[cfg(feature = "hydrate")]
pub fn connect(live: Live, cursor: i64) -> Option<Connection> {
    use wasm_bindgen::{closure::Closure, JsCast};
    use web_sys::{Event, EventSource, MessageEvent};

    let source = match EventSource::new(&format!("/api/events?last_event_id={cursor}")) {
        Ok(s) => s,
        Err(_) => {
            live.status.set(LiveStatus::Polling);
            return None;
        }
    };
    fn data(e: &Event) -> Option<String> {
        e.dyn_ref::<MessageEvent>()
            .and_then(|m| m.data().as_string())
    }
    let on_job = Closure::<dyn FnMut(Event)>::new(move |e: Event| {
        if let Some(ev) = data(&e).and_then(|d| serde_json::from_str::<LiveJobEvent>(&d).ok()) {
            live.push(ev);
        }
    });
    let on_notification = Closure::<dyn FnMut(Event)>::new(move |e: Event| {
        if let Some(n) =
            data(&e).and_then(|d| serde_json::from_str::<crate::dto::NotificationDto>(&d).ok())
        {
            if n.read_at.is_none() {
                live.unread.update(|u| {
                    u.insert(n.id);
                });
            }
        }
    });
    let on_open = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
        live.status.set(LiveStatus::Live);
    });
    // The server will not replay this much history: show the page afresh.
    let on_reload = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
        if let Some(w) = web_sys::window() {
            let _ = w.location().reload();
        }
    });
    let on_error = Closure::<dyn FnMut(Event)>::new(move |_: Event| {
        // The browser reconnects by itself (sending Last-Event-ID); poll meanwhile.
        live.status.set(LiveStatus::Polling);
    });
    let _ = source.add_event_listener_with_callback("job", on_job.as_ref().unchecked_ref());
    let _ = source
        .add_event_listener_with_callback("notification", on_notification.as_ref().unchecked_ref());
    let _ = source.add_event_listener_with_callback("reload", on_reload.as_ref().unchecked_ref());
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Some(Connection {
        source,
        _callbacks: vec![on_job, on_notification, on_open, on_reload, on_error],
    })
}

/// While the live stream is down, bumps `poll` every 2 s as long as
/// `unfinished()` holds: a page's fallback to keep its object current
/// (also for what the caller's stream does not carry, such as another
/// tenant's job an operator is reading).
pub fn poll_while_down(live: Live, poll: RwSignal<u32>, unfinished: impl Fn() -> bool + 'static) {
    poll_while(poll, move || {
        unfinished() && live.status.get_untracked() != LiveStatus::Live
    });
}

/// Bumps `poll` every 2 s while `cond()` holds. In the browser only.
pub fn poll_while(poll: RwSignal<u32>, cond: impl Fn() -> bool + 'static) {
    #[cfg(feature = "hydrate")]
    {
        let tick = move || {
            if cond() {
                poll.update(|n| *n += 1);
            }
        };
        if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_secs(2)) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (poll, cond);
}

#[cfg(test)]
mod tests {
    use super::LiveStatus;

    #[test]
    fn every_status_has_a_word_and_a_sentence() {
        for s in [
            LiveStatus::Connecting,
            LiveStatus::Live,
            LiveStatus::Polling,
        ] {
            assert!(!s.word().is_empty());
            assert!(
                s.description().contains("live updates")
                    || s.description().contains("Live updates")
            );
        }
        assert_eq!(LiveStatus::Polling.word(), "Polling");
    }
}
