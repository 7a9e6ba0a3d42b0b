//! A question that waits for a yes before something hard to undo: a bulk
//! cancel, a discard, a retry of a permanent failure, pausing the paid
//! queue. The safe answer has the focus when it appears and Escape gives
//! it, as a dialog's would. Inline (a `group` named by `label`, in a row or
//! a card) or, without a label, a dialog above a list (`alertdialog`, named
//! by its question and described by its detail).

use leptos::prelude::*;

/// The id the dialog form's question and detail carry (one per page).
const QUESTION_ID: &str = "confirm-question";
const DETAIL_ID: &str = "confirm-detail";

#[component]
pub fn Confirm(
    /// What is asked: `Discard 3 dead letters for good?`.
    #[prop(into)]
    question: String,
    /// The yes button's words: `Confirm discard`.
    #[prop(into)]
    yes: Signal<String>,
    /// The safe answer's words: `Cancel`, `Keep running`.
    #[prop(into)]
    no: String,
    /// Runs on yes.
    on_yes: Callback<()>,
    /// Runs on the safe answer (and on Escape).
    on_no: Callback<()>,
    /// The accessible name of an inline question; none makes it a dialog.
    #[prop(optional, into)]
    label: Option<String>,
    /// What yes does, under the question.
    #[prop(optional, into)]
    detail: Option<String>,
    /// What the asker should know first (it will fail again).
    #[prop(optional_no_strip)]
    warning: Option<String>,
    /// Yes destroys something (a red button).
    #[prop(optional)]
    danger: bool,
    /// Yes is disabled while what it started runs.
    #[prop(optional, into)]
    busy: Signal<bool>,
    /// A class of its own besides `confirm` (inline) or `card dialog`.
    #[prop(optional)]
    class: &'static str,
) -> impl IntoView {
    let safe = NodeRef::<leptos::html::Button>::new();
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(b) = safe.get() {
            let _ = b.focus();
        }
    });
    let dialog = label.is_none();
    let yes_class = match (danger, dialog) {
        (true, true) => "btn danger solid",
        (false, true) => "btn primary",
        (true, false) => "btn small danger solid",
        (false, false) => "btn small primary",
    };
    let no_class = if dialog {
        "btn ghost"
    } else {
        "btn small ghost"
    };
    let buttons = view! {
        <button class=yes_class disabled=move || busy.get() on:click=move |_| on_yes.run(())>
            {move || if busy.get() { "Working…".to_string() } else { yes.get() }}
        </button>
        <button class=no_class node_ref=safe on:click=move |_| on_no.run(())>
            {no}
        </button>
    };
    let escape = super::on_escape(move || on_no.run(()));
    let extra = |p: Option<String>, class: &'static str, id: Option<&'static str>| {
        p.map(|text| view! { <p class=class id=id>{text}</p> })
    };
    match label {
        Some(label) => view! {
            <div class=format!("confirm {class}") role="group" aria-label=label on:keydown=escape>
                <span class="small">{question}</span>
                {extra(detail, "muted small", None)}
                {extra(warning, "warning small", None)}
                <span class="confirm-buttons">{buttons}</span>
            </div>
        }
        .into_any(),
        None => view! {
            <div
                class=format!("card dialog {class}")
                role="alertdialog"
                aria-labelledby=QUESTION_ID
                aria-describedby=DETAIL_ID
                on:keydown=escape
            >
                <p id=QUESTION_ID class="dialog-question">{question}</p>
                {extra(detail, "muted small", Some(DETAIL_ID))}
                {extra(warning, "warning small", None)}
                <div class="row">{buttons}</div>
            </div>
        }
        .into_any(),
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    fn html(inline: bool) -> String {
        let owner = Owner::new();
        owner.with(|| {
            let (yes, no) = (Callback::new(|_| {}), Callback::new(|_| {}));
            if inline {
                view! {
                    <Confirm
                        question="Discard for good?"
                        yes="Confirm discard".to_string()
                        no="Cancel"
                        on_yes=yes
                        on_no=no
                        label="Confirm discarding a.pdf"
                        detail="Its job stays failed."
                        danger=true
                    />
                }
                .to_html()
            } else {
                view! {
                    <Confirm
                        question="Cancel all 3 pending jobs?"
                        yes="Cancel 3 jobs".to_string()
                        no="Go back"
                        on_yes=yes
                        on_no=no
                        detail="Running jobs stop at their next check."
                    />
                }
                .to_html()
            }
        })
    }

    #[test]
    fn an_inline_question_is_a_named_group_with_its_answers() {
        let inline = html(true);
        assert!(inline.contains(r#"role="group""#), "{inline}");
        assert!(
            inline.contains(r#"aria-label="Confirm discarding a.pdf""#),
            "{inline}"
        );
        assert!(inline.contains("btn small danger solid"), "{inline}");
        assert!(inline.contains(">Confirm discard<"), "{inline}");
        assert!(inline.contains(">Cancel<"), "{inline}");
        assert!(inline.contains("Its job stays failed."), "{inline}");
    }

    #[test]
    fn without_a_label_it_is_a_dialog_named_by_its_question() {
        let dialog = html(false);
        assert!(dialog.contains(r#"role="alertdialog""#), "{dialog}");
        assert!(
            dialog.contains(r#"aria-labelledby="confirm-question""#),
            "{dialog}"
        );
        assert!(
            dialog.contains(
                r#"id="confirm-question" class="dialog-question">Cancel all 3 pending jobs?<"#
            ),
            "{dialog}"
        );
        assert!(dialog.contains(r#"id="confirm-detail""#), "{dialog}");
        assert!(dialog.contains(r#"class="btn primary""#), "{dialog}");
        assert!(!dialog.contains("role=\"group\""), "{dialog}");
    }
}
