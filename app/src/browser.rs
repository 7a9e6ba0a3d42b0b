//! Browser-only helpers (the `hydrate` build): JSON from the REST API and
//! uploads with progress through `XMLHttpRequest`.

use serde::de::DeserializeOwned;
use wasm_bindgen::{closure::Closure, JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{FormData, ProgressEvent, XmlHttpRequest};

use crate::dto::UploadAccepted;

/// The `message` of an API error body `{"error":{"code","message"}}`.
fn error_message(status: u16, body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("the server answered {status}"))
}

/// The `code` of an API error body, if it has one.
fn error_code(body: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
}

/// Why an upload was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadError {
    /// The API's error code (`duplicate`, `unsupported_type`, …); `None`
    /// when the request itself failed.
    pub code: Option<String>,
    /// What to tell the user.
    pub message: String,
}

impl UploadError {
    fn plain(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
        }
    }
}

fn js_error(e: JsValue) -> String {
    e.as_string()
        .unwrap_or_else(|| "the browser refused the request".into())
}

/// `GET url` as JSON, with the session cookie.
pub async fn get_json<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    let window = web_sys::window().ok_or("no window")?;
    let resp = JsFuture::from(window.fetch_with_str(url))
        .await
        .map_err(|_| "the network request failed".to_string())?;
    let resp: web_sys::Response = resp.dyn_into().map_err(js_error)?;
    let text = JsFuture::from(resp.text().map_err(js_error)?)
        .await
        .map_err(js_error)?
        .as_string()
        .unwrap_or_default();
    if !resp.ok() {
        return Err(error_message(resp.status(), &text));
    }
    serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))
}

/// Uploads `file` to `POST /api/documents?duplicates=…` (`refuse`: a file
/// the tenant uploaded before is answered 409 `duplicate`, so the page can
/// ask; `allow`: kept again), into `batch` when given, reporting the
/// fraction sent to `on_progress`
/// and the outcome (the server's code and message on refusal) to `on_done`.
/// Returns the request: its `abort()` cancels the upload, and then
/// `on_done` is not called (the server keeps nothing of a body cut short).
pub fn upload(
    file: &web_sys::File,
    refuse_duplicates: bool,
    batch: Option<&str>,
    on_progress: impl Fn(f64) + 'static,
    on_done: impl Fn(Result<UploadAccepted, UploadError>) + 'static,
) -> Result<XmlHttpRequest, String> {
    let xhr = XmlHttpRequest::new().map_err(js_error)?;
    let duplicates = if refuse_duplicates { "refuse" } else { "allow" };
    let mut query = vec![("duplicates", duplicates)];
    query.extend(batch.map(|b| ("batch_id", b)));
    let url = format!(
        "/api/documents?{}",
        serde_urlencoded::to_string(query).map_err(|e| e.to_string())?
    );
    xhr.open("POST", &url).map_err(js_error)?;
    let form = FormData::new().map_err(js_error)?;
    form.append_with_blob_and_filename("file", file, &file.name())
        .map_err(js_error)?;

    let progress = Closure::<dyn FnMut(ProgressEvent)>::new(move |e: ProgressEvent| {
        if e.length_computable() && e.total() > 0.0 {
            on_progress(e.loaded() / e.total());
        }
    });
    xhr.upload()
        .map_err(js_error)?
        .set_onprogress(Some(progress.as_ref().unchecked_ref()));

    let on_done = std::rc::Rc::new(on_done);
    let done = on_done.clone();
    let req = xhr.clone();
    let load = Closure::<dyn FnMut(JsValue)>::new(move |_: JsValue| {
        let status = req.status().unwrap_or(0);
        let body = req.response_text().ok().flatten().unwrap_or_default();
        if status == 202 || status == 200 {
            done(
                serde_json::from_str::<UploadAccepted>(&body)
                    .map_err(|e| UploadError::plain(format!("unexpected answer: {e}"))),
            );
        } else {
            done(Err(UploadError {
                code: error_code(&body),
                message: error_message(status, &body),
            }));
        }
    });
    xhr.set_onload(Some(load.as_ref().unchecked_ref()));
    let failed = Closure::<dyn FnMut(JsValue)>::new(move |_: JsValue| {
        on_done(Err(UploadError::plain(
            "the upload was interrupted; check your connection and try again",
        )));
    });
    xhr.set_onerror(Some(failed.as_ref().unchecked_ref()));
    xhr.send_with_opt_form_data(Some(&form)).map_err(js_error)?;
    // The request owns its callbacks from here; JS collects them with it.
    let _ = progress.into_js_value();
    let _ = load.into_js_value();
    let _ = failed.into_js_value();
    Ok(xhr)
}
