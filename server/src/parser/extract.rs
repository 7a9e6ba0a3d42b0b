//! Document → plain text, inside a parser child. Everything here may meet a
//! hostile file: what the OS limits cannot catch (output size, panics of the
//! PDF libraries) is caught here and becomes a [`Rejection`].

use app::dto::FailureCode;

use super::{ocr::Ocr, Kind};

/// Why a document was refused: what kind of failure it is, and the text
/// shown to its owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    pub code: FailureCode,
    pub message: String,
}

impl Rejection {
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What a parser child hands back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub text: String,
    /// PDF pages; `None` for text formats.
    pub pages: Option<u32>,
    /// Pages whose text was recognised by OCR, as inclusive ranges of page
    /// numbers (from 1).
    pub ocr: Vec<(u32, u32)>,
}

/// Pages (of a PDF, or of a TIFF) read so far, of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u32,
    pub total: u32,
}

/// How much a document may produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Largest extracted text, in bytes.
    pub max_text: usize,
    /// Most PDF pages, declared or found.
    pub max_pages: u32,
    /// Bytes the parts of an archive format may inflate to, together.
    pub max_inflated: u64,
    /// Most pixels a page is recognised at: a PDF page is drawn smaller,
    /// a larger image is refused.
    pub ocr_max_pixels: u64,
    /// Most pages of one document recognised by OCR.
    pub ocr_max_pages: u32,
}

/// Text and (for PDFs) page count of a document within `caps`, with OCR in
/// English and no progress reports: [`read`].
pub fn extract(kind: Kind, bytes: &[u8], caps: Caps) -> Result<Parsed, Rejection> {
    read(kind, bytes, caps, &Ocr::default(), &mut |_| {})
}

/// Text and (for PDFs, images and slides) page count of a document within
/// `caps`; pages without text are recognised by `ocr`, and `progress` hears
/// of pages as they are done. Corrupt, encrypted, empty or oversized
/// documents are rejected.
pub fn read(
    kind: Kind,
    bytes: &[u8],
    caps: Caps,
    ocr: &Ocr,
    progress: &mut dyn FnMut(Progress),
) -> Result<Parsed, Rejection> {
    let max_text = caps.max_text;
    let parsed = match kind {
        Kind::Pdf => pdf(bytes, caps, ocr, progress)?,
        Kind::Png | Kind::Jpeg | Kind::Tiff => {
            let (text, pages) = ocr.image(kind, bytes, caps)?;
            Parsed {
                text,
                pages: Some(pages),
                ocr: vec![(1, pages)],
            }
        }
        Kind::Text => Parsed {
            text: decode(bytes, kind)?.into_owned(),
            ..Parsed::default()
        },
        Kind::Markdown => Parsed {
            text: markdown_text(&decode(bytes, kind)?),
            ..Parsed::default()
        },
        Kind::Html => Parsed {
            text: nanohtml2text::html2text(&decode(bytes, kind)?),
            ..Parsed::default()
        },
        Kind::Eml => Parsed {
            text: super::mail::text(bytes, max_text)?,
            ..Parsed::default()
        },
        Kind::Rtf => Parsed {
            text: super::rtf::text(bytes, max_text)?,
            ..Parsed::default()
        },
        Kind::Csv | Kind::Tsv => Parsed {
            text: super::sheets::delimited(
                &decode(bytes, kind)?,
                if kind == Kind::Tsv { b'\t' } else { b',' },
                max_text,
            )?,
            ..Parsed::default()
        },
        Kind::Docx | Kind::Pptx | Kind::Odt | Kind::Odp | Kind::Epub => {
            let (text, pages) = super::office::extract(kind, bytes, caps, progress)?;
            Parsed {
                text,
                pages,
                ..Parsed::default()
            }
        }
        Kind::Xlsx | Kind::Ods => {
            super::office::check_archive(kind, bytes, caps)?;
            let (text, sheets) = super::sheets::workbook(kind, bytes, max_text, progress)?;
            Parsed {
                text,
                pages: Some(sheets),
                ..Parsed::default()
            }
        }
    };
    if parsed.text.len() > max_text {
        return Err(too_much_text(max_text));
    }
    if parsed.text.trim().is_empty() {
        return Err(Rejection::new(
            FailureCode::NoText,
            match kind {
                Kind::Pdf => "the PDF contains no text, and no text was recognised on its pages",
                Kind::Png | Kind::Jpeg | Kind::Tiff => "no text was recognised in the image",
                Kind::Html => "the HTML page has no visible text",
                Kind::Pptx | Kind::Odp => "the slides contain no text",
                Kind::Xlsx | Kind::Ods | Kind::Csv | Kind::Tsv => {
                    "the spreadsheet contains no text"
                }
                Kind::Markdown
                | Kind::Text
                | Kind::Docx
                | Kind::Odt
                | Kind::Epub
                | Kind::Eml
                | Kind::Rtf => "the document contains no text",
            },
        ));
    }
    Ok(parsed)
}

