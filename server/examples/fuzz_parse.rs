//! Mutational fuzzing of parse + chunk, through real parser children with
//! their limits. Seeds are valid PDFs, HTML and Markdown made here; each
//! round mutates one (byte flips, deep nesting tokens, truncation, repeated
//! ranges, huge numbers, splices), parses it in the pool and chunks what
//! comes out. The pool must answer every input (text, rejection, or a killed
//! child) within its deadline, and chunks must stay within their size; inputs
//! that killed a child are saved for a look. Not part of the test command:
//! run `scripts/fuzz.sh [seconds]`.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use docflow::{
    parser::{Kind, ParseError, ParseLimits, ParserPool},
    pipeline::steps::{split, Sizing, CHUNK_CHARS},
};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[path = "../tests/api/sample_pdf.rs"]
mod sample_pdf;

// Only its zip writer: the fuzzer mutates the XML, then packages it.
#[allow(dead_code)]
#[path = "../tests/api/office_files.rs"]
mod office_files;

const LIMITS: ParseLimits = ParseLimits {
    memory: 256 << 20,
    timeout: Duration::from_secs(5),
    max_text: 8 << 20,
    max_pages: 10_000,
    ocr_max_pixels: 40_000_000,
    ocr_max_pages: 100,
};

const TOKENS: &[&str] = &[
    "[",
    "<<",
    "(",
    "<div>",
    "<table><tr><td>",
    "<b>",
    "*",
    "> ",
    "#",
    "0 0 R ",
    "stream\n",
    "\\",
    "1 0 obj ",
    "/Kids [",
    "`",
    "- ",
    "<!--",
    "&#x",
    "<w:p>",
    "<!ENTITY a \"&a;&a;\">",
    "\u{202e}",
    "\n",
];

fn seed_pdf(pages: usize) -> Vec<u8> {
    let pages: Vec<Vec<String>> = (0..pages)
        .map(|p| vec![format!("Page {p} says something."), "And more.".into()])
        .collect();
    sample_pdf::pdf(&pages)
}

