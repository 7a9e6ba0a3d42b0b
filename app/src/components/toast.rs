//! Toasts: short confirmations of what just happened ("Re-enqueued …"),
//! announced politely to screen readers through one `role="status"` region.

use leptos::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToastKind {
    Ok,
    Bad,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Toast {
    id: u64,
    text: String,
    kind: ToastKind,
}

/// The shell's toast queue, provided as context.
#[derive(Debug, Clone, Copy)]
pub struct Toasts {
    items: RwSignal<Vec<Toast>>,
    next: StoredValue<u64>,
}

impl Default for Toasts {
    fn default() -> Self {
        Self::new()
    }
}

/// How long a toast stays, in milliseconds.
#[cfg(feature = "hydrate")]
const TOAST_MS: u64 = 10_000;

impl Toasts {
    pub fn new() -> Self {
        Self {
            items: RwSignal::new(Vec::new()),
            next: StoredValue::new(0),
        }
    }

    pub fn show(&self, text: impl Into<String>, kind: ToastKind) {
        let id = self.next.get_value() + 1;
        self.next.set_value(id);
        self.items.update(|v| {
            v.push(Toast {
                id,
                text: text.into(),
                kind,
            })
        });
        // Timers exist only in the browser; toasts only come from clicks there.
        #[cfg(feature = "hydrate")]
        {
            let items = self.items;
            set_timeout(
                move || items.update(|v| v.retain(|t| t.id != id)),
                std::time::Duration::from_millis(TOAST_MS),
            );
        }
    }

    fn dismiss(&self, id: u64) {
        self.items.update(|v| v.retain(|t| t.id != id));
    }
}

pub fn use_toasts() -> Toasts {
    use_context::<Toasts>().unwrap_or_default()
}

/// The live region the toasts appear in (one per page).
#[component]
pub fn ToastRegion() -> impl IntoView {
    let toasts = use_toasts();
    view! {
        <div class="toasts" role="status" aria-live="polite">
            <For each=move || toasts.items.get() key=|t| t.id let:t>
                <div class=move || if t.kind == ToastKind::Ok { "toast ok" } else { "toast bad" }>
                    <span>{t.text.clone()}</span>
                    <button
                        class="icon-btn"
                        aria-label="Dismiss"
                        on:click=move |_| toasts.dismiss(t.id)
                    >
                        "×"
                    </button>
                </div>
            </For>
        </div>
    }
}
