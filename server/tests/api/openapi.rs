//! `GET /api/openapi.json`: the OpenAPI 3.1 document of the REST API,
//! generated from the handlers. Every route the real router has under
//! `/api` is in it with its method, and nothing else is.

use std::collections::{BTreeSet, HashMap};

use docflow::{http::openapi::PATH, Application, Roles};
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE, BOB};
use crate::helpers::{get_json, queues, spawn_app, spawn_with, Options};

/// The methods a `MethodRouter` prints, in its `Debug` order.
const METHODS: [&str; 9] = [
    "get", "head", "delete", "options", "patch", "post", "put", "trace", "connect",
];

/// Every `(method, path)` that `router` routes (method `*` for a service
/// routed on all methods), read from its `Debug` output: axum 0.8 prints its
/// route table, `RouteId(n): "/path"` for each path and
/// `RouteId(n): MethodRouter(MethodRouter { get: Route, head: None, … })` for
/// what answers there. This is the router itself, not a list kept by hand:
/// a route added with a plain `.route(…)`, bypassing utoipa, shows up too.
fn routes_of(router: &axum::Router) -> BTreeSet<(String, String)> {
    let debug = format!("{router:?}");
    // The fallback router numbers its routes on its own; only the main one counts.
    let table = debug
        .split_once("path_router: ")
        .and_then(|(_, rest)| rest.split_once(", fallback_router: "))
        .map(|(table, _)| table)
        .unwrap_or_else(|| panic!("axum's Router Debug has changed: {debug}"));
    let mut paths = HashMap::new();
    let mut methods: HashMap<&str, Vec<String>> = HashMap::new();
    for entry in table.split("RouteId(").skip(1) {
        let (id, rest) = entry
            .split_once("): ")
            .unwrap_or_else(|| panic!("a route id without a value: {entry}"));
        if let Some(path) = rest.strip_prefix('"') {
            let path = path.split_once('"').expect("a quoted path").0;
            paths.insert(id, path.to_string());
        } else if let Some(fields) = rest.strip_prefix("MethodRouter(MethodRouter { ") {
            let set = METHODS
                .into_iter()
                .filter(|m| {
                    let value = fields
                        .split(", ")
                        .find_map(|f| f.strip_prefix(&format!("{m}: ")))
                        .unwrap_or_else(|| panic!("no `{m}` in a MethodRouter: {fields}"));
                    value != "None"
                })
                .map(String::from)
                .collect();
            methods.insert(id, set);
        } else if rest.starts_with("Route(") {
            methods.insert(id, vec!["*".into()]);
        } else {
            panic!("unexpected route table entry: {entry}");
        }
    }
    assert_eq!(
        paths.len(),
        methods.len(),
        "every path has an endpoint: {paths:?} {methods:?}"
    );
    let mut out = BTreeSet::new();
    for (id, path) in paths {
        let ms = methods.remove(id).expect("an endpoint for every path");
        assert!(!ms.is_empty(), "{path} answers no method");
        for m in ms {
            out.insert((m, path.clone()));
        }
    }
    out
}

#[tokio::test]
async fn the_openapi_document_is_served_to_anyone() {
    let app = spawn_app().await;
    let r = app
        .anonymous()
        .get(app.url("/api/openapi.json"))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let doc: Value = r.json().await.expect("json");
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.1"), "openapi {version}");
    assert_eq!(doc["info"]["title"], "docflow");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    // What is served is what the library builds.
    assert_eq!(
        doc,
        serde_json::to_value(docflow::http::openapi::document(
            app.config.max_upload_bytes
        ))
        .expect("document")
    );

    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["bearer"]["type"], "http");
    assert_eq!(schemes["bearer"]["scheme"], "bearer");
    assert_eq!(schemes["session"]["type"], "apiKey");
    assert_eq!(schemes["session"]["in"], "cookie");
    assert_eq!(schemes["session"]["name"], "docflow_session");
    let error = &doc["components"]["schemas"]["ErrorBody"];
    assert!(
        error["properties"]["error"].is_object(),
        "ErrorBody: {error:#}"
    );
    app.stop().await;
}

