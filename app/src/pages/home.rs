//! `/`: upload (drop zone and file picker, several files at once, each with
//! its upload progress) and the user's recent jobs with live per-step
//! progress from the shell's event stream, or polling when it fails.
//!
//! A file the tenant uploaded before (same bytes) is not kept a second time
//! without asking: the upload refuses duplicates, and the card asks "You
//! uploaded this file on … as …; upload it again?"; yes sends it again,
//! allowing the copy. Each job card says when its document was uploaded
//! and, to administrators, by whom.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::jobs::my_jobs,
    components::{
        layout::UserResource,
        progress::{apply_event, progress_text, StepBar},
    },
    dto::{JobDto, LiveJobEvent},
    format,
    live::use_live,
};

#[component]
pub fn HomePage() -> impl IntoView {
    let jobs = Resource::new(|| (), |_| my_jobs(50));
    // Jobs accepted in this tab, newest first, until the list shows them.
    let added: RwSignal<Vec<JobDto>> = RwSignal::new(Vec::new());
    let user = use_context::<UserResource>();
    view! {
        <Title text="Documents" />
        <div class="page-head">
            <h1>"Your documents"</h1>
            <p class="muted">"Upload files; watch them become searchable."</p>
        </div>
        // A viewer reads only: no upload box, a word why instead.
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let viewer = match user {
                    Some(u) => u.await.ok().flatten().is_some_and(|u| u.reads_only()),
                    None => false,
                };
                if viewer {
                    view! {
                        <p class="muted read-only-note">
                            "Your role reads only: ask an administrator to upload documents."
                        </p>
                    }
                        .into_any()
                } else {
                    view! { <Uploader added /> }.into_any()
                }
            })}
        </Suspense>
        <h2 id="jobs-title">"Recent jobs"</h2>
        <Suspense fallback=|| view! { <p class="muted">"Loading jobs…"</p> }>
            {move || Suspend::new(async move {
                match jobs.await {
                    Ok(list) => view! { <JobList initial=list added /> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(
    not(feature = "hydrate"),
    expect(dead_code, reason = "uploads start in the browser")
)]
enum UploadStatus {
    Uploading,
    /// Accepted; its job is on its way into the list.
    Accepted(String),
    Rejected(String),
    /// The tenant has this file already; the question to ask.
    Duplicate(String),
}

/// The question for a refused duplicate, from the server's message (`you
/// uploaded this file on 2026-12-01 as ledger.txt; upload it with …`):
/// `You uploaded this file on 2026-12-01 as ledger.txt; upload it again?`.
#[cfg_attr(
    all(not(feature = "hydrate"), not(test)),
    expect(dead_code, reason = "uploads run in the browser")
)]
fn duplicate_question(message: &str) -> String {
    let said = message.split(';').next().unwrap_or(message).trim();
    let said = said.trim_end_matches('.');
    format!("{}; upload it again?", format::capitalised(said))
}

#[derive(Debug, Clone)]
struct UploadItem {
    key: u64,
    name: String,
    size: f64,
    progress: RwSignal<f64>,
    status: RwSignal<UploadStatus>,
}

#[component]
fn Uploader(added: RwSignal<Vec<JobDto>>) -> impl IntoView {
    let items: RwSignal<Vec<UploadItem>> = RwSignal::new(Vec::new());
    let dragging = RwSignal::new(false);
    let next = StoredValue::new(0u64);
    // What screen readers hear (an `aria-live` region): each upload's start
    // and outcome, not every percent. The reason of a refusal and the
    // duplicate's question are not repeated here: their own elements are
    // alerts, read out as they appear.
    let announce = RwSignal::new(String::new());
    // The files of the cards, until their upload is over (a duplicate may be
    // sent again).
    #[cfg(feature = "hydrate")]
    let files = StoredValue::new_local(std::collections::HashMap::<u64, web_sys::File>::new());
    // The requests of the uploads under way, so that one can be cancelled.
    #[cfg(feature = "hydrate")]
    let requests =
        StoredValue::new_local(std::collections::HashMap::<u64, web_sys::XmlHttpRequest>::new());
    // A drop of several files is one batch: each card's batch until its
    // first answer, and how many cards of each batch await theirs (the
    // batch is closed when none does; a duplicate sent again afterwards is
    // a document of its own).
    #[cfg(feature = "hydrate")]
    let batch_of = StoredValue::new_local(std::collections::HashMap::<u64, String>::new());
    #[cfg(feature = "hydrate")]
    let awaiting = StoredValue::new_local(std::collections::HashMap::<String, usize>::new());
    // The latest batch: its id, how many files it has, and whether all of
    // them were answered and the batch closed (its link is offered then:
    // leaving the page earlier would leave the batch open).
    let batch_link = RwSignal::new(None::<(String, usize, bool)>);
    // Card `key` has its first answer (or was cancelled): its batch closes
    // when it was the last one awaited.
    #[cfg(feature = "hydrate")]
    let settle = move |key: u64| {
        let Some(batch) = batch_of.try_update_value(|m| m.remove(&key)).flatten() else {
            return;
        };
        let last = awaiting
            .try_update_value(|m| {
                let left = m.get_mut(&batch).map(|n| {
                    *n = n.saturating_sub(1);
                    *n
                });
                if left == Some(0) {
                    m.remove(&batch);
                }
                left == Some(0)
            })
            .unwrap_or(false);
        if last {
            leptos::task::spawn_local(async move {
                if crate::api::batches::close_batch(batch.clone())
                    .await
                    .is_ok()
                {
                    batch_link.try_update(|b| {
                        if let Some((id, _, closed)) = b {
                            *closed |= *id == batch;
                        }
                    });
                }
            });
        }
    };

    // Sends the file of card `key`; `refuse`: a duplicate comes back as a question.
    #[cfg(feature = "hydrate")]
    let send = move |key: u64, refuse: bool| {
        let Some(file) = files.with_value(|m| m.get(&key).cloned()) else {
            return;
        };
        let Some((progress, status)) = items.with_untracked(|v| {
            v.iter()
                .find(|it| it.key == key)
                .map(|it| (it.progress, it.status))
        }) else {
            return;
        };
        let name = items.with_untracked(|v| {
            v.iter()
                .find(|it| it.key == key)
                .map(|it| it.name.clone())
                .unwrap_or_default()
        });
        progress.set(0.0);
        status.set(UploadStatus::Uploading);
        announce.set(format!("Uploading {name}…"));
        let forget = move || {
            files.try_update_value(|m| {
                m.remove(&key);
            });
        };
        let sent = move || {
            requests.try_update_value(|m| {
                m.remove(&key);
            });
        };
        let shown = name.clone();
        let batch = batch_of.with_value(|m| m.get(&key).cloned());
        let started = crate::browser::upload(
            &file,
            refuse,
            batch.as_deref(),
            move |f| {
                progress.try_set(f);
            },
            move |result| {
                sent();
                settle(key);
                match result {
                    Ok(accepted) => {
                        forget();
                        progress.try_set(1.0);
                        status.try_set(UploadStatus::Accepted(accepted.job_id.clone()));
                        announce.try_set(format!("{name} uploaded; its job is queued."));
                        leptos::task::spawn_local(async move {
                            if let Ok(job) =
                                crate::browser::get_json::<JobDto>(&accepted.status_url).await
                            {
                                added.try_update(|v| {
                                    if !v.iter().any(|j| j.id == job.id) {
                                        v.insert(0, job);
                                    }
                                });
                                items.try_update(|v| v.retain(|it| it.key != key));
                            }
                        });
                    }
                    Err(e) if e.code.as_deref() == Some("duplicate") => {
                        let question = duplicate_question(&e.message);
                        announce.try_set(format!("{name} was uploaded before."));
                        status.try_set(UploadStatus::Duplicate(question));
                    }
                    Err(e) => {
                        forget();
                        announce.try_set(format!("{name} was not uploaded."));
                        status.try_set(UploadStatus::Rejected(e.message));
                    }
                }
            },
        );
        match started {
            Ok(request) => requests.update_value(|m| {
                m.insert(key, request);
            }),
            Err(msg) => {
                forget();
                settle(key);
                announce.set(format!("{shown} was not uploaded."));
                status.set(UploadStatus::Rejected(msg));
            }
        }
    };

    // Starts one upload per file (client checks first); several files
    // that pass them go as one batch.
    #[cfg(feature = "hydrate")]
    let start = move |list: web_sys::FileList| {
        let mut keys = Vec::new();
        for i in 0..list.length() {
            let Some(file) = list.get(i) else { continue };
            let key = next.get_value() + 1;
            next.set_value(key);
            let item = UploadItem {
                key,
                name: file.name(),
                size: file.size(),
                progress: RwSignal::new(0.0),
                status: RwSignal::new(UploadStatus::Uploading),
            };
            let status = item.status;
            let checked = format::check_upload(&item.name, item.size);
            items.update(|v| v.push(item));
            if let Err(msg) = checked {
                announce.set(format!("{} was not uploaded.", file.name()));
                status.set(UploadStatus::Rejected(msg));
                continue;
            }
            files.update_value(|m| {
                m.insert(key, file);
            });
            keys.push(key);
        }
        if keys.len() < 2 {
            keys.into_iter().for_each(|key| send(key, true));
            return;
        }
        let first = items.with_untracked(|v| {
            v.iter()
                .find(|it| Some(it.key) == keys.first().copied())
                .map(|it| it.name.clone())
                .unwrap_or_default()
        });
        leptos::task::spawn_local(async move {
            let name = format!("{} files from {first}", keys.len());
            // Without a batch (it could not be opened) each file still goes.
            if let Ok(batch) = crate::api::batches::create_batch(name).await {
                batch_of.update_value(|m| {
                    for key in &keys {
                        m.insert(*key, batch.id.clone());
                    }
                });
                awaiting.update_value(|m| {
                    m.insert(batch.id.clone(), keys.len());
                });
                batch_link.set(Some((batch.id, keys.len(), false)));
            }
            keys.into_iter().for_each(|key| send(key, true));
        });
    };

    // The answer to a duplicate's question: send it again, or drop it.
    let answer = Callback::new(move |(key, again): (u64, bool)| {
        #[cfg(feature = "hydrate")]
        if again {
            send(key, false);
        } else {
            files.update_value(|m| {
                m.remove(&key);
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = again;
        if !again {
            items.update(|v| v.retain(|it| it.key != key));
        }
        focus_picker();
    });

    // Cancels an upload under way: its request is aborted, and its card goes.
    let cancel = Callback::new(move |key: u64| {
        #[cfg(feature = "hydrate")]
        {
            if let Some(request) = requests.try_update_value(|m| m.remove(&key)).flatten() {
                let _ = request.abort();
            }
            settle(key);
            files.update_value(|m| {
                m.remove(&key);
            });
        }
        let name = items.with_untracked(|v| {
            v.iter()
                .find(|it| it.key == key)
                .map(|it| it.name.clone())
                .unwrap_or_default()
        });
        items.update(|v| v.retain(|it| it.key != key));
        announce.set(format!(
            "Upload of {name} cancelled; nothing of it was kept."
        ));
        focus_picker();
    });

    #[cfg(not(feature = "hydrate"))]
    let _ = (added, next);

    let on_change = move |ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        {
            use wasm_bindgen::JsCast;
            if let Some(input) = ev
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            {
                if let Some(files) = input.files() {
                    start(files);
                }
                // Choosing the same file again should upload it again.
                input.set_value("");
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    };
    // A focused file input opens its picker on Space; Enter should too, as
    // on any button. (Chromium does nothing by default on Enter here; a
    // `preventDefault` would cost the keypress its user activation and the
    // picker would not open.)
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        if ev.key() == "Enter" {
            #[cfg(feature = "hydrate")]
            {
                use wasm_bindgen::JsCast;
                if let Some(input) = ev
                    .target()
                    .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
                {
                    input.click();
                }
            }
        }
    };
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        dragging.set(false);
        #[cfg(feature = "hydrate")]
        if let Some(files) = ev.data_transfer().and_then(|d| d.files()) {
            start(files);
        }
    };

    view! {
        <section class="uploader" aria-label="Upload documents">
            <div
                class="dropzone"
                role="group"
                aria-label="Drop files here"
                class:dragging=dragging
                on:dragenter=move |ev: leptos::ev::DragEvent| {
                    ev.prevent_default();
                    dragging.set(true);
                }
                on:dragover=move |ev: leptos::ev::DragEvent| {
                    ev.prevent_default();
                    dragging.set(true);
                }
                on:dragleave=move |_| dragging.set(false)
                on:drop=on_drop
            >
                <svg class="drop-icon" viewBox="0 0 24 24" width="36" height="36" aria-hidden="true">
                    <path
                        d="M12 3l5 5h-3v6h-4V8H7l5-5Zm-7 14h14v2H5v-2Z"
                        fill="currentColor"
                    />
                </svg>
                <p class="drop-title">"Drop files here"</p>
                <p class="muted">"or"</p>
                <input
                    id="file-input"
                    class="sr-only file-input"
                    type="file"
                    multiple
                    accept=format::ACCEPT_ATTR
                    on:change=on_change
                    on:keydown=on_key
                />
                <label for="file-input" class="btn primary">"Choose files"</label>
                <p class="muted small">"PDF (scans too), Word, PowerPoint, Excel, OpenDocument, EPUB, e-mail (.eml), CSV, text, Markdown, HTML, or PNG, JPEG and TIFF images (read by OCR) · up to 50 MB each"</p>
            </div>
            {move || {
                batch_link
                    .get()
                    .map(|(id, n, closed)| {
                        view! {
                            <p class="note" data-testid="batch-link">
                                {if closed {
                                    view! {
                                        {format!("These {n} files are one batch. ")}
                                        <a href=format!("/batches/{id}")>"Follow the batch"</a>
                                    }
                                        .into_any()
                                } else {
                                    format!("Uploading these {n} files as one batch…").into_any()
                                }}
                            </p>
                        }
                    })
            }}
            <div id="upload-announcer" class="sr-only" aria-live="polite" aria-atomic="true">
                {move || announce.get()}
            </div>
            <ul class="uploads" aria-label="Uploads">
                <For each=move || items.get() key=|it| it.key let:it>
                    <UploadRow item=it items answer cancel />
                </For>
            </ul>
        </section>
    }
}

/// Gives the focus to the file picker: where a keyboard user goes on after
/// a button that removed itself (an answered question, a cancelled upload),
/// not the top of the page.
fn focus_picker() {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        if let Some(input) = document()
            .get_element_by_id("file-input")
            .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
        {
            let _ = input.focus();
        }
    }
}

#[component]
fn UploadRow(
    item: UploadItem,
    items: RwSignal<Vec<UploadItem>>,
    answer: Callback<(u64, bool)>,
    cancel: Callback<u64>,
) -> impl IntoView {
    let UploadItem {
        key,
        name,
        size,
        progress,
        status,
    } = item;
    let pct = move || (progress.get() * 100.0).round() as u32;
    let label = format!("Upload of {name}");
    view! {
        <li class=move || match status.get() {
            UploadStatus::Rejected(_) => "upload card rejected",
            UploadStatus::Duplicate(_) => "upload card duplicate",
            _ => "upload card",
        }>
            <div class="upload-head">
                <span class="upload-name">{name.clone()}</span>
                <span class="muted small">{format::bytes(size)}</span>
            </div>
            {move || match status.get() {
                UploadStatus::Rejected(msg) => {
                    view! {
                        <p class="error" role="alert">{msg}</p>
                        <button
                            class="btn ghost small"
                            on:click=move |_| items.update(|v| v.retain(|it| it.key != key))
                        >
                            "Dismiss"
                        </button>
                    }
                        .into_any()
                }
                UploadStatus::Uploading => {
                    view! {
                        <div
                            class="bar"
                            role="progressbar"
                            aria-label=label.clone()
                            aria-valuemin="0"
                            aria-valuemax="100"
                            aria-valuenow=move || pct().to_string()
                        >
                            <span class="bar-fill" style=move || format!("width: {}%", pct())></span>
                        </div>
                        <div class="row">
                            <p class="muted small">{move || format!("Uploading… {}%", pct())}</p>
                            <button
                                class="btn ghost small"
                                aria-label=format!("Cancel the upload of {name}")
                                on:click=move |_| cancel.run(key)
                            >
                                "Cancel"
                            </button>
                        </div>
                    }
                        .into_any()
                }
                UploadStatus::Duplicate(question) => {
                    view! {
                        <div
                            class="duplicate"
                            role="group"
                            aria-label=format!("{name} was uploaded before")
                            on:keydown=crate::components::on_escape(move || answer.run((key, false)))
                        >
                            <p role="alert">{question}</p>
                            <div class="row">
                                <button class="btn small primary" on:click=move |_| answer.run((key, true))>
                                    "Upload again"
                                </button>
                                <button class="btn small ghost" on:click=move |_| answer.run((key, false))>
                                    "Don't upload"
                                </button>
                            </div>
                        </div>
                    }
                        .into_any()
                }
                UploadStatus::Accepted(job_id) => {
                    view! {
                        <p class="muted small">
                            "Uploaded. "
                            <a href=format!("/jobs/{job_id}")>"Its job"</a>
                            " is queued."
                        </p>
                    }
                        .into_any()
                }
            }}
        </li>
    }
}

/// A job card's state: the job as last known, and a counter so only the
/// newest of overlapping refreshes lands.
#[derive(Debug, Clone, Copy)]
struct Card {
    job: RwSignal<JobDto>,
    generation: StoredValue<u64>,
}

impl Card {
    fn new(job: JobDto) -> Self {
        Self {
            job: RwSignal::new(job),
            generation: StoredValue::new(0),
        }
    }

    fn id(&self) -> String {
        self.job.with_untracked(|j| j.id.clone())
    }

    #[cfg_attr(
        not(feature = "hydrate"),
        expect(dead_code, reason = "polling runs in the browser")
    )]
    fn finished(&self) -> bool {
        self.job
            .with_untracked(|j| matches!(j.state.as_str(), "done" | "failed" | "cancelled"))
    }

    /// Replaces the job with the server's current view (`GET /api/jobs/{id}`).
    fn refresh(self) {
        #[cfg(not(feature = "hydrate"))]
        let _ = self.generation;
        #[cfg(feature = "hydrate")]
        {
            let generation = self.generation.get_value() + 1;
            self.generation.set_value(generation);
            let url = format!("/api/jobs/{}", self.id());
            leptos::task::spawn_local(async move {
                if let Ok(job) = crate::browser::get_json::<JobDto>(&url).await {
                    if self.generation.try_get_value() == Some(generation) {
                        self.job.try_set(job);
                    }
                }
            });
        }
    }
}

#[component]
fn JobList(initial: Vec<JobDto>, added: RwSignal<Vec<JobDto>>) -> impl IntoView {
    let cards: RwSignal<Vec<Card>> = RwSignal::new(initial.into_iter().map(Card::new).collect());
    let live = use_live();

    // Cards made later (from effects and tasks) belong to the list, not to
    // the effect that made them, which would dispose them on its next run.
    let owner = StoredValue::new(Owner::current());
    // Adds a job unless it is listed already, keeping newest first.
    let insert = move |job: JobDto| {
        let make = |job: JobDto| {
            owner.with_value(|o| match o {
                Some(o) => o.with(|| Card::new(job)),
                None => Card::new(job),
            })
        };
        let id = job.id.clone();
        let mut made = None;
        cards.update(|v| {
            if v.iter().any(|c| c.job.with_untracked(|j| j.id == job.id)) {
                return;
            }
            let at = v
                .iter()
                .position(|c| c.job.with_untracked(|j| j.enqueued_at <= job.enqueued_at))
                .unwrap_or(v.len());
            let card = make(job);
            made = Some(card);
            v.insert(at, card);
        });
        // The stream can beat the upload's own response: events that came
        // before the card existed still count, then the server has the word.
        if let Some(card) = made {
            if let Some((_, e)) = live.jobs.with_untracked(|m| m.get(&id).cloned()) {
                card.job.update(|j| apply_event(j, &e));
                card.refresh();
            }
        }
    };
    Effect::new(move |_| {
        for job in added.get() {
            insert(job);
        }
    });

    // Applies events that arrive while this list is shown.
    let start = live
        .jobs
        .with_untracked(|m| m.values().map(|(s, _)| *s).max().unwrap_or(0));
    Effect::new(move |last: Option<u64>| {
        let last = last.unwrap_or(start);
        let mut fresh: Vec<(u64, LiveJobEvent)> = live
            .jobs
            .with(|m| m.values().filter(|(s, _)| *s > last).cloned().collect());
        fresh.sort_by_key(|(s, _)| *s);
        let newest = fresh.last().map_or(last, |(s, _)| *s);
        for (_, e) in fresh {
            let card = cards.with_untracked(|v| {
                v.iter()
                    .find(|c| c.job.with_untracked(|j| j.id == e.job_id))
                    .copied()
            });
            match card {
                Some(card) => {
                    card.job.update(|j| apply_event(j, &e));
                    if e.progress.is_none() {
                        card.refresh();
                    }
                }
                None if e.state == "pending" => {
                    // Uploaded elsewhere (another tab, the API): show it too.
                    #[cfg(feature = "hydrate")]
                    leptos::task::spawn_local(async move {
                        let url = format!("/api/jobs/{}", e.job_id);
                        if let Ok(job) = crate::browser::get_json::<JobDto>(&url).await {
                            insert(job);
                        }
                    });
                }
                None => {}
            }
        }
        newest
    });

    // Polling fallback while the event stream is down.
    #[cfg(feature = "hydrate")]
    {
        let poll = move || {
            if live.status.get_untracked() == crate::live::LiveStatus::Polling {
                for card in cards.get_untracked() {
                    if !card.finished() {
                        card.refresh();
                    }
                }
            }
        };
        if let Ok(handle) = set_interval_with_handle(poll, std::time::Duration::from_secs(2)) {
            on_cleanup(move || handle.clear());
        }
    }

    view! {
        <Show
            when=move || cards.with(|v| !v.is_empty())
            fallback=|| {
                view! {
                    <p class="empty">"No documents yet. Uploads appear here with their progress."</p>
                }
            }
        >
            <ul class="jobs" aria-labelledby="jobs-title">
                <For each=move || cards.get() key=|c| c.id() let:card>
                    <JobCard job=card.job />
                </For>
            </ul>
        </Show>
    }
}

#[component]
fn JobCard(job: RwSignal<JobDto>) -> impl IntoView {
    let name = move || job.with(|j| j.filename.clone());
    let state = move || job.with(|j| j.state.clone());
    view! {
        <li class="job card" aria-label=name>
            <div class="job-head">
                <a class="job-name" href=move || job.with(|j| format!("/jobs/{}", j.id))>
                    {name}
                </a>
                <span class=move || format!("badge {}", state())>{state}</span>
            </div>
            <StepBar job />
            <div class="job-meta">
                <span class="progress-text">{move || job.with(progress_text)}</span>
                // Queues and attempts are operators' words; a document
                // tried more than once says so.
                <span class="muted small">
                    {move || job.with(|j| (j.attempt > 1).then(|| format!("tried {} times", j.attempt)))}
                </span>
            </div>
            <p class="muted small uploaded">
                {move || {
                    job.with(|j| {
                        let at = j.uploaded_at;
                        view! {
                            "Uploaded "
                            <time datetime=at.to_rfc3339()>{format::date_time(at)}</time>
                            {j.uploaded_by.clone().map(|by| format!(" by {by}"))}
                        }
                    })
                }}
            </p>
            {move || {
                job.with(|j| match j.state.as_str() {
                    "failed" => {
                        let reason =
                            format::job_failure(j).unwrap_or_else(|| "The job failed.".into());
                        Some(view! { <p class="reason bad">{reason}</p> }.into_any())
                    }
                    "retrying" => {
                        let why = format::job_failure(j).unwrap_or_default();
                        let when = j.next_attempt_at.map(|t| {
                            view! {
                                " Next attempt at "
                                <time datetime=t.to_rfc3339()>{format::time(t)}</time>
                                " UTC."
                            }
                        });
                        Some(
                            view! {
                                <p class="reason warn">
                                    {format!("Attempt {} failed. {why}", j.attempt)}
                                    {when}
                                </p>
                            }
                                .into_any(),
                        )
                    }
                    _ => None,
                })
            }}
        </li>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_duplicate_becomes_a_question() {
        assert_eq!(
            duplicate_question(
                "you uploaded this file on 2026-12-01 as ledger.txt; upload it with duplicates=allow to keep a second copy"
            ),
            "You uploaded this file on 2026-12-01 as ledger.txt; upload it again?"
        );
        assert_eq!(
            duplicate_question("you uploaded this file before."),
            "You uploaded this file before; upload it again?"
        );
    }
}
