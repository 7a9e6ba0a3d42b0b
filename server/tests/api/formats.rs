//! The files people upload besides PDF and text: Word, PowerPoint, Excel,
//! OpenDocument, EPUB and CSV, built in the test. Each reaches `done` and a
//! sentence from inside it (a table cell, a footnote, a slide, a chapter)
//! is found by search; a hostile archive fails with a reason and leaves the
//! service working.

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::ALICE;
use crate::helpers::{queues, spawn_with, Options, TestApp};
use crate::office_files;

async fn app() -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1"])),
        ..Default::default()
    })
    .await
}

/// Uploads `bytes` and waits for `done`; returns the job.
async fn done(app: &TestApp, filename: &str, bytes: Vec<u8>) -> Value {
    let accepted = app.upload_ok(ALICE, filename, bytes).await;
    let job_id = accepted["job_id"].as_str().expect("job id");
    app.wait_state(ALICE, job_id, "done").await
}

/// The first hit for `q`: its file name and passage.
async fn top_hit(app: &TestApp, q: &str) -> (String, String) {
    let q = url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>();
    let hits: Vec<Value> = app.get_json(ALICE, &format!("/api/search?q={q}&k=3")).await;
    let hit = hits.first().unwrap_or_else(|| panic!("no hit for {q}"));
    (
        hit["filename"].as_str().expect("filename").to_string(),
        hit["text"].as_str().expect("text").to_string(),
    )
}

