//! `/admin/webhooks`: the organisation's webhook endpoints, each with its
//! events, whether it is enabled (and why not), and its latest deliveries
//! (state, attempts, status, latency, the start of the answer) with a
//! redeliver button; admins register an endpoint (its signing secret is
//! shown once, here) and delete one. Viewers read the same, without the
//! actions.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::{
    api::webhooks::{create_webhook, delete_webhook, redeliver, webhook_deliveries, webhooks},
    components::{
        layout::AdminGate,
        loaded::Loaded,
        toast::{use_toasts, ToastKind},
    },
    dto::{DeliveryDto, NewWebhookDto, WebhookDto, WEBHOOK_EVENTS},
    format,
};

#[component]
pub fn WebhooksPage() -> impl IntoView {
    let reload = RwSignal::new(0u32);
    let list = Resource::new(move || reload.get(), |_| webhooks());
    // The endpoint just registered, with its secret: outside the list,
    // which is rendered again when it reloads.
    let created = RwSignal::new(None::<NewWebhookDto>);
    view! {
        <Title text="Webhooks" />
        <AdminGate>
            <section class="page-head">
                <h1>"Webhooks"</h1>
            </section>
            <p class="muted">
                "docflow POSTs each event to these endpoints, signed with the endpoint's secret ("
                <code>"Docflow-Signature"</code>
                "), and retries for a day until the endpoint answers 2xx."
            </p>
            {move || {
                created
                    .get()
                    .map(|w| {
                        view! {
                            <div class="callout" role="status" data-testid="webhook-secret">
                                <p>
                                    <strong>"Store this signing secret now"</strong>
                                    " — it is not shown again. Endpoint " <code>{w.url.clone()}</code>
                                    ":"
                                </p>
                                <p class="secret"><code>{w.secret.clone()}</code></p>
                                <button class="btn" type="button" on:click=move |_| created.set(None)>
                                    "I have stored it"
                                </button>
                            </div>
                        }
                    })
            }}
            <Loaded
                data=list
                view=move |v| {
                    let form = v.can_act.then(|| view! { <Register reload created /> });
                    let endpoints = if v.endpoints.is_empty() {
                        view! { <p class="muted" data-testid="no-webhooks">"No endpoints yet."</p> }.into_any()
                    } else {
                        v.endpoints
                            .into_iter()
                            .map(|e| view! { <Endpoint e can_act=v.can_act reload /> })
                            .collect_view()
                            .into_any()
                    };
                    view! { {form}<section class="webhooks" aria-label="Endpoints">{endpoints}</section> }
                }
            />
        </AdminGate>
    }
}

/// The registration form; the secret of a new endpoint is shown once.
#[component]
fn Register(reload: RwSignal<u32>, created: RwSignal<Option<NewWebhookDto>>) -> impl IntoView {
    let url = RwSignal::new(String::new());
    let description = RwSignal::new(String::new());
    let chosen = RwSignal::new(vec!["job.done".to_string(), "batch.done".to_string()]);
    let error = RwSignal::new(None::<String>);
    let create = Action::new(move |(u, ev, d): &(String, Vec<String>, String)| {
        let (u, ev, d) = (u.clone(), ev.clone(), d.clone());
        async move { create_webhook(u, ev, d).await }
    });
    Effect::new(move |_| match create.value().get() {
        Some(Ok(w)) => {
            error.set(None);
            url.set(String::new());
            description.set(String::new());
            created.set(Some(w));
            reload.update(|n| *n += 1);
        }
        Some(Err(e)) => error.set(Some(e.to_string())),
        None => {}
    });
    let pending = create.pending();
    view! {
        <form
            class="card form"
            aria-label="Register an endpoint"
            on:submit=move |ev| {
                ev.prevent_default();
                create.dispatch((url.get(), chosen.get(), description.get()));
            }
        >
            <h2>"Register an endpoint"</h2>
            <label class="field">
                <span>"URL"</span>
                <input
                    type="url"
                    name="url"
                    required
                    placeholder="https://hooks.example.com/docflow"
                    prop:value=url
                    on:input=move |ev| url.set(event_target_value(&ev))
                />
            </label>
            <fieldset class="field events">
                <legend>"Events"</legend>
                {WEBHOOK_EVENTS
                    .iter()
                    .map(|e| {
                        let e = e.to_string();
                        let name = e.clone();
                        let checked = {
                            let e = e.clone();
                            move || chosen.with(|c| c.contains(&e))
                        };
                        view! {
                            <label class="nowrap">
                                <input
                                    type="checkbox"
                                    name="events"
                                    value=e.clone()
                                    prop:checked=checked
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        chosen.update(|c| {
                                            c.retain(|x| *x != e);
                                            if on {
                                                c.push(e.clone());
                                            }
                                        });
                                    }
                                />
                                " "
                                <code>{name}</code>
                            </label>
                        }
                    })
                    .collect_view()}
            </fieldset>
            <label class="field">
                <span>"Description (optional)"</span>
                <input
                    type="text"
                    name="description"
                    maxlength="500"
                    prop:value=description
                    on:input=move |ev| description.set(event_target_value(&ev))
                />
            </label>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            <button class="btn primary" type="submit" disabled=move || pending.get()>
                "Register"
            </button>
        </form>
    }
}

