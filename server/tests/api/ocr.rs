//! Scans and photos: PDF pages that are only pictures of text, and PNG,
//! JPEG and TIFF uploads, are read by Tesseract; a long PDF reports its
//! pages over SSE while its parse step runs. The pictures are made in the
//! test: known text set in a real PDF (lopdf), drawn by poppler's
//! `pdftoppm`, and put back into a PDF as images only.

use std::collections::HashMap;

use docflow::Roles;
use serde_json::Value;

use crate::fixtures::{ADMIN, ALICE};
use crate::helpers::{queues, spawn_with, Options, SseReader, TestApp};
use crate::sample_pdf;
use crate::scans::{draw, scanned_pdf};

async fn app() -> TestApp {
    spawn_with(Options {
        roles: Roles::all(queues(&["high=2", "normal=1", "slow=1"])),
        ..Default::default()
    })
    .await
}

/// Lowercase words of `text`, letters and digits only.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The share of `known`'s words (counted with repeats) found in `read`.
fn recall(known: &str, read: &str) -> f64 {
    let mut found: HashMap<String, usize> = HashMap::new();
    for w in words(read) {
        *found.entry(w).or_default() += 1;
    }
    let known = words(known);
    let hits = known
        .iter()
        .filter(|w| match found.get_mut(*w) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .count();
    hits as f64 / known.len() as f64
}

/// The text docflow read from a document (its parsed-text blob).
fn parsed_text(app: &TestApp, document_id: &str) -> String {
    let file = app
        .blob_files()
        .into_iter()
        .find(|p| {
            p.parent().and_then(|d| d.file_name()) == Some(document_id.as_ref())
                && p.file_name().and_then(|n| n.to_str()) != Some("original")
        })
        .expect("a parsed-text blob");
    std::fs::read_to_string(file).expect("utf-8 text")
}

const PAGES: [&[&str]; 5] = [
    &[
        "Quarterly report of the harbour authority",
        "The north pier was repaired in March after the storm.",
        "Cargo volumes rose by twelve percent over the winter.",
    ],
    &[
        "Ferry services to the islands ran every morning.",
        "Two new cranes were delivered to the container terminal.",
        "The pilot boats were refitted with quieter engines.",
    ],
    &[
        "Dredging of the western channel finished in April.",
        "Fishing boats paid lower berth fees during the festival.",
        "A seal colony returned to the sandbank near the lighthouse.",
    ],
    &[
        "The customs office moved into the renovated warehouse.",
        "Passenger numbers on the evening crossing doubled.",
        "Volunteers cleaned the beach below the old fort.",
    ],
    &[
        "Next year the authority plans a shore power station.",
        "Cruise ships will then switch off their generators at berth.",
        "The harbour master thanks every crew for a safe season.",
    ],
];

#[tokio::test]
async fn a_scanned_pdf_and_a_png_are_read_by_ocr_and_found_by_search() {
    let app = app().await;
    let pages: Vec<Vec<String>> = PAGES
        .iter()
        .map(|lines| lines.iter().map(|l| l.to_string()).collect())
        .collect();
    let known = pages
        .iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    let scan = scanned_pdf(&pages);
    // No text layer: what the PDF libraries find is nothing.
    assert!(pdf_extract::extract_text_from_mem(&scan)
        .unwrap_or_default()
        .trim()
        .is_empty());
    let up = app.upload_ok(ALICE, "harbour-scan.pdf", scan).await;
    let job_id = up["job_id"].as_str().expect("job id");
    let job = app.wait_state(ALICE, job_id, "done").await;
    let read = parsed_text(&app, up["document_id"].as_str().expect("document id"));
    let share = recall(&known, &read);
    println!(
        "scanned PDF: {:.1} % of the known words recognised",
        share * 100.0
    );
    assert!(share >= 0.95, "{share}: {read}");
    let timeline = app.timeline(job_id).await;
    assert!(
        timeline
            .iter()
            .any(|m| m == "parse done; pages 1–5 recognised by OCR"),
        "{timeline:#?}"
    );
    assert_eq!(job["progress"]["pages_parsed"], 5, "{job:#}");
    assert_eq!(job["progress"]["pages_total"], 5, "{job:#}");

    // A photo of a paragraph: a PNG, and the same as a JPEG.
    let paragraph: Vec<String> = [
        "Tidal charts for the estuary are posted at the harbour office.",
        "Skippers should check the shallow bar before low water.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let printed = sample_pdf::pdf(std::slice::from_ref(&paragraph));
    let png = draw(&printed, 1, 200, "-png");
    let up = app.upload_ok(ALICE, "tides.png", png).await;
    let png_job = up["job_id"].as_str().expect("job id");
    app.wait_state(ALICE, png_job, "done").await;
    let read = parsed_text(&app, up["document_id"].as_str().expect("document id"));
    let share = recall(&paragraph.join(" "), &read);
    println!("PNG: {:.1} % of the known words recognised", share * 100.0);
    assert!(share >= 0.95, "{share}: {read}");
    assert!(app
        .timeline(png_job)
        .await
        .iter()
        .any(|m| m == "parse done; page 1 recognised by OCR"));
    let jpeg = draw(&printed, 1, 200, "-jpeg");
    let up = app.upload_ok(ALICE, "tides-photo.jpg", jpeg).await;
    app.wait_state(ALICE, up["job_id"].as_str().expect("id"), "done")
        .await;

    let q = url::form_urlencoded::byte_serialize(b"seal colony sandbank").collect::<String>();
    let hits: Vec<Value> = app.get_json(ALICE, &format!("/api/search?q={q}&k=3")).await;
    assert_eq!(hits[0]["filename"], "harbour-scan.pdf", "{hits:#?}");
    let text = hits[0]["text"].as_str().unwrap_or_default().to_lowercase();
    assert!(text.contains("seal colony"), "{hits:#?}");
}

#[tokio::test]
async fn a_300_page_pdf_reports_its_pages_over_sse_while_it_is_parsed() {
    let app = app().await;
    let pages: Vec<Vec<String>> = (1..=300)
        .map(|n| {
            (0..30)
                .map(|l| format!("Page {n} line {l}: the manual describes valve number {n}{l}."))
                .collect()
        })
        .collect();
    let up = app
        .upload_ok(ALICE, "manual.pdf", sample_pdf::pdf(&pages))
        .await;
    let job_id = up["job_id"].as_str().expect("job id");
    let mut sse = SseReader::open(
        &app.client(ALICE).await,
        &app.url(&format!("/api/jobs/{job_id}/events")),
        None,
    )
    .await;
    let mut reports = Vec::new();
    let mut parse_done = false;
    while let Some(e) = sse.next().await {
        if e.data["step"] == "parse" {
            match e.data["progress"].as_object() {
                Some(p) if !parse_done => reports.push((
                    p["done"].as_i64().expect("done"),
                    p["total"].as_i64().expect("total"),
                    e.data["message"].as_str().expect("message").to_string(),
                )),
                Some(_) => panic!("a parse report after the step ended: {:?}", e.data),
                None => parse_done = true,
            }
        }
        if e.data["state"] == "done" {
            break;
        }
    }
    assert!(parse_done, "the parse step ended");
    println!("parse reports: {reports:?}");
    assert!(reports.len() >= 5, "{reports:?}");
    assert!(reports.iter().all(|(done, total, message)| {
        *total == 300 && *done < 300 && *message == format!("parse {done}/300 pages")
    }));
    assert!(
        reports.windows(2).all(|w| w[0].0 < w[1].0),
        "pages only go up: {reports:?}"
    );
    let job = app.job(ALICE, job_id).await;
    assert_eq!(job["progress"]["pages_parsed"], 300, "{job:#}");
    assert_eq!(job["progress"]["pages_total"], 300, "{job:#}");
}

/// Reads `/api/admin/stats` every 200 ms until the job ends, and returns
/// each snapshot of `queue` taken while a document of it was being parsed.
async fn queue_while_parsing(app: &TestApp, job_id: &str, queue: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while std::time::Instant::now() < deadline {
        let stats: Value = app.get_json(ADMIN, "/api/admin/stats").await;
        let q = stats["queues"]
            .as_array()
            .and_then(|qs| qs.iter().find(|q| q["queue"] == queue))
            .unwrap_or_else(|| panic!("no queue {queue} in {stats}"))
            .clone();
        if q["pages_total"].as_i64().unwrap_or(0) > 0 {
            seen.push(q);
        }
        if app.job(ALICE, job_id).await["state"] == "done" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    seen
}

/// The step deadline of the test below: many times one page's time.
const STEP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(8);
/// Pages of its scan: read in well over the deadline.
const LONG_SCAN_PAGES: usize = 40;

#[tokio::test]
async fn a_scan_that_takes_longer_than_the_step_deadline_is_read_while_it_reports_pages() {
    // Recognising 40 pages takes about 26 s here (0.65 s a page); the step
    // deadline is 8 s, and counts from the last page reported. (At 3 s, and
    // once at 5 s, a page read while the real-model tests and the vector
    // index builds shared the cores took longer: the first page of an
    // attempt also starts the rasteriser and the OCR engine.)
    // Meanwhile the dashboard counts the pages read: with no job ended
    // yet, the queue still says when it clears.
    let app = spawn_with(Options {
        roles: Roles::all(queues(&["high=1"])),
        configure: Box::new(|c| c.step_timeout = STEP_DEADLINE),
        ..Default::default()
    })
    .await;
    let pages: Vec<Vec<String>> = (1..=LONG_SCAN_PAGES)
        .map(|n| vec![format!("Logbook page {n}: the tide turned at noon.")])
        .collect();
    let up = app
        .upload_ok(ALICE, "logbook.pdf", scanned_pdf(&pages))
        .await;
    let job_id = up["job_id"].as_str().expect("job id");
    let parsing = queue_while_parsing(&app, job_id, "high").await;
    let job = app
        .wait_job(ALICE, job_id, std::time::Duration::from_secs(180), |j| {
            j["state"] == "done"
        })
        .await;
    println!("the high queue while the scan was read: {parsing:#?}");
    let read = parsing
        .iter()
        .filter(|q| q["pages_parsed"].as_i64() > Some(0))
        .collect::<Vec<_>>();
    assert!(!read.is_empty(), "no page was seen read: {parsing:#?}");
    for q in &read {
        assert_eq!(q["pages_total"], LONG_SCAN_PAGES, "{q:#}");
        let eta = q["eta_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("no ETA: {q:#}"));
        assert!(eta > 0.0, "{q:#}");
    }
    let parse_ms = job["steps"][0]["duration_ms"].as_i64().expect("duration");
    println!(
        "{LONG_SCAN_PAGES} scanned pages read in {parse_ms} ms under a {} s step deadline",
        STEP_DEADLINE.as_secs()
    );
    assert!(
        parse_ms > STEP_DEADLINE.as_millis() as i64,
        "the deadline was not tested: {parse_ms} ms"
    );
    assert_eq!(job["attempt"], 1, "one run: {job:#}");
    let timeline = app.timeline(job_id).await;
    assert!(
        timeline
            .iter()
            .any(|m| m.starts_with("parse ") && m.ends_with(&format!("/{LONG_SCAN_PAGES} pages"))),
        "{timeline:#?}"
    );
}