/// A resume point past what an event id can be is refused as the document
/// says: 400, with the API's error body, on both streams.
#[tokio::test]
async fn a_resume_point_out_of_range_is_the_documented_400() {
    let app = spawn_app().await;
    let alice = app.client("alice@acme.test").await;
    let job = uuid::Uuid::new_v4();
    for path in ["/api/events".to_string(), format!("/api/jobs/{job}/events")] {
        let r = alice
            .get(app.url(&format!("{path}?last_event_id=9223372036854775808")))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 400, "{path}");
        let body: Value = r.json().await.expect("an error body");
        assert_eq!(body["error"]["code"], "invalid_query", "{path}: {body}");
        let documented = &serde_json::to_value(docflow::http::openapi::document(
            app.config.max_upload_bytes,
        ))
        .expect("document")["paths"][&path.replace(&job.to_string(), "{id}")]["get"]["responses"]
            ["400"];
        assert!(documented.is_object(), "{path}: 400 undocumented");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_document_describes_routes_as_the_handlers_answer() {
    let doc = serde_json::to_value(docflow::http::openapi::document(1 << 20)).expect("document");
    let paths = &doc["paths"];
    let schemas = &doc["components"]["schemas"];

    // A path parameter, the body of a success, who may call.
    let job = &paths["/api/jobs/{id}"]["get"];
    let params = job["parameters"].as_array().expect("parameters");
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "id" && p["in"] == "path" && p["required"] == true),
        "{params:#?}"
    );
    assert_eq!(
        job["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/JobDto"
    );
    assert!(schemas["JobDto"]["properties"]["steps"].is_object());
    assert!(job["responses"]["404"].is_object());
    let security = job["security"].as_array().expect("security");
    assert!(security.iter().any(|s| s.get("bearer").is_some()));
    assert!(security.iter().any(|s| s.get("session").is_some()));
    // Logging in needs nothing; the document needs nothing either.
    assert!(paths["/api/login"]["post"].get("security").is_none());
    assert!(paths["/api/openapi.json"]["get"].get("security").is_none());

    // Query parameters of a local struct.
    let list = paths["/api/jobs"]["get"]["parameters"]
        .as_array()
        .expect("parameters");
    for name in ["state", "limit", "before"] {
        assert!(
            list.iter().any(|p| p["name"] == name && p["in"] == "query"),
            "{name}: {list:#?}"
        );
    }

    // A multipart upload answered 202.
    let upload = &paths["/api/documents"]["post"];
    let form = &upload["requestBody"]["content"]["multipart/form-data"];
    assert!(form.is_object(), "{upload:#}");
    assert_eq!(
        upload["responses"]["202"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/UploadAccepted"
    );
    for status in ["400", "401", "413", "415", "429", "503"] {
        assert!(upload["responses"][status].is_object(), "upload {status}");
    }
    assert_eq!(
        upload["responses"]["413"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorBody"
    );

    // A conflict among the answers of a re-enqueue.
    let requeue = &paths["/api/admin/dead-letters/{id}/requeue"]["post"];
    for status in ["202", "403", "404", "409"] {
        assert!(requeue["responses"][status].is_object(), "requeue {status}");
    }

    // Event streams: each type of frame described, with its `id`, `event`
    // and `data`; a malformed resume point is a documented 400.
    let resolve = |r: &Value| -> Value {
        let name = r["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("not a $ref: {r}"));
        let name = name.trim_start_matches("#/components/schemas/");
        schemas[name].clone()
    };
    let stream = |path: &str| -> Value {
        let get = &paths[path]["get"];
        assert!(get["responses"]["400"].is_object(), "{path}: 400");
        resolve(&get["responses"]["200"]["content"]["text/event-stream"]["schema"])
    };
    let event_name = |frame: &Value| -> String {
        let name = resolve(&frame["properties"]["event"]);
        assert_eq!(name["enum"].as_array().map(Vec::len), Some(1), "{name}");
        name["enum"][0].as_str().expect("a name").to_string()
    };
    let job_frame = stream("/api/jobs/{id}/events");
    assert_eq!(event_name(&job_frame), "job");
    assert_eq!(
        job_frame["properties"]["id"]["type"], "integer",
        "{job_frame}"
    );
    assert_eq!(
        job_frame["properties"]["data"]["$ref"],
        "#/components/schemas/LiveJobEvent"
    );
    let tenant = stream("/api/events");
    let frames: Vec<Value> = tenant["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("no oneOf: {tenant}"))
        .iter()
        .map(resolve)
        .collect();
    let mut names: Vec<String> = frames.iter().map(event_name).collect();
    names.sort();
    assert_eq!(names, ["job", "notification", "reload"]);
    for frame in &frames {
        assert!(frame["properties"]["data"].is_object(), "{frame}");
    }
}

#[tokio::test]
async fn every_api_route_of_the_router_is_in_the_document() {
    let app = spawn_app().await;
    let doc: Value = get_json(&app.anonymous(), app.url("/api/openapi.json")).await;
    // The router exactly as `docflow serve` builds it, from a process built
    // on the same database (not run: only its state is needed).
    let mut config = app.config.clone();
    config.listen = "127.0.0.1:0".parse().expect("addr");
    let built = Application::build(config, Roles::web())
        .await
        .expect("docflow builds");
    let routes = routes_of(&docflow::http::router(built.state().clone()));
    drop(built);

    // The reading of the route table works: routes of every kind are there.
    for (method, path) in [
        ("post", "/api/login"),
        ("get", "/api/jobs/{id}"),
        ("get", "/api/openapi.json"),
        ("get", "/metrics"),
        ("get", "/healthz"),
        ("get", "/"),
    ] {
        assert!(
            routes.contains(&(method.to_string(), path.to_string())),
            "{method} {path} not read from the router: {routes:#?}"
        );
    }

    let api: BTreeSet<_> = routes
        .into_iter()
        .filter(|(_, path)| path.starts_with("/api/"))
        .collect();
    assert!(api.len() >= 20, "{api:#?}");
    for (method, path) in &api {
        let item = &doc["paths"][path.as_str()];
        assert!(
            item.is_object(),
            "{path} is routed but not in the OpenAPI document"
        );
        if method != "*" {
            assert!(
                item[method.as_str()].is_object(),
                "{} {path} is routed but not in the OpenAPI document",
                method.to_uppercase()
            );
        }
    }
    // And the document describes no route the router lacks.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if METHODS.contains(&method.as_str()) {
                assert!(
                    api.contains(&(method.clone(), path.clone())),
                    "{} {path} is in the OpenAPI document but not routed",
                    method.to_uppercase()
                );
            }
        }
    }
    app.stop().await;
}

/// The document's OpenAPI 3.1 `webhooks`: one `POST` per event an endpoint
/// can subscribe to, its body the event with the job or the batch as the API
/// answers them, its headers the event's id and type and the signature, the
/// signature's rule with the receiver's tolerance, and any 2xx acknowledging.
#[tokio::test]
async fn the_document_describes_every_webhook_delivery() {
    let app = spawn_app().await;
    let doc: Value = get_json(&app.anonymous(), app.url(PATH)).await;
    let webhooks = doc["webhooks"]
        .as_object()
        .unwrap_or_else(|| panic!("no webhooks: {:?}", doc.as_object().map(|d| d.keys())));
    let mut names: Vec<&str> = webhooks.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut events = docflow::webhooks::EVENTS.to_vec();
    events.sort_unstable();
    assert_eq!(names, events);
    assert_eq!(
        names,
        [
            "batch.done",
            "document.deleted",
            "job.cancelled",
            "job.done",
            "job.failed"
        ]
    );
    let schemas = &doc["components"]["schemas"];
    for (event, item) in webhooks {
        let post = &item["post"];
        assert_eq!(
            item.as_object().map(|i| i.len()),
            Some(1),
            "{event}: only POST"
        );
        let body = &post["requestBody"];
        assert_eq!(body["required"], true, "{event}");
        let name = body["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{event}: no body schema: {post:#}"))
            .trim_start_matches("#/components/schemas/");
        let schema = &schemas[name];
        let data = if event == "batch.done" {
            "BatchDto"
        } else {
            "JobDto"
        };
        assert_eq!(
            schema["properties"]["data"]["$ref"],
            format!("#/components/schemas/{data}"),
            "{event}: {name} {schema:#}"
        );
        assert!(schemas[data]["properties"]["id"].is_object(), "{data}");
        let kinds = schema["properties"]["type"]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{event}: no type enum: {schema:#}"));
        assert!(
            kinds.contains(&Value::from(event.as_str())),
            "{event}: {kinds:?}"
        );
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(required, ["created_at", "data", "id", "type"], "{event}");

        let headers: HashMap<&str, &Value> = post["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{event}: no parameters"))
            .iter()
            .map(|p| {
                assert_eq!(p["in"], "header", "{event}: {p}");
                assert_eq!(p["required"], true, "{event}: {p}");
                (p["name"].as_str().expect("a name"), p)
            })
            .collect();
        let mut names: Vec<&str> = headers.keys().copied().collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "Docflow-Event-Id",
                "Docflow-Event-Type",
                "Docflow-Signature"
            ],
            "{event}"
        );
        let rule = headers["Docflow-Signature"]["description"]
            .as_str()
            .expect("a description");
        let tolerance = docflow::webhooks::signature::TOLERANCE_SECS;
        for words in [
            "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, \"<t>.<raw body>\")>",
            &format!("more than {tolerance} s from its own clock"),
            "signature_malformed",
            "signature_expired",
            "signature_mismatch",
        ] {
            assert!(rule.contains(words), "{event}: `{words}` not in {rule}");
        }
        assert!(
            post["responses"]["2XX"]["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Any 2xx acknowledges")),
            "{event}: {post:#}"
        );
    }
    app.stop().await;
}