#[tokio::test]
async fn word_powerpoint_opendocument_and_epub_files_are_read_and_found_by_what_is_inside() {
    let app = app().await;
    let docx = office_files::docx(
        &[
            "Fleet maintenance handbook",
            "Vans are inspected before each winter.",
        ],
        &[
            &["Part", "Interval"],
            &["Timing belt of the cargo van", "every 90,000 km"],
        ],
        Some("The cormorant depot keeps spare wiper blades."),
    );
    let pptx = office_files::pptx(&[
        &["Kick-off"],
        &["Roadmap", "The lantern festival launch slips to April."],
    ]);
    let odt = office_files::odt(
        "Minutes",
        &["The treasurer reported a surplus from the jumble sale."],
        &["Action", "Repaint the boathouse"],
    );
    let odp = office_files::odp(&[
        &["Welcome"],
        &["Ferry timetable", "The night ferry leaves at 23:40."],
    ]);
    let epub = office_files::epub(&[
        ("Prologue", "A lighthouse stands on the headland."),
        (
            "The keeper",
            "The keeper winds the clockwork lens every dusk.",
        ),
    ]);

    done(&app, "handbook.docx", docx).await;
    done(&app, "roadmap.pptx", pptx).await;
    done(&app, "minutes.odt", odt).await;
    done(&app, "ferry.odp", odp).await;
    done(&app, "lighthouse.epub", epub).await;
    let xlsx = office_files::xlsx(
        &[("Sales", &[&["Region", "Q1"], &["Northwind depot", "1200"]])],
        None,
    );
    done(&app, "sales.xlsx", xlsx).await;
    let ods = office_files::ods(&[("Stock", &[&["Item", "Count"], &["tarred rope", "7"]])]);
    done(&app, "stock.ods", ods).await;
    done(
        &app,
        "ledger.csv",
        b"Account,Balance\nHarbour mooring fees,310\n".to_vec(),
    )
    .await;
    done(
        &app,
        "tides.tsv",
        b"Port\tHigh water\nSaltmarsh quay\t06:12\n".to_vec(),
    )
    .await;
    let stored: Vec<(String, String, Option<i32>)> = sqlx::query_as(
        "SELECT filename::text, content_type::text, pages FROM documents ORDER BY filename",
    )
    .fetch_all(&app.pool)
    .await
    .expect("documents");
    let stored: Vec<(&str, &str, Option<i32>)> = stored
        .iter()
        .map(|(f, t, p)| (f.as_str(), t.as_str(), *p))
        .collect();
    assert_eq!(
        stored,
        [
            (
                "ferry.odp",
                "application/vnd.oasis.opendocument.presentation",
                Some(2)
            ),
            (
                "handbook.docx",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                Some(0)
            ),
            ("ledger.csv", "text/csv", Some(1)),
            ("lighthouse.epub", "application/epub+zip", Some(2)),
            (
                "minutes.odt",
                "application/vnd.oasis.opendocument.text",
                Some(0)
            ),
            (
                "roadmap.pptx",
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                Some(2)
            ),
            (
                "sales.xlsx",
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                Some(1)
            ),
            (
                "stock.ods",
                "application/vnd.oasis.opendocument.spreadsheet",
                Some(1)
            ),
            ("tides.tsv", "text/tab-separated-values", Some(1)),
        ],
        "the type each was read as; slides, chapters and sheets counted as pages"
    );

    // A table cell, with its row's other cell beside it.
    let (file, text) = top_hit(&app, "timing belt cargo van").await;
    assert_eq!(file, "handbook.docx");
    assert!(
        text.contains("Timing belt of the cargo van | every 90,000 km"),
        "{text}"
    );
    // A footnote.
    assert_eq!(
        top_hit(&app, "cormorant depot wiper blades").await.0,
        "handbook.docx"
    );
    // A slide's body.
    let (file, text) = top_hit(&app, "lantern festival launch").await;
    assert_eq!(file, "roadmap.pptx");
    assert!(
        text.contains("The lantern festival launch slips to April."),
        "{text}"
    );
    assert_eq!(
        top_hit(&app, "jumble sale surplus treasurer").await.0,
        "minutes.odt"
    );
    assert_eq!(
        top_hit(&app, "repaint the boathouse").await.0,
        "minutes.odt"
    );
    assert_eq!(top_hit(&app, "night ferry 23:40").await.0, "ferry.odp");
    // A spreadsheet row says which column each figure is.
    let (file, text) = top_hit(&app, "Northwind depot").await;
    assert_eq!(file, "sales.xlsx");
    assert!(text.contains("Region: Northwind depot; Q1: 1200"), "{text}");
    let (file, text) = top_hit(&app, "tarred rope").await;
    assert_eq!(file, "stock.ods");
    assert!(text.contains("Item: tarred rope; Count: 7"), "{text}");
    let (file, text) = top_hit(&app, "harbour mooring fees").await;
    assert_eq!(file, "ledger.csv");
    assert!(
        text.contains("Account: Harbour mooring fees; Balance: 310"),
        "{text}"
    );
    let (file, text) = top_hit(&app, "Saltmarsh quay").await;
    assert_eq!(file, "tides.tsv");
    assert!(
        text.contains("Port: Saltmarsh quay; High water: 06:12"),
        "{text}"
    );
    let (file, text) = top_hit(&app, "keeper winds the clockwork lens").await;
    assert_eq!(file, "lighthouse.epub");
    assert!(!text.contains("<"), "no markup: {text}");
}

#[tokio::test]
async fn a_zip_bomb_named_docx_fails_as_unsafe_and_the_next_document_is_read() {
    let app = app().await;
    let body = format!(
        "<w:document xmlns:w=\"x\"><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:body></w:document>",
        "z".repeat(600 << 20)
    );
    let bomb = office_files::zip_of(&[("word/document.xml", body.as_bytes())]);
    drop(body);
    assert!(bomb.len() < 2 << 20, "a small upload: {}", bomb.len());
    let accepted = app.upload_ok(ALICE, "report.docx", bomb).await;
    let job = app
        .wait_state(ALICE, accepted["job_id"].as_str().expect("id"), "failed")
        .await;
    assert_eq!(job["last_error_code"], "unsafe", "{job:#}");
    let error = job["last_error"].as_str().expect("error");
    assert!(error.contains("it looks like a zip bomb"), "{error}");
    assert_eq!(job["attempt"], 1, "not retried");

    // A zip that is none of the formats, whatever its name, is damaged.
    let plain = office_files::zip_of(&[("notes.txt", b"hello")]);
    let accepted = app.upload_ok(ALICE, "notes.docx", plain).await;
    let job = app
        .wait_state(ALICE, accepted["job_id"].as_str().expect("id"), "failed")
        .await;
    assert_eq!(job["last_error_code"], "damaged", "{job:#}");

    // The service carries on.
    let docx = office_files::docx(&["The quartermaster counts the oars."], &[], None);
    done(&app, "oars.docx", docx).await;
    assert_eq!(
        top_hit(&app, "quartermaster counts oars").await.0,
        "oars.docx"
    );
}

