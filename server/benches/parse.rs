//! Parse throughput by the shape of a document: pages (slides, sheets) per
//! second, CPU per page and the parser's peak memory, for a 300-page text
//! PDF, a 300-page scanned PDF (every page recognised by OCR), a 50-sheet
//! workbook and a 200-slide deck. Each document is parsed by a fresh
//! `docflow parse-child` under the default limits (512 MB, 60 s a page),
//! as a worker runs it; CPU and peak RSS include the programs it starts
//! (`pdftoppm`, `tesseract`), measured with `getrusage` on a runner
//! process of its own per document.
//!
//! Run: `cargo bench -p server --bench benches parse`; `PARSE_SCALE=10` divides the
//! sizes by 10 (the test command's smoke run).

use std::{
    io::{Read, Write},
    process::{Command, Stdio},
    time::Instant,
};

use docflow::parser::{extract::Caps, wire, Kind};

use crate::{office_files, sample_pdf, scans};

const MEMORY: u64 = 512 << 20;
const CAPS: Caps = Caps {
    max_text: 32 << 20,
    max_pages: 10_000,
    max_inflated: 64 << 20,
    ocr_max_pixels: 40_000_000,
    ocr_max_pages: 1_000,
};

/// A line of a manual's page: about 60 words a page at 10 lines.
fn line(page: usize, n: usize) -> String {
    format!("Section {page}.{n}: check the valve seal and torque the flange bolts to spec.")
}

fn text_pages(pages: usize, lines: usize) -> Vec<Vec<String>> {
    (1..=pages)
        .map(|p| (0..lines).map(|n| line(p, n)).collect())
        .collect()
}

fn documents(scale: usize) -> Vec<(&'static str, Kind, Vec<u8>, usize)> {
    let pages = 300 / scale;
    let pdf = sample_pdf::pdf(&text_pages(pages, 40));
    let scanned = scans::scanned_pdf(&text_pages(pages, 25));
    let sheets = 50 / scale;
    let rows: Vec<Vec<String>> = std::iter::once(
        ["Region", "Product", "Q1", "Q2", "Q3", "Q4"]
            .map(String::from)
            .to_vec(),
    )
    .chain((0..200).map(|r| {
        vec![
            format!("Region {}", r % 7),
            format!("Product {r}"),
            (r * 13).to_string(),
            (r * 17).to_string(),
            (r * 19).to_string(),
            (r * 23).to_string(),
        ]
    }))
    .collect();
    let row_refs: Vec<Vec<&str>> = rows
        .iter()
        .map(|r| r.iter().map(String::as_str).collect())
        .collect();
    let row_slices: Vec<&[&str]> = row_refs.iter().map(Vec::as_slice).collect();
    let names: Vec<String> = (1..=sheets).map(|s| format!("Sheet {s}")).collect();
    let workbook: Vec<(&str, &[&[&str]])> = names
        .iter()
        .map(|n| (n.as_str(), row_slices.as_slice()))
        .collect();
    let xlsx = office_files::xlsx(&workbook, None);
    let slides = 200 / scale;
    let texts: Vec<[String; 3]> = (1..=slides)
        .map(|s| {
            [
                format!("Slide {s}: quarterly review"),
                line(s, 1),
                line(s, 2),
            ]
        })
        .collect();
    let refs: Vec<Vec<&str>> = texts
        .iter()
        .map(|t| t.iter().map(String::as_str).collect())
        .collect();
    let deck: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
    let pptx = office_files::pptx(&deck);
    vec![
        ("text PDF", Kind::Pdf, pdf, pages),
        ("scanned PDF (OCR)", Kind::Pdf, scanned, pages),
        ("workbook", Kind::Xlsx, xlsx, sheets),
        ("slide deck", Kind::Pptx, pptx, slides),
    ]
}

/// What one parse cost, as the runner reports it.
struct Run {
    pages: u32,
    text_bytes: u64,
    reports: u32,
    wall_ms: f64,
    cpu_ms: f64,
    peak_mb: f64,
}

