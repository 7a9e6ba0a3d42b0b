//! What real users upload: text in legacy encodings, damaged PDFs, the same
//! file twice; and search answers that only show what matches, once.

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::ALICE;
use crate::helpers::{queues, spawn_with, Options, TestApp};

async fn app() -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1"])),
        ..Default::default()
    })
    .await
}

async fn search(app: &TestApp, q: &str) -> Vec<Value> {
    let q = url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>();
    app.get_json(ALICE, &format!("/api/search?q={q}&k=10"))
        .await
}

async fn done(app: &TestApp, filename: &str, bytes: Vec<u8>) -> Value {
    let accepted = app.upload_ok(ALICE, filename, bytes).await;
    let job_id = accepted["job_id"].as_str().expect("job id");
    app.wait_state(ALICE, job_id, "done").await;
    accepted
}

#[tokio::test]
async fn latin1_and_utf16_files_are_read_with_the_right_characters_and_found() {
    let app = app().await;
    // Windows-1252, as a Western European editor saves it.
    let latin1: Vec<u8> = "Le café de la gare ouvre à six heures; déjà plein de voyageurs pressés."
        .chars()
        .map(|c| u8::try_from(u32::from(c)).expect("latin-1"))
        .collect();
    assert!(std::str::from_utf8(&latin1).is_err(), "not UTF-8");
    done(&app, "gare.txt", latin1).await;
    // UTF-16 little-endian with its byte-order mark, as Windows Notepad saves it.
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(
            "Grüße aus Köln: die Straßenbahn fährt über die Brücke."
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    done(&app, "köln.txt", utf16).await;

    let hits = search(&app, "café gare voyageurs").await;
    assert_eq!(hits[0]["filename"], "gare.txt");
    let text = hits[0]["text"].as_str().expect("text");
    assert!(
        text.contains("Le café de la gare ouvre à six heures; déjà"),
        "{text}"
    );
    let hits = search(&app, "Straßenbahn Brücke").await;
    assert_eq!(hits[0]["filename"], "köln.txt");
    let text = hits[0]["text"].as_str().expect("text");
    assert!(text.contains("Grüße aus Köln"), "{text}");
    assert!(
        !text.contains('\u{fffd}') && !text.contains('\0'),
        "{text:?}"
    );
}

#[tokio::test]
async fn refusals_say_what_the_file_is() {
    let app = app().await;
    let refused = |name: &'static str, bytes: &'static [u8]| {
        let app = &app;
        async move {
            let r = app.upload(ALICE, name, bytes.to_vec()).await;
            assert_eq!(r.status(), 415, "{name}");
            let body: Value = r.json().await.expect("json");
            body["error"]["message"]
                .as_str()
                .expect("message")
                .to_string()
        }
    };
    let m = refused(
        "scan.pdf",
        b"\x00\x01\x02\x03 this is no PDF header \x00\x00",
    )
    .await;
    assert!(m.contains("damaged PDF"), "{m}");
    let m = refused("photo.txt", b"GIF89a\x10\0\x10\0\x80\0\0").await;
    assert!(m.contains("an image (gif)"), "{m}");
    let m = refused("data.txt", b"\x01\x02\x03\x04\x05\x06\x07\x08").await;
    assert!(m.contains("binary"), "{m}");
    assert_eq!(app.count("documents").await, 0, "nothing of them is kept");

    // A PDF damaged past its header is found out by the parse step.
    let b = app
        .upload_ok(
            ALICE,
            "broken.pdf",
            b"%PDF-1.7\n1 0 obj <<\ngarbage".to_vec(),
        )
        .await;
    let job = app
        .wait_state(ALICE, b["job_id"].as_str().expect("id"), "failed")
        .await;
    let error = job["last_error"].as_str().expect("error");
    assert!(error.contains("PDF is damaged"), "{error}");
}

#[tokio::test]
async fn a_second_upload_of_the_same_file_is_flagged_and_can_be_refused() {
    let app = app().await;
    let bytes = b"The lighthouse keeper logs every passing ship in a leather ledger.".to_vec();
    let first = done(&app, "ledger.txt", bytes.clone()).await;
    assert!(first["duplicate_of"].is_null());

    // Asked to refuse duplicates: 409, nothing kept.
    let c = app.client(ALICE).await;
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes.clone()).file_name("ledger copy.txt"),
    );
    let r = c
        .post(app.url("/api/documents?duplicates=refuse"))
        .multipart(form)
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], "duplicate");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("you uploaded this file on") && message.contains("ledger.txt"),
        "{message}"
    );
    assert_eq!(app.count("documents").await, 1);

    // By default the copy is kept and names the first upload.
    let second = done(&app, "ledger copy.txt", bytes).await;
    assert_eq!(second["duplicate_of"]["document_id"], first["document_id"]);
    assert_eq!(second["duplicate_of"]["job_id"], first["job_id"]);
    assert_eq!(second["duplicate_of"]["filename"], "ledger.txt");

    // Search shows the passage once, from the newest upload, with its job.
    let hits = search(&app, "lighthouse keeper ledger").await;
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert_eq!(hits[0]["document_id"], second["document_id"]);
    assert_eq!(hits[0]["job_id"], second["job_id"]);

    // A query that matches nothing finds nothing.
    assert_eq!(
        search(&app, "zebra xylophone quantum").await,
        Vec::<Value>::new()
    );
}

