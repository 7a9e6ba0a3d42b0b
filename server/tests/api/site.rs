//! The built site (`scripts/build-site.sh`): the browser bundle is sent as
//! compressed when it was built, the `.br` or `.gz` beside it that the
//! browser accepts, byte for byte, never compressed again per visitor;
//! pages and API answers are compressed as they are sent.

use std::io::{Read, Write};

use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE};

use crate::helpers::{spawn_with, Options};

/// A made-up bundle: compressible, and large enough that compressing it
/// per request would show.
fn bundle() -> Vec<u8> {
    (0..200_000u32)
        .flat_map(|i| format!("(func $f{i} (result i32) i32.const {})\n", i % 97).into_bytes())
        .collect()
}

#[tokio::test]
async fn the_bundle_is_served_as_compressed_at_build_time_in_the_encoding_the_browser_accepts() {
    let site = tempfile::tempdir().expect("site dir");
    let pkg = site.path().join("pkg");
    std::fs::create_dir_all(&pkg).expect("pkg");
    let wasm = bundle();
    let mut br = Vec::new();
    brotli::CompressorWriter::new(&mut br, 4096, 5, 22)
        .write_all(&wasm)
        .expect("brotli");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&wasm).expect("gzip");
    let gz = gz.finish().expect("gzip");
    std::fs::write(pkg.join("docflow_bg.wasm"), &wasm).expect("write");
    std::fs::write(pkg.join("docflow_bg.wasm.br"), &br).expect("write");
    std::fs::write(pkg.join("docflow_bg.wasm.gz"), &gz).expect("write");
    std::fs::write(site.path().join("robots.txt"), "User-agent: *\n").expect("write");

    let root = site.path().to_string_lossy().into_owned();
    let app = spawn_with(Options {
        configure: Box::new(move |c| c.site_root = root),
        ..Default::default()
    })
    .await;
    let client = app.anonymous();
    // `path` asked for with `encoding`: its status, content encoding and
    // type, and body as sent.
    let fetch = |path: &str, encoding: &'static str| {
        let request = client.get(app.url(path)).header(ACCEPT_ENCODING, encoding);
        async move {
            let r = request.send().await.expect("get");
            let header = |name| {
                r.headers()
                    .get(name)
                    .map(|v: &reqwest::header::HeaderValue| v.to_str().unwrap_or("").to_string())
            };
            let (ce, ct) = (header(CONTENT_ENCODING), header(CONTENT_TYPE));
            (r.status(), ce, ct, r.bytes().await.expect("body").to_vec())
        }
    };
    let get = |encoding: &'static str| {
        let sent = fetch("/pkg/docflow_bg.wasm", encoding);
        async move {
            let (status, ce, ct, body) = sent.await;
            assert_eq!(status, 200, "{encoding}");
            (ce, ct, body)
        }
    };

    // Chromium's header: brotli, the file made at build time, as it is.
    let (ce, ct, body) = get("gzip, deflate, br, zstd").await;
    assert_eq!(ce.as_deref(), Some("br"));
    assert_eq!(ct.as_deref(), Some("application/wasm"));
    assert!(body == br, "the .br file byte for byte");
    let mut unpacked = Vec::new();
    brotli::Decompressor::new(&body[..], 4096)
        .read_to_end(&mut unpacked)
        .expect("a valid brotli stream");
    assert!(unpacked == wasm, "the bundle itself");

    let (ce, _, body) = get("gzip").await;
    assert_eq!(ce.as_deref(), Some("gzip"));
    assert!(body == gz, "the .gz file byte for byte");

    let (ce, _, body) = get("identity").await;
    assert_eq!(ce, None);
    assert!(body == wasm);

    // A file without a compressed twin is served too; a path that is no
    // file is the pages' not-found answer.
    let (status, ce, _, body) = fetch("/robots.txt", "identity").await;
    assert_eq!(status, 200);
    assert_eq!(ce, None);
    assert_eq!(&body[..], b"User-agent: *\n");
    let (status, ..) = fetch("/pkg/nothing.js", "br").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn pages_and_api_answers_are_compressed_as_they_are_sent() {
    let app = spawn_with(Options::default()).await;
    let r = app
        .anonymous()
        .get(app.url("/login"))
        .header(ACCEPT_ENCODING, "br")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get(CONTENT_ENCODING).map(|v| v.as_bytes()),
        Some(&b"br"[..])
    );
    let body = r.bytes().await.expect("body");
    let mut page = String::new();
    brotli::Decompressor::new(&body[..], 4096)
        .read_to_string(&mut page)
        .expect("a valid brotli stream");
    assert!(page.contains("<html"), "{page}");
}