/// A PDF header with nothing a parser can use: a permanent failure.
const BROKEN_PDF: &[u8] = b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage without xref";
/// Another site, as a browser names it in `Origin`.
const ELSEWHERE: &str = "https://elsewhere.example";

/// Every answer the API gave in a test: `(method, path template, status)`,
/// to be found among the answers the document gives that operation.
#[derive(Default)]
struct Answers(BTreeSet<(String, String, u16)>);

impl Answers {
    /// Sends `request` for the operation at `template`; notes its status.
    async fn send(
        &mut self,
        template: &str,
        request: reqwest::RequestBuilder,
    ) -> reqwest::Response {
        let (client, request) = request.build_split();
        let request = request.expect("a request");
        let method = request.method().as_str().to_lowercase();
        let r = client.execute(request).await.expect("send");
        let status = r.status().as_u16();
        if status == 429 || status == 503 {
            let wait = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            assert!(
                wait.is_some_and(|s| s >= 1),
                "{method} {template}: {status} without a Retry-After of whole seconds"
            );
        }
        self.0.insert((method, template.to_string(), status));
        r
    }

    /// Sends `request`, expects `status`, returns the body (JSON, or `null`).
    async fn expect(
        &mut self,
        template: &str,
        request: reqwest::RequestBuilder,
        status: u16,
    ) -> Value {
        let r = self.send(template, request).await;
        let got = r.status().as_u16();
        let url = r.url().clone();
        let body = r.text().await.expect("body");
        assert_eq!(got, status, "{template} ({url}): {body}");
        if got >= 400 {
            let v: Value = serde_json::from_str(&body).expect("an error body");
            assert!(v["error"]["code"].is_string(), "{template}: {body}");
            return v;
        }
        serde_json::from_str(&body).unwrap_or(Value::Null)
    }

    /// Every answer seen is documented for its operation; with `complete`,
    /// every operation of the document also answered a success.
    fn check(&self, doc: &Value, complete: bool) {
        let undocumented: Vec<_> = self
            .0
            .iter()
            .filter(|(m, p, s)| !doc["paths"][p][m]["responses"][s.to_string()].is_object())
            .map(|(m, p, s)| format!("{} {p} answered {s}", m.to_uppercase()))
            .collect();
        assert!(
            undocumented.is_empty(),
            "answers missing from the OpenAPI document:\n{}",
            undocumented.join("\n")
        );
        if !complete {
            return;
        }
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("item").keys() {
                assert!(
                    self.0
                        .iter()
                        .any(|(m, p, s)| m == method && p == path && (200..300).contains(s)),
                    "{} {path} never answered a success here",
                    method.to_uppercase()
                );
            }
        }
    }
}