pub(super) fn too_much_text(max_text: usize) -> Rejection {
    let limit = if max_text >= 1 << 20 {
        format!("{} MB", max_text >> 20)
    } else {
        format!("{max_text} bytes")
    };
    Rejection::new(
        FailureCode::TooLarge,
        format!("the document's text is larger than the {limit} limit"),
    )
}

fn pdf(
    bytes: &[u8],
    caps: Caps,
    ocr: &Ocr,
    progress: &mut dyn FnMut(Progress),
) -> Result<Parsed, Rejection> {
    let max_text = caps.max_text;
    // Both libraries panic on some malformed files: a panic is a damaged PDF.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let doc = lopdf::Document::load_mem(bytes)
            .map_err(|e| damaged(format!("the PDF is damaged and could not be read ({e})")))?;
        if doc.is_encrypted() {
            return Err(Rejection::new(
                FailureCode::Encrypted,
                "the PDF is encrypted; upload a copy without a password",
            ));
        }
        // The declared count first: walking a tree that claims a million
        // pages is the cost this check avoids.
        if let Some(declared) = declared_pages(&doc).filter(|n| *n > i64::from(caps.max_pages)) {
            return Err(too_many_pages(declared, caps.max_pages));
        }
        let pages = u32::try_from(doc.get_pages().len()).unwrap_or(u32::MAX);
        if pages > caps.max_pages {
            return Err(too_many_pages(i64::from(pages), caps.max_pages));
        }
        if pages == 0 {
            return Err(damaged(
                "the PDF's page tree is broken: no pages could be found",
            ));
        }
        let out = std::cell::RefCell::new(CappedText::new(max_text));
        let (r, found, with_text) = {
            let mut text = SharedText(&out);
            let w: &mut dyn std::io::Write = &mut text;
            let mut dev = PageBreaks {
                text: pdf_extract::PlainTextOutput::new(w),
                out: SharedText(&out),
                pages: Vec::new(),
                with_text: 0,
                total: pages,
                progress: &mut *progress,
            };
            let r = pdf_extract::output_doc(&doc, &mut dev);
            (r, dev.pages, dev.with_text)
        };
        let out = out.into_inner();
        if out.overflowed {
            return Err(too_much_text(max_text));
        }
        r.map_err(|e| damaged(format!("the PDF's text could not be extracted ({e})")))?;
        Ok((out.buf, found, with_text))
    }));
    let (buf, found, with_text) = caught.unwrap_or_else(|_| {
        Err(damaged(
            "the PDF is damaged: its text could not be extracted",
        ))
    })?;
    let pages = u32::try_from(found.len()).unwrap_or(u32::MAX);
    let mut texts: Vec<String> = found
        .iter()
        .enumerate()
        .map(|(i, page)| {
            let end = found
                .get(i + 1)
                .map_or(buf.len(), |next| next.start - PAGE_BREAK.len());
            String::from_utf8_lossy(&buf[page.start..end]).into_owned()
        })
        .collect();
    let scanned: Vec<u32> = found
        .iter()
        .zip(1..)
        .filter(|(page, _)| !page.has_text)
        .map(|(_, n)| n)
        .collect();
    let recognised = recognise_pages(bytes, &found, &scanned, &mut texts, caps, ocr, |done| {
        progress(Progress {
            done: with_text + done,
            total: pages,
        })
    })?;
    let text = texts.join("\n\n\u{c}");
    if text.len() > max_text {
        return Err(too_much_text(max_text));
    }
    Ok(Parsed {
        text,
        pages: Some(pages),
        ocr: ranges(&recognised),
    })
}