/// Runner: parses the document in `file` (of `kind`) in a fresh parser
/// child and prints what it cost on one line.
fn run_one(kind: &str, file: &str) {
    let kind = Kind::from_mime(kind).expect("kind");
    let body = std::fs::read(file).expect("document");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_docflow"))
        .args(["parse-child", "--memory", &MEMORY.to_string()])
        .env("MIMALLOC_ARENA_RESERVE", "16MiB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("parser child");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let req = wire::Request {
        kind,
        caps: CAPS,
        cpu_seconds: 60,
        len: body.len() as u64,
    };
    stdin.write_all(&req.encode()).expect("request");
    stdin.write_all(&body).expect("body");
    stdin.flush().expect("flush");
    let mut reports = 0;
    let head = loop {
        let mut magic = [0u8; wire::MAGIC];
        stdout.read_exact(&mut magic).expect("frame");
        if &magic == wire::PROGRESS_MAGIC {
            let mut f = [0u8; wire::PROGRESS];
            stdout.read_exact(&mut f).expect("progress");
            reports += 1;
            continue;
        }
        assert_eq!(&magic, wire::RESPONSE_MAGIC);
        let mut h = [0u8; wire::RESPONSE_HEAD];
        stdout.read_exact(&mut h).expect("head");
        break wire::ResponseHead::decode(&h);
    };
    let mut payload = vec![0u8; head.payload_len() as usize];
    stdout.read_exact(&mut payload).expect("payload");
    let wall = started.elapsed();
    let parsed = head.finish(payload).expect("the document is read");
    drop(stdin);
    child.wait().expect("child ends");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("rusage");
    let cpu = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e3 + t.tv_usec() as f64 / 1e3;
    println!(
        "{} {} {} {:.1} {:.1} {:.1}",
        parsed.pages.unwrap_or(0),
        parsed.text.len(),
        reports,
        wall.as_secs_f64() * 1e3,
        cpu(usage.user_time()) + cpu(usage.system_time()),
        usage.max_rss() as f64 / 1024.0,
    );
}

fn measure(kind: Kind, body: &[u8]) -> Run {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), body).expect("write");
    let out = Command::new(std::env::current_exe().expect("bench exe"))
        .args([
            "parse",
            "--one",
            kind.mime(),
            &file.path().display().to_string(),
        ])
        .output()
        .expect("runner");
    assert!(
        out.status.success(),
        "runner: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse().expect("number"))
        .collect();
    Run {
        pages: f[0] as u32,
        text_bytes: f[1] as u64,
        reports: f[2] as u32,
        wall_ms: f[3],
        cpu_ms: f[4],
        peak_mb: f[5],
    }
}

pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--one") {
        return run_one(&args[at + 1], &args[at + 2]);
    }
    let scale: usize = std::env::var("PARSE_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    println!("parse: one fresh parser child per document (limits 512 MB, 60 s)");
    println!(
        "{:<18} {:>6} {:>7} {:>9} {:>10} {:>9} {:>12} {:>10} {:>8}",
        "document",
        "pages",
        "size",
        "text",
        "wall",
        "pages/s",
        "CPU per page",
        "peak RSS",
        "reports"
    );
    for (name, kind, body, expect) in documents(scale) {
        let run = measure(kind, &body);
        assert_eq!(run.pages as usize, expect, "{name}: pages read");
        assert!(run.text_bytes > 0, "{name}: text");
        assert!(
            run.peak_mb < (MEMORY >> 20) as f64,
            "{name}: within its limit"
        );
        println!(
            "{:<18} {:>6} {:>5} KB {:>6} KB {:>8.0} ms {:>9.1} {:>9.1} ms {:>7.0} MB {:>8}",
            name,
            run.pages,
            body.len() / 1024,
            run.text_bytes / 1024,
            run.wall_ms,
            f64::from(run.pages) * 1e3 / run.wall_ms,
            run.cpu_ms / f64::from(run.pages),
            run.peak_mb,
            run.reports,
        );
    }
}