#[tokio::test]
async fn a_zip_of_another_kind_is_refused_at_upload_with_the_list_of_what_is_read() {
    let app = app().await;
    let archive = office_files::zip_of(&[("photos/readme.txt", b"holiday pictures")]);
    let r = app.upload(ALICE, "photos.zip", archive).await;
    assert_eq!(r.status(), 415);
    let body: Value = r.json().await.expect("json");
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains(
            "Word (.docx), PowerPoint (.pptx), Excel (.xlsx), OpenDocument (.odt, .odp, .ods), EPUB, e-mail (.eml), RTF, and PNG, JPEG and TIFF images"
        ),
        "{body:#}"
    );
    assert!(message.contains("an archive (zip)"), "{body:#}");
}

#[tokio::test]
async fn an_email_is_read_with_its_text_attachment_and_found_by_both() {
    let app = app().await;
    let eml = "From: Harbour Office <office@harbour.example>\r
To: Crew <crew@harbour.example>\r
Subject: Winter mooring plan\r
Date: Mon, 7 Dec 2026 09:30:00 +0100\r
MIME-Version: 1.0\r
Content-Type: multipart/mixed; boundary=\"cut\"\r
\r
--cut\r
Content-Type: text/html; charset=utf-8\r
\r
<html><body><p>The <b>lifeboat</b> moves to the inner basin before the first frost.</p></body></html>\r
--cut\r
Content-Type: text/plain; charset=utf-8; name=\"berths.txt\"\r
Content-Disposition: attachment; filename=\"berths.txt\"\r
Content-Transfer-Encoding: quoted-printable\r
\r
Berth nine is reserved for the dredger from January to M=C3=A4rz.\r
--cut--\r
";
    let job = done(&app, "mooring.eml", eml.as_bytes().to_vec()).await;
    assert_eq!(job["state"], "done");
    let (file, text) = top_hit(&app, "lifeboat inner basin frost").await;
    assert_eq!(file, "mooring.eml");
    assert!(text.contains("Subject: Winter mooring plan"), "{text}");
    let (file, text) = top_hit(&app, "berth reserved for the dredger").await;
    assert_eq!(file, "mooring.eml");
    assert!(text.contains("Attachment berths.txt:"), "{text}");
    assert!(text.contains("März"), "quoted-printable decoded: {text}");
}

#[tokio::test]
async fn an_rtf_file_is_read_with_its_table_and_footnote_and_found_by_both() {
    let app = app().await;
    // As WordPad writes it: a Windows code page, accents as `\'xx` escapes
    // and `\uN`, a table, a footnote.
    let rtf = br"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\fswiss Arial;}}
{\info{\title Galley minutes}}
\viewkind4\uc1\pard\f0\fs22 The galley serves cr\'e8me br\u251?l\'e9e on Fridays.\par
The cook keeps the saffron{\footnote\pard\plain The saffron tin sits behind the flour barrel.} under lock.\par
\trowd\cellx3000\cellx6000 Crate\cell Ship biscuits\cell\row
\trowd\cellx3000\cellx6000 Count\cell 240\cell\row
}";
    let job = done(&app, "galley.rtf", rtf.to_vec()).await;
    assert_eq!(job["state"], "done");
    let (file, text) = top_hit(&app, "where is the saffron tin kept").await;
    assert_eq!(file, "galley.rtf");
    assert!(text.contains("behind the flour barrel"), "{text}");
    assert!(
        !text.contains("\\par") && !text.contains("\\cell"),
        "{text}"
    );
    let (file, text) = top_hit(&app, "crème brûlée on Fridays").await;
    assert_eq!(file, "galley.rtf");
    assert!(text.contains("Galley minutes"), "{text}");
    assert!(text.contains("crème brûlée"), "code page decoded: {text}");
    assert!(text.contains("Crate\tShip biscuits"), "{text}");
}