/// Recognises the `scanned` pages (numbers from 1) into `texts`; returns the
/// pages that were. Without Tesseract on this machine, a PDF that has text
/// elsewhere keeps it, and one that has none is refused.
fn recognise_pages(
    pdf: &[u8],
    found: &[PageFound],
    scanned: &[u32],
    texts: &mut [String],
    caps: Caps,
    ocr: &Ocr,
    mut done: impl FnMut(u32),
) -> Result<Vec<u32>, Rejection> {
    if scanned.is_empty() {
        return Ok(Vec::new());
    }
    let count = u32::try_from(scanned.len()).unwrap_or(u32::MAX);
    if count > caps.ocr_max_pages {
        return Err(Rejection::new(
            FailureCode::TooLarge,
            format!(
                "{count} pages of the PDF are scanned images without text; docflow recognises at most {} pages of one document",
                caps.ocr_max_pages
            ),
        ));
    }
    let has_text = scanned.len() < texts.len();
    let mut recognised = Vec::new();
    let mut budget = caps.max_text;
    for (page, n) in scanned.iter().copied().zip(1..) {
        let at = usize::try_from(page - 1).unwrap_or(usize::MAX);
        let (Some(info), Some(slot)) = (found.get(at), texts.get_mut(at)) else {
            continue;
        };
        let page_caps = Caps {
            max_text: budget,
            ..caps
        };
        match ocr.pdf_page(pdf, page, info.size, page_caps) {
            Ok(text) => {
                budget = budget.saturating_sub(text.len());
                *slot = text;
                recognised.push(page);
            }
            // No OCR here: the text layer of the other pages is kept.
            Err(e) if has_text && e.code == FailureCode::NoText => break,
            Err(e) => return Err(e),
        }
        done(n);
    }
    Ok(recognised)
}

/// Sorted page numbers as inclusive ranges: 1, 2, 3, 7 → (1, 3), (7, 7).
fn ranges(pages: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == p => *end = p,
            _ => out.push((p, p)),
        }
    }
    out
}

/// The `/Count` of the document's page tree root, when it has one.
fn declared_pages(doc: &lopdf::Document) -> Option<i64> {
    let root = doc
        .catalog()
        .ok()?
        .get(b"Pages")
        .ok()?
        .as_reference()
        .ok()?;
    doc.get_dictionary(root)
        .ok()?
        .get(b"Count")
        .ok()?
        .as_i64()
        .ok()
}

fn too_many_pages(pages: i64, max: u32) -> Rejection {
    Rejection::new(
        FailureCode::TooLarge,
        format!("the PDF says it has {pages} pages; at most {max} are accepted"),
    )
}

fn damaged(message: impl Into<String>) -> Rejection {
    Rejection::new(FailureCode::Damaged, message)
}

/// Between two pages of a PDF's text: a paragraph end, then a form feed,
/// so that chunks can name the page they start on and prefer to end where a
/// page does.
const PAGE_BREAK: &[u8] = b"\n\n\x0c";
/// A page with fewer visible characters than this has no text layer worth
/// the name (a page number, a stray mark): it is recognised by OCR.
const MIN_PAGE_TEXT: usize = 16;

/// Where a page's text starts in the extracted text, its size in points,
/// and whether it has a text layer.
struct PageFound {
    start: usize,
    size: (f64, f64),
    has_text: bool,
}

/// pdf_extract's plain text with a [`PAGE_BREAK`] between pages; notes
/// where each page starts and reports the pages with text as they end.
struct PageBreaks<'a, 'p, W: pdf_extract::ConvertToFmt> {
    text: pdf_extract::PlainTextOutput<W>,
    out: SharedText<'a>,
    pages: Vec<PageFound>,
    with_text: u32,
    total: u32,
    progress: &'p mut dyn FnMut(Progress),
}

impl<W: pdf_extract::ConvertToFmt> pdf_extract::OutputDev for PageBreaks<'_, '_, W> {
    fn begin_page(
        &mut self,
        page_num: u32,
        media_box: &pdf_extract::MediaBox,
        art_box: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), pdf_extract::OutputError> {
        if !self.pages.is_empty() {
            use std::io::Write;
            self.out.write_all(PAGE_BREAK)?;
        }
        self.pages.push(PageFound {
            start: self.out.0.borrow().buf.len(),
            size: (media_box.urx - media_box.llx, media_box.ury - media_box.lly),
            has_text: false,
        });
        self.text.begin_page(page_num, media_box, art_box)
    }
    fn end_page(&mut self) -> Result<(), pdf_extract::OutputError> {
        self.text.end_page()?;
        let out = self.out.0.borrow();
        if let Some(page) = self.pages.last_mut() {
            let visible = out
                .buf
                .get(page.start..)
                .unwrap_or_default()
                .iter()
                .filter(|b| !b.is_ascii_whitespace())
                .count();
            page.has_text = visible >= MIN_PAGE_TEXT;
            if page.has_text {
                self.with_text += 1;
                (self.progress)(Progress {
                    done: self.with_text,
                    total: self.total,
                });
            }
        }
        Ok(())
    }
    fn output_character(
        &mut self,
        trm: &pdf_extract::Transform,
        width: f64,
        spacing: f64,
        font_size: f64,
        char: &str,
    ) -> Result<(), pdf_extract::OutputError> {
        // A form feed inside the text would read as a page break.
        let char = if char.contains('\u{c}') { " " } else { char };
        self.text
            .output_character(trm, width, spacing, font_size, char)
    }
    fn begin_word(&mut self) -> Result<(), pdf_extract::OutputError> {
        self.text.begin_word()
    }
    fn end_word(&mut self) -> Result<(), pdf_extract::OutputError> {
        self.text.end_word()
    }
    fn end_line(&mut self) -> Result<(), pdf_extract::OutputError> {
        self.text.end_line()
    }
}

