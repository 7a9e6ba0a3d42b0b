pub mod charts;
pub mod confirm;
pub mod filters;
pub mod layout;
pub mod loaded;
pub mod progress;
pub mod selection;
pub mod toast;

/// A `keydown` handler that gives a question's safe answer (`answer`) on
/// Escape, as a dialog would.
pub fn on_escape(
    answer: impl Fn() + Clone + 'static,
) -> impl Fn(leptos::ev::KeyboardEvent) + Clone + 'static {
    move |ev| {
        if ev.key() == "Escape" {
            answer();
        }
    }
}
