//! `GET /api/openapi.json`: the OpenAPI 3.1 document of the REST API,
//! generated from the handlers. Every route the real router has under
//! `/api` is in it with its method, and nothing else is.

use std::collections::{BTreeSet, HashMap};

use docflow::{Application, Roles};
use serde_json::Value;

use crate::helpers::{get_json, spawn_app};

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
        serde_json::to_value(docflow::http::openapi::document()).expect("document")
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
        let documented = &serde_json::to_value(docflow::http::openapi::document())
            .expect("document")["paths"][&path.replace(&job.to_string(), "{id}")]["get"]
            ["responses"]["400"];
        assert!(documented.is_object(), "{path}: 400 undocumented");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_document_describes_routes_as_the_handlers_answer() {
    let doc = serde_json::to_value(docflow::http::openapi::document()).expect("document");
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