#[component]
fn Endpoint(e: WebhookDto, can_act: bool, reload: RwSignal<u32>) -> impl IntoView {
    let open = RwSignal::new(false);
    let confirming = RwSignal::new(false);
    let tick = RwSignal::new(0u32);
    let id = e.id.clone();
    let deliveries = {
        let id = id.clone();
        Resource::new(
            move || (open.get(), tick.get()),
            move |(open, _)| {
                let id = id.clone();
                async move {
                    if open {
                        Some(webhook_deliveries(id).await)
                    } else {
                        None
                    }
                }
            },
        )
    };
    let toasts = use_toasts();
    let remove = Action::new(move |id: &String| {
        let id = id.clone();
        async move { delete_webhook(id).await }
    });
    Effect::new(move |_| match remove.value().get() {
        Some(Ok(())) => {
            toasts.show("Endpoint deleted", ToastKind::Ok);
            reload.update(|n| *n += 1);
        }
        Some(Err(e)) => toasts.show(format!("Could not delete: {e}"), ToastKind::Bad),
        None => {}
    });
    let status = match (&e.disabled_at, &e.disabled_reason) {
        (Some(at), reason) => view! {
            <p class="error" data-testid="webhook-disabled">
                {format!(
                    "Disabled {}: {}",
                    format::date_time(*at),
                    reason.clone().unwrap_or_default()
                )}
            </p>
        }
        .into_any(),
        (None, _) => view! {
            <p class="muted">
                {e.last_success_at.map_or_else(
                    || "Enabled; nothing delivered yet".to_string(),
                    |t| format!("Enabled; last delivered {}", format::date_time(t)),
                )}
            </p>
        }
        .into_any(),
    };
    let delete = can_act.then(|| {
        let id = id.clone();
        view! {
            <Show
                when=move || confirming.get()
                fallback=move || view! {
                    <button class="btn danger" type="button" on:click=move |_| confirming.set(true)>
                        "Delete"
                    </button>
                }
            >
                {
                    let id = id.clone();
                    view! {
                        <span class="confirm" role="group" aria-label="Delete this endpoint?">
                            "Delete this endpoint? Its pending deliveries are dropped. "
                            <button class="btn danger solid" type="button" on:click=move |_| {
                                remove.dispatch(id.clone());
                            }>"Delete"</button>
                            <button class="btn" type="button" on:click=move |_| confirming.set(false)>"Keep"</button>
                        </span>
                    }
                }
            </Show>
        }
    });
    view! {
        <article class="card" data-testid="webhook">
            <h2 class="webhook-url"><code>{e.url.clone()}</code></h2>
            <p>
                {e.events
                    .iter()
                    .map(|ev| view! { <span class="chip">{ev.clone()}</span>" " })
                    .collect_view()}
            </p>
            {(!e.description.is_empty()).then(|| view! { <p>{e.description.clone()}</p> })}
            {status}
            <div class="actions">
                <button
                    class="btn"
                    type="button"
                    aria-expanded=move || open.get().to_string()
                    on:click=move |_| open.update(|o| *o = !*o)
                >
                    {move || if open.get() { "Hide deliveries" } else { "Deliveries" }}
                </button>
                {delete}
            </div>
            <Transition fallback=|| ()>
                {move || {
                    let id = id.clone();
                    Suspend::new(async move {
                    match deliveries.await {
                        None => ().into_any(),
                        Some(Ok(list)) => view! {
                            <Deliveries list webhook=id.clone() can_act tick />
                        }
                            .into_any(),
                        Some(Err(e)) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })
                }}
            </Transition>
        </article>
    }
}

#[component]
fn Deliveries(
    list: Vec<DeliveryDto>,
    webhook: String,
    can_act: bool,
    tick: RwSignal<u32>,
) -> impl IntoView {
    if list.is_empty() {
        return view! { <p class="muted">"No deliveries yet."</p> }.into_any();
    }
    let toasts = use_toasts();
    let again = Action::new(move |(w, d): &(String, String)| {
        let (w, d) = (w.clone(), d.clone());
        async move { redeliver(w, d).await }
    });
    Effect::new(move |_| match again.value().get() {
        Some(Ok(())) => {
            toasts.show("Sent again", ToastKind::Ok);
            tick.update(|n| *n += 1);
        }
        Some(Err(e)) => toasts.show(format!("Could not redeliver: {e}"), ToastKind::Bad),
        None => {}
    });
    view! {
        <div class="table-wrap">
            <table class="table" aria-label="Deliveries">
                <thead>
                    <tr>
                        <th scope="col">"Event"</th>
                        <th scope="col">"State"</th>
                        <th scope="col">"Attempts"</th>
                        <th scope="col">"Answer"</th>
                        <th scope="col">"Latency"</th>
                        <th scope="col">"Created"</th>
                        {can_act.then(|| view! { <th scope="col">"Actions"</th> })}
                    </tr>
                </thead>
                <tbody>
                    {list
                        .into_iter()
                        .map(|d| {
                            let answer = match (d.last_status, &d.last_error) {
                                (Some(s), _) => format!(
                                    "{s} {}",
                                    format::truncated(d.last_response.as_deref().unwrap_or(""), 60)
                                ),
                                (None, Some(e)) => format::truncated(e, 80),
                                (None, None) => "—".into(),
                            };
                            let state = match (d.state.as_str(), d.next_attempt_at) {
                                ("pending", Some(t)) if d.attempts > 0 => {
                                    format!("retrying at {}", format::time(t))
                                }
                                (s, _) => s.to_string(),
                            };
                            let delivered = d.state == "delivered";
                            let badge = match d.state.as_str() {
                                "delivered" => "badge done",
                                "failed" => "badge failed",
                                _ => "badge retrying",
                            };
                            let button = can_act.then(|| {
                                let (w, id) = (webhook.clone(), d.id.clone());
                                view! {
                                    <td>
                                        <button class="btn small" type="button" on:click=move |_| {
                                            again.dispatch((w.clone(), id.clone()));
                                        }>"Redeliver"</button>
                                    </td>
                                }
                            });
                            view! {
                                <tr data-testid="delivery">
                                    <th scope="row">
                                        <code>{d.event_type.clone()}</code>
                                        " "
                                        <span class="muted small" title=d.event_id.clone()>
                                            {d.event_id.chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<String>()}
                                        </span>
                                    </th>
                                    <td><span class=badge>{state}</span></td>
                                    <td>{d.attempts}</td>
                                    <td class=if delivered { "" } else { "error-cell" }>{answer}</td>
                                    <td>{d.last_latency_ms.map(|ms| format!("{ms} ms"))}</td>
                                    <td class="nowrap">{format::date_time(d.created_at)}</td>
                                    {button}
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
        .into_any()
}