/// The rows of `documents` each plan node over that table returned.
fn rows_read_from_documents(node: &Value, out: &mut Vec<i64>) {
    if node["Relation Name"] == "documents" {
        out.push(node["Actual Rows"].as_i64().expect("actual rows"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        rows_read_from_documents(child, out);
    }
}

#[tokio::test]
async fn the_duplicate_check_reads_one_copy_however_often_a_file_was_uploaded() {
    let app = app().await;
    let bytes = b"The ferry timetable changes with the tides, twice a day.".to_vec();
    let latest = app.upload_ok(ALICE, "timetable.txt", bytes.clone()).await;
    // Built to break it: 500 older copies of the same bytes.
    sqlx::query(
        "INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes, sha256, pages, blob_key, created_at)
         SELECT gen_random_uuid(), tenant_id, uploaded_by, 'old copy ' || g || '.txt', content_type, size_bytes, sha256, pages,
                blob_key, created_at - g * interval '1 minute'
         FROM documents, generate_series(1, 500) g",
    )
    .execute(&app.pool)
    .await
    .expect("older copies");

    // The next upload names the latest copy, not an older one.
    let next = app
        .upload_ok(ALICE, "timetable again.txt", bytes.clone())
        .await;
    assert_eq!(next["duplicate_of"]["document_id"], latest["document_id"]);
    assert_eq!(next["duplicate_of"]["filename"], "timetable.txt");

    // And the check read one row of `documents` to find it, not 502.
    let (tenant, sha): (uuid::Uuid, Vec<u8>) = sqlx::query_as(
        "SELECT tenant_id, sha256::bytea FROM documents WHERE filename = 'timetable again.txt'",
    )
    .fetch_one(&app.pool)
    .await
    .expect("the upload");
    let plan: Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        docflow::upload::LATEST_COPY_SQL
    ))
    .bind(tenant)
    .bind(sha)
    .fetch_one(&app.pool)
    .await
    .expect("explain");
    let mut rows = Vec::new();
    rows_read_from_documents(&plan[0]["Plan"], &mut rows);
    assert_eq!(rows, vec![1], "{plan:#}");
}

#[tokio::test]
async fn every_indexed_chunk_is_searchable_however_many_newer_ones_there_are() {
    let app = app().await;
    let target = done(
        &app,
        "caravan.txt",
        b"The zebra quartermaster keeps the ledger of the caravan.\n".to_vec(),
    )
    .await;
    // A newer document of about 75 chunks that match nothing asked here.
    let filler: String = (0..3_000)
        .map(|i| format!("Filler sentence {i} speaks of ordinary weather. "))
        .collect();
    done(&app, "filler.txt", filler.into_bytes()).await;
    let newer: i64 = app
        .count("chunks WHERE document_id <> (SELECT document_id FROM jobs ORDER BY enqueued_at LIMIT 1)")
        .await;
    assert!(newer > 50, "{newer} chunks in the newer document");

    // The oldest passage is found, first, even asking for one.
    let hits = search(&app, "zebra quartermaster").await;
    assert_eq!(hits[0]["document_id"], target["document_id"], "{hits:?}");
    let one: Vec<Value> = app
        .get_json(ALICE, "/api/search?q=zebra%20quartermaster&k=1")
        .await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["document_id"], target["document_id"]);
    // The newer document answers its own words.
    let hits: Vec<Value> = app
        .get_json(ALICE, "/api/search?q=filler%20sentence%20weather&k=3")
        .await;
    assert_eq!(hits.len(), 3, "{hits:?}");
}
