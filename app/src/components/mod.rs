pub mod charts;
pub mod layout;
pub mod progress;
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
