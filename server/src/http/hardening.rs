//! Hardening applied to every answer: security headers, a content security
//! policy, and the refusal of state-changing requests that another site
//! made a browser send.

/// The content security policy of a page: exactly what hydration needs.
/// Scripts are docflow's own files and the inline scripts Leptos writes
/// (hydration, streamed resources), each carrying this answer's `nonce`;
/// WebAssembly may compile (`wasm-unsafe-eval`, not `unsafe-eval`); style
/// sheets are docflow's own, and only `style` attributes (progress bar
/// widths) are inline. Nothing may be framed, posted elsewhere or loaded
/// from another origin.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; \
         connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// Sets the page's policy with the nonce Leptos put on its inline scripts;
/// called while a page renders.
pub fn provide_page_policy() {
    use leptos::prelude::use_context;
    let (Some(nonce), Some(res)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        return;
    };
    match axum::http::HeaderValue::from_str(&page_policy(&nonce)) {
        Ok(v) => res.insert_header(axum::http::header::CONTENT_SECURITY_POLICY, v),
        Err(e) => tracing::error!(error = %e, "content security policy not set"),
    }
}

/// What answers other than pages allow: nothing (an API answer or a file
/// opened directly in a browser runs no script and loads nothing).
const OTHER_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

/// Headers on every answer: no MIME sniffing, no framing by other sites,
/// no full URLs in the `Referer` of links that leave docflow, a content
/// security policy (pages set their own); over https, HSTS.
pub async fn security_headers(
    axum::extract::State(https): axum::extract::State<bool>,
    mut res: axum::response::Response,
) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let h = res.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CONTENT_SECURITY_POLICY, OTHER_POLICY),
    ] {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    }
    if https {
        h.entry(header::STRICT_TRANSPORT_SECURITY)
            .or_insert(HeaderValue::from_static("max-age=31536000"));
    }
    res
}

/// Refuses state-changing requests that a browser sent from another site
/// (cross-site request forgery, login CSRF through a server function): when
/// a request names where it comes from (`Origin`, else `Referer`), that must
/// be this site (its `Host`). Clients that name nothing (curl, API clients
/// with a bearer token) are not browsers acting for another site.
pub async fn same_origin(
    axum::extract::State(public_url): axum::extract::State<Option<String>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::{
        http::{header, Method, StatusCode},
        response::IntoResponse,
    };
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let headers = req.headers();
    let source = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .map(|v| v.to_str().unwrap_or("null"));
    let Some(source) = source else {
        return next.run(req).await;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // This site: the host the request was sent to, or the public origin.
    let public = public_url.as_deref().and_then(origin_host);
    let ours = |h: &str| origin_host(source).is_some_and(|o| o.eq_ignore_ascii_case(h));
    if host.is_some_and(ours) || public.is_some_and(ours) {
        return next.run(req).await;
    }
    tracing::warn!(%source, ?host, path = %req.uri().path(), "cross-site request refused");
    (
        StatusCode::FORBIDDEN,
        axum::Json(serde_json::json!({"error": {
            "code": "cross_origin",
            "message": "this request came from another site; docflow only accepts changes made from its own pages",
        }})),
    )
        .into_response()
}

/// `host[:port]` of an `Origin` or `Referer` value (`None` for `null`).
fn origin_host(source: &str) -> Option<&str> {
    let rest = source.split_once("://")?.1;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::origin_host;

    #[test]
    fn the_host_of_an_origin_or_referer() {
        assert_eq!(origin_host("http://127.0.0.1:3000"), Some("127.0.0.1:3000"));
        assert_eq!(
            origin_host("https://docs.example/login?next=/"),
            Some("docs.example")
        );
        assert_eq!(origin_host("null"), None);
        assert_eq!(origin_host("https://"), None);
    }
}