/// The extracted text, written by pdf_extract's output and the page breaks
/// between its pages in turn.
struct SharedText<'a>(&'a std::cell::RefCell<CappedText>);

impl std::io::Write for SharedText<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(data)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Collects extracted text and refuses to grow past its cap, which stops the
/// extractor at once instead of after it produced a gigabyte.
struct CappedText {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl CappedText {
    fn new(cap: usize) -> Self {
        Self {
            buf: Vec::new(),
            cap,
            overflowed: false,
        }
    }
}

impl std::io::Write for CappedText {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.overflowed = true;
            return Err(std::io::Error::other("text limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Text, Markdown or HTML bytes as UTF-8. The encoding is, in order: a
/// byte-order mark; UTF-8 when the bytes are valid UTF-8; for HTML, the
/// `<meta charset>` in its first kilobyte; otherwise `chardetng`'s guess
/// (the detector Firefox uses for unlabelled pages), for instance
/// Windows-1252 for a Latin-1 file.
pub fn decode(bytes: &[u8], kind: Kind) -> Result<std::borrow::Cow<'_, str>, Rejection> {
    use encoding_rs::{Encoding, UTF_8};
    let encoding = if let Some((bom, _)) = Encoding::for_bom(bytes) {
        bom
    } else if std::str::from_utf8(bytes).is_ok() {
        UTF_8
    } else if let Some(declared) = (kind == Kind::Html)
        .then(|| meta_charset(&bytes[..bytes.len().min(1024)]))
        .flatten()
    {
        declared
    } else {
        let mut detector = chardetng::EncodingDetector::new();
        detector.feed(bytes, true);
        detector.guess(None, false)
    };
    let (text, used, malformed) = encoding.decode(bytes);
    // Single-byte encodings decode every byte; a multi-byte one that found
    // errors was the wrong guess or a damaged file.
    let replaced = text.matches('\u{fffd}').count();
    if malformed && replaced * 100 > text.chars().count().max(1) {
        return Err(Rejection::new(
            FailureCode::NotUtf8,
            format!(
                "the file is not readable text: it is neither UTF-8 nor {} ({replaced} undecodable sequences)",
                used.name()
            ),
        ));
    }
    Ok(text)
}

/// The encoding an HTML page declares in `<meta charset="…">` or
/// `<meta http-equiv="Content-Type" content="…; charset=…">`.
fn meta_charset(head: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let lower = head.to_ascii_lowercase();
    let at = lower.windows(8).position(|w| w == b"charset=")? + 8;
    let label: Vec<u8> = lower[at..]
        .iter()
        .copied()
        .skip_while(|b| *b == b'"' || *b == b'\'')
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'))
        .collect();
    let meta_before = lower[..at].windows(5).any(|w| w == b"<meta");
    meta_before
        .then(|| encoding_rs::Encoding::for_label(&label))
        .flatten()
        // A page cannot be UTF-16 and declare it in ASCII bytes.
        .map(|e| e.output_encoding())
}

/// The readable text of Markdown: headings and paragraphs on their own lines.
fn markdown_text(md: &str) -> String {
    use pulldown_cmark::{Event, Parser, TagEnd};
    let mut out = String::with_capacity(md.len());
    for ev in Parser::new(md) {
        match ev {
            Event::Text(t) | Event::Code(t) => out.push_str(&t),
            Event::SoftBreak => out.push(' '),
            Event::HardBreak => out.push('\n'),
            Event::End(
                TagEnd::Paragraph | TagEnd::Heading(_) | TagEnd::Item | TagEnd::CodeBlock,
            ) => out.push_str("\n\n"),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: Caps = Caps {
        max_text: 1_000_000,
        max_pages: 10_000,
        max_inflated: 16 << 20,
        ocr_max_pixels: 40_000_000,
        ocr_max_pages: 100,
    };

    #[test]
    fn markdown_and_html_become_plain_text() {
        let md = extract(
            Kind::Markdown,
            b"# Title\n\nSome *emphasis* and `code`.",
            MB,
        )
        .expect("md")
        .text;
        assert!(
            md.contains("Title") && md.contains("Some emphasis and code."),
            "{md}"
        );
        assert!(!md.contains('#') && !md.contains('*'));
        let html = extract(
            Kind::Html,
            b"<html><body><h1>Head</h1><p>Body <b>bold</b></p><script>x()</script></body></html>",
            MB,
        )
        .expect("html")
        .text;
        assert!(
            html.contains("Head") && html.contains("Body bold"),
            "{html}"
        );
        assert!(!html.contains('<'));
    }

    #[test]
    fn a_corrupt_pdf_is_called_damaged() {
        let err = extract(Kind::Pdf, b"%PDF-1.7\nthis is not a pdf", MB).expect_err("corrupt");
        assert_eq!(err.code, FailureCode::Damaged);
        assert!(err.message.contains("damaged"), "{err}");
    }

    #[test]
    fn pdf_text_stops_at_the_cap_while_it_is_extracted() {
        let page = vec!["Words on a page of a real PDF document.".to_string(); 40];
        let pdf = super::super::sample_pdf::pdf(&[page.clone(), page]);
        let parsed = extract(Kind::Pdf, &pdf, MB).expect("a real PDF");
        assert_eq!(parsed.pages, Some(2));
        assert!(parsed.text.contains("Words on a page"), "{}", parsed.text);
        // One page break between the two pages' text.
        let (first, second) = parsed.text.split_once('\u{c}').expect("a page break");
        assert!(first.contains("Words on a page") && second.contains("Words on a page"));
        assert!(!second.contains('\u{c}'));
        let err = extract(
            Kind::Pdf,
            &pdf,
            Caps {
                max_text: 500,
                ..MB
            },
        )
        .expect_err("over the cap");
        assert_eq!(
            err,
            Rejection::new(
                FailureCode::TooLarge,
                "the document's text is larger than the 500 bytes limit"
            )
        );
        let err =
            extract(Kind::Pdf, &pdf, Caps { max_pages: 1, ..MB }).expect_err("too many pages");
        assert_eq!(
            err,
            Rejection::new(
                FailureCode::TooLarge,
                "the PDF says it has 2 pages; at most 1 are accepted"
            )
        );
    }

    #[test]
    fn text_in_legacy_encodings_becomes_utf8() {
        // Windows-1252 / Latin-1.
        let latin1 = b"Le caf\xe9 de la gare ouvre \xe0 six heures; d\xe9j\xe0 plein.";
        let parsed = extract(Kind::Text, latin1, MB).expect("latin-1");
        assert_eq!(
            parsed.text,
            "Le café de la gare ouvre à six heures; déjà plein."
        );
        // UTF-16 LE with its byte-order mark.
        let utf16: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain("Grüße aus Köln".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(
            extract(Kind::Text, &utf16, MB).expect("utf-16").text,
            "Grüße aus Köln"
        );
        // HTML says what it is; Shift_JIS bytes for "日本".
        let html = b"<html><head><meta charset=\"shift_jis\"></head><body><p>\x93\xfa\x96\x7b</p></body></html>";
        assert_eq!(
            extract(Kind::Html, html, MB).expect("sjis").text.trim(),
            "日本"
        );
        // A UTF-8 byte-order mark is not part of the text.
        assert_eq!(
            extract(Kind::Text, b"\xef\xbb\xbfplain", MB)
                .expect("bom")
                .text,
            "plain"
        );
    }

    #[test]
    fn an_html_page_without_text_says_so() {
        let err = extract(Kind::Html, b"<html><body><img src=a.png></body></html>", MB)
            .expect_err("no text");
        assert_eq!(
            err,
            Rejection::new(FailureCode::NoText, "the HTML page has no visible text")
        );
    }

    #[test]
    fn text_over_the_cap_is_refused() {
        let err = extract(
            Kind::Text,
            &b"word ".repeat(1000),
            Caps {
                max_text: 100,
                ..MB
            },
        )
        .expect_err("too long");
        assert_eq!(
            err.message,
            "the document's text is larger than the 100 bytes limit"
        );
        let err = extract(
            Kind::Text,
            &vec![b'a'; 3 << 20],
            Caps {
                max_text: 2 << 20,
                ..MB
            },
        )
        .expect_err("too long");
        assert_eq!(
            err.message,
            "the document's text is larger than the 2 MB limit"
        );
        assert!(extract(Kind::Text, b"   \n ", MB).is_err(), "blank text");
    }
}