/// Every operation of the document: `(method, path template, operation)`.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            if METHODS.contains(&method.as_str()) {
                out.push((method.clone(), path.clone(), op.clone()));
            }
        }
    }
    out
}

/// `template` with `id` for its id and `queue` for its queue.
fn fill(template: &str, id: &str, queue: &str) -> String {
    template
        .replace("{id}", id)
        .replace("{delivery_id}", id)
        .replace("{queue}", queue)
}

fn request(client: &reqwest::Client, method: &str, url: String) -> reqwest::RequestBuilder {
    let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
    client.request(method, url)
}

fn text_of(bytes: usize) -> Vec<u8> {
    let prose = crate::fixtures::prose("openapi", bytes / 40 + 2);
    prose.as_bytes()[..bytes].to_vec()
}

fn file_form(name: &str, bytes: Vec<u8>) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
    )
}

fn id_of(v: &Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
        .to_string()
}

/// Every operation driven through its success and its refusals (401
/// anonymous, 403 member on an admin route or another site, 400, 404, 409,
/// 413, 415, 429, 503) against a running docflow with workers: every
/// status seen is one the document gives for that operation, and every
/// operation succeeded at least once.
#[tokio::test]
async fn every_status_the_api_answers_is_documented_for_its_operation() {
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1", "normal=1"])),
        configure: Box::new(|c| {
            c.sse_per_user = 1;
            c.free_max_unfinished = Some(1);
            c.max_upload_bytes = 4096;
        }),
        ..Default::default()
    })
    .await;
    let doc: Value = get_json(&app.anonymous(), app.url(PATH)).await;
    let mut seen = Answers::default();
    let anonymous = app.anonymous();
    let alice = app.client(ALICE).await;
    let bob = app.client(BOB).await;
    let admin = app.client(ADMIN).await;
    let nowhere = uuid::Uuid::new_v4().to_string();

    // Refusals every operation of a kind gives, whatever its handler does.
    for (method, path, op) in operations(&doc) {
        let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
        if secured {
            let url = app.url(&fill(&path, &nowhere, "high"));
            seen.expect(&path, request(&anonymous, &method, url), 401)
                .await;
        }
        if path.starts_with("/api/admin/") {
            let url = app.url(&fill(&path, &nowhere, "high"));
            let body = seen.expect(&path, request(&alice, &method, url), 403).await;
            assert_eq!(body["error"]["code"], "forbidden", "{path}");
        }
        if method != "get" {
            let url = app.url(&fill(&path, &nowhere, "high"));
            let r = request(&alice, &method, url).header("origin", ELSEWHERE);
            let body = seen.expect(&path, r, 403).await;
            assert_eq!(body["error"]["code"], "cross_origin", "{path}");
        }
        if path.contains('{') {
            let caller = if path.starts_with("/api/admin/") || path.starts_with("/api/webhooks") {
                &admin
            } else {
                &alice
            };
            let url = app.url(&fill(&path, &nowhere, "nowhere"));
            seen.expect(&path, request(caller, &method, url), 404).await;
        }
    }

    // A webhook for acme's finished jobs (a public address: no DNS needed,
    // and its deliveries fail here, which is fine).
    let t = "/api/webhooks";
    let hook = serde_json::json!({"url": "https://93.184.215.14/hook", "events": ["job.done"]});
    let webhook = seen
        .expect(t, admin.post(app.url(t)).json(&hook), 201)
        .await;
    let webhook = id_of(&webhook, "id");
    let local = serde_json::json!({"url": "https://127.0.0.1/hook", "events": ["job.done"]});
    seen.expect(t, admin.post(app.url(t)).json(&local), 400)
        .await;

    // Jobs that end: one done, three failed (dead letters).
    let done = app
        .upload_ok(
            ALICE,
            "report.txt",
            crate::fixtures::prose("report", 20).into_bytes(),
        )
        .await;
    let done_job = id_of(&done, "job_id");
    let mut broken = Vec::new();
    for who in [ALICE, ALICE, BOB] {
        broken.push(id_of(
            &app.upload_ok(who, "broken.pdf", BROKEN_PDF.to_vec()).await,
            "job_id",
        ));
    }
    app.wait_state(ALICE, &done_job, "done").await;
    for (job, who) in broken.iter().zip([ALICE, ALICE, BOB]) {
        app.wait_state(who, job, "failed").await;
    }
    let dead_letter = |job: String| {
        let pool = app.pool.clone();
        async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let id: Option<uuid::Uuid> = sqlx::query_scalar(
                    "SELECT id FROM dead_letters WHERE job_id = $1::uuid AND resolved_at IS NULL",
                )
                .bind(&job)
                .fetch_optional(&pool)
                .await
                .expect("dead letter");
                if let Some(id) = id {
                    return id.to_string();
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no dead letter for {job}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    let requeued = dead_letter(broken[0].clone()).await;
    let discarded = dead_letter(broken[2].clone()).await;

    // Authentication.
    let t = "/api/login";
    let login = |email: &str, password: &str| {
        anonymous
            .post(app.url(t))
            .json(&serde_json::json!({"email": email, "password": password}))
    };
    let fresh = app.anonymous();
    let r = fresh
        .post(app.url(t))
        .json(&serde_json::json!({"email": ALICE, "password": crate::helpers::PASSWORD}));
    seen.expect(t, r, 200).await;
    seen.expect("/api/logout", fresh.post(app.url("/api/logout")), 204)
        .await;
    seen.expect("/api/logout", fresh.post(app.url("/api/logout")), 401)
        .await;
    seen.expect(t, login(ALICE, "wrong"), 401).await;
    seen.expect(t, login("", "x"), 400).await;
    seen.expect(t, anonymous.post(app.url(t)).body("{"), 400)
        .await;
    seen.expect(t, login("nul\0@acme.test", "x"), 400).await;
    let mut throttled = false;
    for _ in 0..10 {
        let r = seen.send(t, login("flood@nowhere.test", "wrong")).await;
        if r.status() == 429 {
            throttled = true;
            break;
        }
    }
    assert!(throttled, "failed logins were never throttled");

    // Jobs.
    let job_url = |id: &str| app.url(&format!("/api/jobs/{id}"));
    seen.expect(
        "/api/jobs",
        alice.get(app.url("/api/jobs?state=done&limit=1")),
        200,
    )
    .await;
    seen.expect(
        "/api/jobs",
        alice.get(app.url("/api/jobs?state=sleeping")),
        400,
    )
    .await;
    seen.expect("/api/jobs", alice.get(app.url("/api/jobs?limit=many")), 400)
        .await;
    seen.expect("/api/jobs/{id}", alice.get(job_url(&done_job)), 200)
        .await;
    seen.expect("/api/jobs/{id}", alice.get(job_url(&broken[2])), 404)
        .await;
    let retry = |id: &str| format!("{}/retry", job_url(id));
    let cancel = |id: &str| format!("{}/cancel", job_url(id));
    seen.expect("/api/jobs/{id}/retry", alice.post(retry(&broken[1])), 202)
        .await;
    seen.expect("/api/jobs/{id}/retry", alice.post(retry(&done_job)), 409)
        .await;
    seen.expect("/api/jobs/{id}/cancel", alice.post(cancel(&done_job)), 409)
        .await;

    // Event streams: a finished job's stream replays its events and ends;
    // one stream per user here, so a second one is refused while the first is open.
    let t = "/api/jobs/{id}/events";
    let url = format!("{}/events", job_url(&done_job));
    let r = seen.send(t, alice.get(&url)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let frames = r
        .text()
        .await
        .expect("the stream ends after the final event");
    let mut names = BTreeSet::new();
    for block in frames
        .split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
    {
        let field = |f: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{f}: ")))
                .unwrap_or_else(|| panic!("no `{f}:` in {block}"))
        };
        field("id").parse::<i64>().expect("an integer id");
        names.insert(field("event").to_string());
        let data: Value = serde_json::from_str(field("data")).expect("JSON data");
        assert_eq!(data["job_id"], done_job.as_str(), "{block}");
    }
    assert_eq!(names, BTreeSet::from(["job".to_string()]), "{frames}");
    let t = "/api/events";
    let held = seen.send(t, admin.get(app.url(t))).await;
    assert_eq!(held.status(), 200);
    seen.expect(t, admin.get(app.url(t)), 429).await;
    drop(held);
    let overflow = "?last_event_id=9223372036854775808";
    seen.expect(t, bob.get(app.url(&format!("{t}{overflow}"))), 400)
        .await;
    let url = format!("{}/events{overflow}", job_url(&done_job));
    seen.expect("/api/jobs/{id}/events", alice.get(url), 400)
        .await;

    // Notifications.
    let inbox = seen
        .expect(
            "/api/notifications",
            alice.get(app.url("/api/notifications")),
            200,
        )
        .await;
    let note = id_of(&inbox["notifications"][0], "id");
    let read = app.url(&format!("/api/notifications/{note}/read"));
    seen.expect("/api/notifications/{id}/read", alice.post(&read), 204)
        .await;
    seen.expect("/api/notifications/{id}/read", bob.post(&read), 404)
        .await;

    // Search.
    let t = "/api/search";
    for (query, status) in [
        ("?q=report&k=5", 200),
        ("", 400),
        ("?q=%20%20", 400),
        ("?q=report&k=0", 400),
        ("?q=report&k=lots", 400),
        ("?q=nul%00byte", 400),
    ] {
        seen.expect(t, alice.get(app.url(&format!("{t}{query}"))), status)
            .await;
    }

    // Uploads, and the refusals of every kind; the queues paused first, so
    // that jobs stay unfinished and the free plan's quota (1 here) is used.
    let pause = |q: &str| app.url(&format!("/api/admin/queues/{q}/pause"));
    let resume = |q: &str| app.url(&format!("/api/admin/queues/{q}/resume"));
    for q in ["high", "normal"] {
        seen.expect("/api/admin/queues/{queue}/pause", admin.post(pause(q)), 204)
            .await;
    }
    // Re-embedding: none before the model changes; then a run (its
    // earlier model a stand-in, paused before the workers look at it) to
    // pause and resume.
    let reembed = |action: &str| app.url(&format!("/api/admin/reembed/{action}"));
    seen.expect(
        "/api/admin/reembed/pause",
        admin.post(reembed("pause")),
        409,
    )
    .await;
    seen.expect(
        "/api/admin/reembed/retry",
        admin.post(reembed("retry")),
        409,
    )
    .await;
    sqlx::query(
        "WITH earlier AS (INSERT INTO embedding_models (name, dims) VALUES ('openapi-earlier', 8) RETURNING id)
         INSERT INTO reembed_run (model_id, from_models, paused)
         SELECT c.model_id, ARRAY[e.id], true FROM embedding_choice c, earlier e
         ON CONFLICT (only_row) DO UPDATE
             SET model_id = EXCLUDED.model_id, from_models = EXCLUDED.from_models,
                 paused = true, finished_at = NULL",
    )
    .execute(&app.pool)
    .await
    .expect("a re-embedding run");
    seen.expect(
        "/api/admin/reembed/pause",
        admin.post(reembed("pause")),
        204,
    )
    .await;
    seen.expect(
        "/api/admin/reembed/retry",
        admin.post(reembed("retry")),
        202,
    )
    .await;
    seen.expect(
        "/api/admin/reembed/resume",
        admin.post(reembed("resume")),
        204,
    )
    .await;
    let t = "/api/documents";
    let upload = |c: &reqwest::Client, name: &str, bytes: Vec<u8>| {
        c.post(app.url(t)).multipart(file_form(name, bytes))
    };
    let pending = seen
        .expect(t, upload(&alice, "pending.txt", text_of(500)), 202)
        .await;
    let pending_job = id_of(&pending, "job_id");
    seen.expect(t, upload(&bob, "first.txt", text_of(300)), 202)
        .await;
    seen.expect(t, upload(&bob, "second.txt", text_of(400)), 429)
        .await;
    let over = usize::try_from(app.config.max_upload_bytes).expect("size") + 1;
    seen.expect(t, upload(&alice, "big.txt", text_of(over)), 413)
        .await;
    let gif = b"GIF89a\x01\0\x01\0\x80\0\0\0\0\0".to_vec();
    seen.expect(t, upload(&alice, "picture.gif", gif), 415)
        .await;
    seen.expect(t, upload(&alice, "empty.txt", Vec::new()), 400)
        .await;
    let refuse = alice
        .post(app.url(&format!("{t}?duplicates=refuse")))
        .multipart(file_form("again.txt", text_of(500)));
    seen.expect(t, refuse, 409).await;
    let bad_key = upload(&alice, "key.txt", text_of(600)).header("idempotency-key", "two words");
    seen.expect(t, bad_key, 400).await;
    seen.expect(t, alice.post(app.url(t)).body("not a form"), 400)
        .await;
    seen.expect(
        "/api/jobs/{id}/cancel",
        alice.post(cancel(&pending_job)),
        202,
    )
    .await;
    for q in ["high", "normal"] {
        seen.expect(
            "/api/admin/queues/{queue}/resume",
            admin.post(resume(q)),
            204,
        )
        .await;
    }
    let document = id_of(&done, "document_id");
    let delete = app.url(&format!("/api/documents/{document}"));
    seen.expect("/api/documents/{id}", bob.delete(&delete), 404)
        .await;
    seen.expect("/api/documents/{id}", alice.delete(&delete), 204)
        .await;

    // Administration.
    for (t, query, status) in [
        ("/api/admin/stats", "?window=15m", 200),
        ("/api/admin/stats", "?window=soon", 400),
        ("/api/admin/stats", "?window=1000000000000y", 400),
        ("/api/admin/stats", "?window=10000000y", 200),
        (
            "/api/admin/jobs",
            "?state=failed&queue=high&tenant=acm&since=1h&step=parse",
            200,
        ),
        ("/api/admin/jobs", "?sort=sideways", 400),
        ("/api/admin/jobs", "?q=nul%00", 400),
        ("/api/admin/dead-letters", "?limit=5&reason=permanent", 200),
        ("/api/admin/dead-letters", "?before=yesterday", 400),
        ("/api/admin/workers", "", 200),
        ("/api/admin/audit", "?since=1h&limit=5", 200),
        ("/api/admin/audit", "?since=lately", 400),
        (
            "/api/admin/series",
            "?metric=queue_depth&queue=high&since=1h",
            200,
        ),
        ("/api/admin/series", "?metric=mood", 400),
        ("/api/admin/series", "", 400),
    ] {
        seen.expect(t, admin.get(app.url(&format!("{t}{query}"))), status)
            .await;
    }
    let t = "/api/admin/dead-letters/{id}/requeue";
    let url = app.url(&format!("/api/admin/dead-letters/{requeued}/requeue"));
    seen.expect(t, admin.post(&url), 202).await;
    seen.expect(t, admin.post(&url), 409).await;
    let t = "/api/admin/dead-letters/{id}/discard";
    let url = app.url(&format!("/api/admin/dead-letters/{discarded}/discard"));
    seen.expect(t, admin.post(&url), 204).await;
    seen.expect(t, admin.post(&url), 409).await;
    let t = "/api/admin/dead-letters/requeue";
    let ids = serde_json::json!({"ids": [requeued, nowhere]});
    let outcome = seen.expect(t, admin.post(app.url(t)).json(&ids), 202).await;
    assert_eq!(
        outcome["failed"].as_array().map(Vec::len),
        Some(2),
        "{outcome}"
    );
    let t = "/api/admin/dead-letters/requeue-matching";
    let url = app.url(&format!("{t}?reason=permanent&queue=high&tenant=acme"));
    seen.expect(t, admin.post(url), 202).await;
    let t = "/api/admin/dead-letters/requeue";
    for body in [
        serde_json::json!({"ids": []}),
        serde_json::json!({"ids": "all"}),
    ] {
        seen.expect(t, admin.post(app.url(t)).json(&body), 400)
            .await;
    }
    for t in ["/api/admin/jobs/cancel", "/api/admin/jobs/retry"] {
        let body =
            serde_json::json!({"state": "", "queue": "high", "tenant": "acme", "q": "broken"});
        seen.expect(t, admin.post(app.url(t)).json(&body), 202)
            .await;
        let body = serde_json::json!({"step": "lunch"});
        seen.expect(t, admin.post(app.url(t)).json(&body), 400)
            .await;
        seen.expect(t, admin.post(app.url(t)).body("[]"), 400).await;
    }
    batches_and_webhooks(&app, &mut seen, &webhook).await;
    seen.expect(PATH, anonymous.get(app.url(PATH)), 200).await;
    app.stop().await;

    // A full backlog: uploads wait (503), on a docflow that allows none.
    let full = spawn_with(Options {
        configure: Box::new(|c| c.max_backlog = 0),
        ..Default::default()
    })
    .await;
    let r = full
        .client(ALICE)
        .await
        .post(full.url("/api/documents"))
        .multipart(file_form("late.txt", text_of(100)));
    seen.expect("/api/documents", r, 503).await;
    full.stop().await;

    seen.check(&doc, true);
}

/// A batch's and a webhook's reads and actions, each with its answers.
async fn batches_and_webhooks(app: &crate::helpers::TestApp, seen: &mut Answers, webhook: &str) {
    let alice = app.client(ALICE).await;
    let admin = app.client(ADMIN).await;
    let t = "/api/batches";
    seen.expect(
        t,
        alice
            .post(app.url(t))
            .json(&serde_json::json!({"name": ""})),
        400,
    )
    .await;
    let batch = seen
        .expect(
            t,
            alice
                .post(app.url(t))
                .json(&serde_json::json!({"name": "openapi"})),
            201,
        )
        .await;
    let batch = id_of(&batch, "id");
    seen.expect(t, alice.get(app.url(t)), 200).await;
    let at = |rest: &str| app.url(&format!("/api/batches/{batch}{rest}"));
    seen.expect("/api/batches/{id}", alice.get(at("")), 200)
        .await;
    seen.expect("/api/batches/{id}/jobs", alice.get(at("/jobs")), 200)
        .await;
    seen.expect("/api/batches/{id}/retry", alice.post(at("/retry")), 409)
        .await;
    seen.expect("/api/batches/{id}/close", alice.post(at("/close")), 200)
        .await;
    // Closed and empty: done at once, so its stream sends one frame and ends.
    seen.expect("/api/batches/{id}/events", alice.get(at("/events")), 200)
        .await;
    seen.expect("/api/batches/{id}/cancel", alice.post(at("/cancel")), 200)
        .await;
    let upload = alice
        .post(app.url(&format!("/api/documents?batch_id={batch}")))
        .multipart(file_form("late.txt", text_of(100)));
    seen.expect("/api/documents", upload, 409).await;
    // A batch whose one job failed: a retry runs it again.
    let t = "/api/batches";
    let again = seen
        .expect(
            t,
            alice
                .post(app.url(t))
                .json(&serde_json::json!({"name": "retry"})),
            201,
        )
        .await;
    let again = id_of(&again, "id");
    let upload = alice
        .post(app.url(&format!("/api/documents?batch_id={again}")))
        .multipart(file_form("broken.pdf", BROKEN_PDF.to_vec()));
    let job = seen.expect("/api/documents", upload, 202).await;
    app.wait_state(ALICE, &id_of(&job, "job_id"), "failed")
        .await;
    let url = app.url(&format!("/api/batches/{again}/retry"));
    let retried = seen
        .expect("/api/batches/{id}/retry", alice.post(url), 200)
        .await;
    assert_eq!(retried["counts"]["failed"], 0, "{retried}");

    let t = "/api/webhooks";
    seen.expect(t, admin.get(app.url(t)), 200).await;
    let t = "/api/webhooks/{id}/deliveries";
    let url = app.url(&format!("/api/webhooks/{webhook}/deliveries"));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let delivery = loop {
        let list = seen.expect(t, admin.get(&url), 200).await;
        if let Some(d) = list.as_array().and_then(|l| l.first()) {
            break id_of(d, "id");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a delivery of job.done"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let t = "/api/webhooks/{id}/deliveries/{delivery_id}/redeliver";
    let url = app.url(&format!(
        "/api/webhooks/{webhook}/deliveries/{delivery}/redeliver"
    ));
    seen.expect(t, admin.post(&url), 202).await;
    let url = app.url(&format!(
        "/api/webhooks/{webhook}/deliveries/{batch}/redeliver"
    ));
    seen.expect(t, admin.post(&url), 404).await;
    let t = "/api/webhooks/{id}";
    let url = app.url(&format!("/api/webhooks/{webhook}"));
    seen.expect(t, admin.delete(&url), 204).await;
    seen.expect(t, admin.delete(&url), 404).await;
}

/// The limits the document gives (lengths, ranges, required, patterns) are
/// exactly where the handlers draw the line: the largest value accepted,
/// one more refused with the documented status.
#[tokio::test]
async fn the_documented_limits_are_where_the_handlers_refuse() {
    let app = spawn_with(Options {
        configure: Box::new(|c| c.max_upload_bytes = 4096),
        ..Default::default()
    })
    .await;
    let doc: Value = get_json(&app.anonymous(), app.url(PATH)).await;
    let mut seen = Answers::default();
    let alice = app.client(ALICE).await;
    let param = |path: &str, name: &str| -> Value {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no {name} on {path}"))
            .clone()
    };

    // Search: `q` required, 1 to 2,000 characters (not bytes); `k` 1 to 100.
    let q = param("/api/search", "q");
    assert_eq!(q["required"], true, "{q}");
    assert_eq!(q["schema"]["minLength"], 1, "{q}");
    assert_eq!(q["schema"]["maxLength"], 2000, "{q}");
    let k = param("/api/search", "k");
    assert_eq!(k["schema"]["minimum"], 1, "{k}");
    assert_eq!(k["schema"]["maximum"], 100, "{k}");
    let t = "/api/search";
    let search = |q: &str, k: &str| alice.get(app.url(t)).query(&[("q", q), ("k", k)]);
    let longest = "é".repeat(2000);
    seen.expect(t, search(&longest, "10"), 200).await;
    let body = seen
        .expect(t, search(&format!("{longest}é"), "10"), 400)
        .await;
    assert_eq!(body["error"]["code"], "query_too_long");
    seen.expect(t, search("a", "1"), 200).await;
    seen.expect(t, search("a", "100"), 200).await;
    for k in ["0", "101"] {
        let body = seen.expect(t, search("a", k), 400).await;
        assert_eq!(body["error"]["code"], "invalid_k");
    }
    seen.expect(t, search("", "10"), 400).await;
    seen.expect(t, alice.get(app.url("/api/search?k=5")), 400)
        .await;

    // Login: `email` 1 to 254 characters, `password` not empty, both required.
    let login = &doc["components"]["schemas"]["LoginBody"];
    assert_eq!(login["properties"]["email"]["minLength"], 1, "{login}");
    assert_eq!(login["properties"]["email"]["maxLength"], 254, "{login}");
    assert_eq!(login["properties"]["password"]["minLength"], 1, "{login}");
    let mut required: Vec<_> = login["required"].as_array().expect("required").clone();
    required.sort_by_key(|v| v.to_string());
    assert_eq!(required, ["email", "password"], "{login}");
    let t = "/api/login";
    let email = |chars: usize| format!("{}@acme.test", "é".repeat(chars - "@acme.test".len()));
    let attempt = |email: &str, password: &str| {
        app.anonymous()
            .post(app.url(t))
            .json(&serde_json::json!({"email": email, "password": password}))
    };
    seen.expect(t, attempt(&email(254), "wrong"), 401).await;
    let body = seen.expect(t, attempt(&email(255), "wrong"), 400).await;
    assert_eq!(body["error"]["code"], "invalid_credentials");
    seen.expect(t, attempt(ALICE, ""), 400).await;
    seen.expect(t, attempt("", "x"), 400).await;
    let r = app
        .anonymous()
        .post(app.url(t))
        .json(&serde_json::json!({"email": ALICE}));
    seen.expect(t, r, 400).await;

    // Upload: a file of 1 byte up to `DOCFLOW_MAX_UPLOAD_BYTES`; a key of
    // 1 to 255 visible ASCII characters.
    let t = "/api/documents";
    let upload = &doc["paths"][t]["post"];
    let form = upload["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
        .as_str()
        .expect("a form")
        .trim_start_matches("#/components/schemas/");
    let kinds =
        &upload["requestBody"]["content"]["multipart/form-data"]["encoding"]["file"]["contentType"];
    let kinds: Vec<&str> = kinds.as_str().expect("a list").split(", ").collect();
    assert_eq!(
        kinds,
        [
            "application/pdf",
            "text/plain",
            "text/csv",
            "text/tab-separated-values",
            "text/markdown",
            "text/html",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            "application/vnd.oasis.opendocument.text",
            "application/vnd.oasis.opendocument.presentation",
            "application/epub+zip",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "application/vnd.oasis.opendocument.spreadsheet",
            "image/png",
            "image/jpeg",
            "image/tiff",
            "message/rfc822",
            "application/rtf",
        ]
    );
    let file = &doc["components"]["schemas"][form]["properties"]["file"];
    assert_eq!(file["minLength"], 1, "{file}");
    assert_eq!(file["maxLength"], 4096, "{file}");
    let max = 4096;
    let send =
        |name: &str, bytes: Vec<u8>| alice.post(app.url(t)).multipart(file_form(name, bytes));
    seen.expect(t, send("largest.txt", text_of(max)), 202).await;
    let body = seen
        .expect(t, send("larger.txt", text_of(max + 1)), 413)
        .await;
    assert_eq!(body["error"]["code"], "payload_too_large");
    seen.expect(t, send("smallest.txt", b"a".to_vec()), 202)
        .await;
    let body = seen.expect(t, send("empty.txt", Vec::new()), 400).await;
    assert_eq!(body["error"]["code"], "empty_file");
    let key = upload["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("Idempotency-Key")
        .clone();
    assert_eq!(key["in"], "header");
    assert_eq!(key["schema"]["pattern"], "^[!-~]{1,255}$", "{key}");
    for (k, status) in [
        ("!".repeat(255), 202),
        ("~".to_string(), 202),
        ("k".repeat(256), 400),
        ("two words".to_string(), 400),
        ("tab\there".to_string(), 400),
    ] {
        let r = send("keyed.txt", text_of(100 + k.len())).header("idempotency-key", k.as_str());
        seen.expect(t, r, status).await;
    }

    // The dashboard's series: `metric` is one of those sampled.
    let metric = param("/api/admin/series", "metric");
    assert_eq!(metric["required"], true, "{metric}");
    let names: Vec<String> = metric["schema"]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {metric}"))
        .iter()
        .map(|v| v.as_str().expect("a name").to_string())
        .collect();
    assert_eq!(names, docflow::ops::sampler::SERIES);
    let admin = app.client(ADMIN).await;
    let t = "/api/admin/series";
    for name in &names {
        seen.expect(t, admin.get(app.url(t)).query(&[("metric", name)]), 200)
            .await;
    }
    seen.expect(t, admin.get(app.url(t)).query(&[("metric", "mood")]), 400)
        .await;

    seen.check(&doc, false);
    app.stop().await;
}