fn seeds() -> Vec<(Kind, Vec<u8>)> {
    let html = "<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head><body><h1>Head</h1><p>Some <b>bold</b> words.</p><ul><li>one</li><li>two</li></ul><script>x()</script></body></html>";
    let md = "# Title\n\nA paragraph with *emphasis* and `code`.\n\n> quoted\n\n- item\n- item\n\n```\nblock\n```\n";
    vec![
        (Kind::Pdf, seed_pdf(1)),
        (Kind::Pdf, seed_pdf(4)),
        (Kind::Html, html.as_bytes().to_vec()),
        (Kind::Markdown, md.as_bytes().to_vec()),
        (Kind::Text, b"Plain words. More words\nand lines.".to_vec()),
        (Kind::Csv, b"Region,Q1\n\"North, east\",1200\nSouth,\n".to_vec()),
        (Kind::Eml, b"From: a@b.example\r\nSubject: Hi\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: text/plain\r\n\r\nBody words.\r\n--x\r\nContent-Type: text/plain; name=a.txt\r\nContent-Disposition: attachment; filename=a.txt\r\nContent-Transfer-Encoding: base64\r\n\r\nQXR0YWNoZWQ=\r\n--x--\r\n".to_vec()),
        (Kind::Rtf, br"{\rtf1\ansi\ansicpg1252{\fonttbl{\f0 Arial;}}{\info{\title T}}\pard Caf\'e9 \u8364? words{\footnote\pard note}.\par\trowd\cellx900 A\cell B\cell\row}".to_vec()),
        // A picture for OCR: the header checks, then Tesseract, meet the mutations.
        (Kind::Tiff, small_tiff()),
        // Archive formats: their main XML part is what is mutated; it is
        // zipped into its package (`package`) before each parse.
        (Kind::Docx, br#"<w:document xmlns:w="w"><w:body><w:p><w:r><w:t>Words &amp; more</w:t></w:r></w:p><w:tbl><w:tr><w:tc><w:p><w:r><w:t>cell</w:t></w:r></w:p></w:tc></w:tr></w:tbl></w:body></w:document>"#.to_vec()),
        (Kind::Pptx, br#"<p:sld xmlns:p="p" xmlns:a="a"><p:txBody><a:p><a:r><a:t>Slide words</a:t></a:r></a:p></p:txBody></p:sld>"#.to_vec()),
        (Kind::Odt, br#"<office:document-content><office:body><office:text><text:h>Head</text:h><text:p>Body<text:s text:c="3"/>text</text:p></office:text></office:body></office:document-content>"#.to_vec()),
        (Kind::Epub, br#"<html><head><title>T</title></head><body><h1>Chapter</h1><p>Some <b>words</b>.</p></body></html>"#.to_vec()),
    ]
}

/// A 16 × 16 white TIFF.
fn small_tiff() -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    if let Ok(mut tiff) = tiff::encoder::TiffEncoder::new(&mut out) {
        let _ = tiff.write_image::<tiff::encoder::colortype::Gray8>(16, 16, &[255; 256]);
    }
    out.into_inner()
}

/// An archive format's mutated main part in its package; other formats as
/// they are.
fn package(kind: Kind, main: Vec<u8>) -> Vec<u8> {
    let container =
        br#"<container><rootfiles><rootfile full-path="OEBPS/book.opf"/></rootfiles></container>"#;
    let opf = br#"<package><manifest><item id="c" href="c.xhtml"/></manifest><spine><itemref idref="c"/></spine></package>"#;
    match kind {
        Kind::Docx => office_files::zip_of(&[("word/document.xml", &main)]),
        Kind::Pptx => office_files::zip_of(&[("ppt/slides/slide1.xml", &main)]),
        Kind::Odt | Kind::Odp => {
            office_files::zip_of(&[("mimetype", kind.mime().as_bytes()), ("content.xml", &main)])
        }
        Kind::Epub => office_files::zip_of(&[
            ("mimetype", kind.mime().as_bytes()),
            ("META-INF/container.xml", container),
            ("OEBPS/book.opf", opf),
            ("OEBPS/c.xhtml", &main),
        ]),
        _ => main,
    }
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, donors: &[(Kind, Vec<u8>)]) {
    let at = |rng: &mut StdRng, v: &Vec<u8>| rng.gen_range(0..=v.len());
    match rng.gen_range(0..6) {
        0 => {
            for _ in 0..rng.gen_range(1..8) {
                if !input.is_empty() {
                    let i = rng.gen_range(0..input.len());
                    input[i] = rng.gen();
                }
            }
        }
        1 => {
            let token = TOKENS[rng.gen_range(0..TOKENS.len())];
            let n = 10usize.pow(rng.gen_range(0..6));
            let i = at(rng, input);
            input.splice(i..i, token.repeat(n).into_bytes());
        }
        2 => {
            let i = at(rng, input);
            input.truncate(i);
        }
        3 => {
            let a = at(rng, input);
            let b = (a + rng.gen_range(0..4096)).min(input.len());
            let part = input[a..b].to_vec();
            for _ in 0..rng.gen_range(1..64) {
                let i = at(rng, input);
                input.splice(i..i, part.iter().copied());
            }
        }
        4 => {
            if let Some(i) = (0..32)
                .map(|_| at(rng, input))
                .find(|&i| input.get(i).is_some_and(u8::is_ascii_digit))
            {
                let big = ["99999999999", "-1", "4294967296", "0"][rng.gen_range(0..4)];
                input.splice(i..i + 1, big.bytes());
            }
        }
        _ => {
            let donor = &donors[rng.gen_range(0..donors.len())].1;
            let a = rng.gen_range(0..=donor.len());
            let b = (a + rng.gen_range(0..2048)).min(donor.len());
            let i = at(rng, input);
            input.splice(i..i, donor[a..b].iter().copied());
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(180);
    let exe = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|dir| dir.join("docflow"))
        .ok_or_else(|| anyhow::anyhow!("no docflow binary beside the example"))?;
    anyhow::ensure!(exe.exists(), "build it first: {}", exe.display());
    let findings = PathBuf::from("target/fuzz/findings");
    std::fs::create_dir_all(&findings)?;
    let pool = ParserPool::new(exe, LIMITS, Default::default(), 2);
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(
        std::env::var("FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random),
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut runs, mut chunks, mut slowest) = (0u64, 0u64, Duration::ZERO);
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    while Instant::now() < deadline {
        let (kind, seed) = &seeds[rng.gen_range(0..seeds.len())];
        let mut input = seed.clone();
        for _ in 0..rng.gen_range(1..5) {
            mutate(&mut rng, &mut input, &seeds);
        }
        let input = package(*kind, input);
        let t = Instant::now();
        let result = pool.parse(*kind, &input).await;
        let took = t.elapsed();
        slowest = slowest.max(took);
        anyhow::ensure!(
            took < LIMITS.timeout + Duration::from_secs(2),
            "a parse outlived its deadline: {took:?}"
        );
        runs += 1;
        let outcome = match result {
            Ok(parsed) => {
                let pieces = split(&parsed.text, Sizing::Chars);
                anyhow::ensure!(
                    pieces.iter().all(|c| c.chars().count() <= CHUNK_CHARS.end),
                    "a chunk over the size limit"
                );
                chunks += pieces.len() as u64;
                "text".to_string()
            }
            Err(ParseError::Rejected(m)) => format!("rejected: {}", first_words(&m.message)),
            Err(ParseError::Unsafe(m)) => {
                let name = format!("{runs}-{kind:?}.bin").to_lowercase();
                std::fs::write(findings.join(&name), &input)?;
                format!("killed: {}", first_words(&m))
            }
            Err(ParseError::Unavailable(m)) => anyhow::bail!("the pool stopped working: {m}"),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    println!(
        "fuzz_parse: {runs} inputs in {seconds} s, {chunks} chunks, slowest parse {} ms",
        slowest.as_millis()
    );
    let mut sorted: Vec<_> = outcomes.into_iter().collect();
    sorted.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    // The commonest outcomes, and every way a child was killed.
    for (i, (outcome, n)) in sorted.iter().enumerate() {
        if i < 15 || outcome.starts_with("killed") {
            println!("  {n:>7}  {outcome}");
        }
    }
    println!("inputs that killed a parser child: {}", findings.display());
    Ok(())
}

/// An outcome's message without the details that differ per input.
fn first_words(m: &str) -> String {
    m.split(['(', ':'])
        .take(2)
        .collect::<Vec<_>>()
        .join(":")
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect()
}
