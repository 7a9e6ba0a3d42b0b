//! A table whose rows can be selected for a bulk action: the selection,
//! the header's "Select all" box and each row's box.
//!
//! Its handlers may run on a stale table, still shown while a refetch
//! replaces it after its owner was disposed (leptos#4350): every read and
//! write here is a `try_` form, a no-op then.

use std::collections::HashSet;

use leptos::prelude::*;

/// The ids of a table's rows and those selected.
#[derive(Clone, Copy)]
pub struct Selection {
    rows: Signal<Vec<String>>,
    selected: RwSignal<HashSet<String>>,
}

impl Selection {
    /// A selection of `rows`' ids, none selected.
    pub fn new(rows: impl Fn() -> Vec<String> + Send + Sync + 'static) -> Self {
        Self {
            rows: Signal::derive(rows),
            selected: RwSignal::new(HashSet::new()),
        }
    }

    /// Whether every row, and at least one, is selected.
    pub fn all(&self) -> bool {
        let rows = self.rows.try_get().unwrap_or_default();
        !rows.is_empty()
            && self
                .selected
                .try_with(|s| rows.iter().all(|id| s.contains(id)))
                .unwrap_or(false)
    }

    pub fn toggle_all(&self) {
        let all = if self.all() {
            HashSet::new()
        } else {
            self.rows
                .try_get_untracked()
                .unwrap_or_default()
                .into_iter()
                .collect()
        };
        self.selected.try_set(all);
    }

    pub fn toggle(&self, id: &str) {
        self.selected.try_update(|s| {
            if !s.remove(id) {
                s.insert(id.to_string());
            }
        });
    }

    pub fn contains(&self, id: &str) -> bool {
        self.selected.try_with(|s| s.contains(id)).unwrap_or(false)
    }

    pub fn count(&self) -> usize {
        self.selected.try_with(HashSet::len).unwrap_or(0)
    }

    /// The selected ids in the rows' order; empty once the table is gone.
    pub fn ids(&self) -> Vec<String> {
        let rows = self.rows.try_get_untracked().unwrap_or_default();
        self.selected
            .try_with_untracked(|s| rows.into_iter().filter(|id| s.contains(id)).collect())
            .unwrap_or_default()
    }

    /// Keeps selected only the ids `keep` accepts (rows that are still there).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.selected.try_update(|s| s.retain(|id| keep(id)));
    }
}

/// The header cell that selects every row, or none.
#[component]
pub fn SelectAll(selection: Selection) -> impl IntoView {
    view! {
        <th scope="col" class="check">
            <input
                type="checkbox"
                aria-label="Select all"
                prop:checked=move || selection.all()
                on:change=move |_| selection.toggle_all()
            />
        </th>
    }
}

/// A row's cell that selects it; `name` says which row to a screen reader.
#[component]
pub fn SelectRow(selection: Selection, id: String, #[prop(into)] name: String) -> impl IntoView {
    let checked = {
        let id = id.clone();
        move || selection.contains(&id)
    };
    view! {
        <td class="check">
            <input
                type="checkbox"
                aria-label=format!("Select {name}")
                prop:checked=checked
                on:change=move |_| selection.toggle(&id)
            />
        </td>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_all_selects_every_row_and_again_none() {
        let owner = Owner::new();
        owner.with(|| {
            let rows = RwSignal::new(vec!["a".to_string(), "b".to_string()]);
            let s = Selection::new(move || rows.get());
            assert!(!s.all());
            s.toggle("b");
            assert_eq!(s.ids(), vec!["b".to_string()]);
            s.toggle_all();
            assert!(s.all());
            assert_eq!(s.ids(), vec!["a".to_string(), "b".to_string()]);
            s.retain(|id| id == "a");
            assert_eq!(s.count(), 1);
            s.toggle_all();
            assert_eq!(s.count(), 2);
            s.toggle_all();
            assert_eq!(s.count(), 0);
        });
    }
}
