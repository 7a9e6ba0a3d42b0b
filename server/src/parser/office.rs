//! Word-processing documents, slide decks and e-books: zip archives of XML
//! (Office Open XML `.docx` and `.pptx`, OpenDocument `.odt` and `.odp`,
//! EPUB). Read with `zip` and `quick-xml` inside a parser child, and
//! bounded before anything is inflated: the number of entries, the bytes
//! every part may inflate to (checked against what is actually read, not
//! what the archive claims), and how deep the XML may nest. Entities a
//! document declares itself are never expanded, so "billion laughs" yields
//! nothing; only XML's five and numeric references are resolved.
//!
//! Text comes out in reading order: paragraphs, headings, list items and
//! table rows each on a line (a row's cells joined by ` | `), a slide or
//! e-book chapter per page, separated by the page break the chunker knows
//! (`\n\n\u{c}`).

use std::io::{Cursor, Read};

use app::dto::FailureCode;
use quick_xml::events::Event;

use super::{
    extract::{Caps, Progress, Rejection},
    Kind,
};

/// Entries an archive may hold; real documents have tens to hundreds.
pub const MAX_ENTRIES: usize = 10_000;
/// How deep elements may nest; real documents stay under a hundred.
pub const MAX_DEPTH: usize = 512;
/// The page break between slides and chapters.
const PAGE_BREAK: &str = "\n\n\u{c}";

/// The text of an archive-based document and its page count (slides or
/// chapters; `None` for a word-processing document), telling `progress` of
/// each slide (PowerPoint) or chapter (EPUB) read, of how many.
pub fn extract(
    kind: Kind,
    bytes: &[u8],
    caps: Caps,
    progress: &mut dyn FnMut(Progress),
) -> Result<(String, Option<u32>), Rejection> {
    let mut archive = Archive::open(bytes, kind, caps)?;
    let mut read_each = |archive: &mut Archive<'_>, parts: &[String], vocabulary: Vocabulary| {
        let total = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        let mut pages = Vec::with_capacity(parts.len());
        for (done, name) in (1..).zip(parts) {
            pages.push(archive.text_of(name, vocabulary)?);
            progress(Progress { done, total });
        }
        paged(pages)
    };
    match kind {
        Kind::Docx => {
            let mut text = archive.text_of("word/document.xml", Vocabulary::Word)?;
            // Footnotes and endnotes follow the body, as a printed page shows them.
            for notes in ["word/footnotes.xml", "word/endnotes.xml"] {
                if archive.has(notes) {
                    text.push_str(&archive.text_of(notes, Vocabulary::Word)?);
                }
            }
            Ok((text, None))
        }
        Kind::Pptx => {
            let slides = archive.numbered("ppt/slides/slide", ".xml");
            read_each(&mut archive, &slides, Vocabulary::Slides)
        }
        Kind::Odt => Ok((
            archive.text_of("content.xml", Vocabulary::OpenDocument)?,
            None,
        )),
        Kind::Odp => {
            let text = archive.text_of("content.xml", Vocabulary::OpenDocument)?;
            let pages = text.matches('\u{c}').count() as u32 + 1;
            Ok((text, Some(pages)))
        }
        Kind::Epub => {
            let chapters = archive.spine()?;
            read_each(&mut archive, &chapters, Vocabulary::Xhtml)
        }
        _ => Err(Rejection::new(
            FailureCode::Internal,
            format!("{} is not a document archive", kind.mime()),
        )),
    }
}

/// The bounds of an archive another library reads (a workbook, read by
/// `calamine`): its entry count, and the sizes its entries declare,
/// together. A part that inflates past what it declares is left to the
/// parser child's memory limit.
pub fn check_archive(kind: Kind, bytes: &[u8], caps: Caps) -> Result<(), Rejection> {
    let mut archive = Archive::open(bytes, kind, caps)?;
    let mut declared = 0u64;
    for i in 0..archive.zip.len() {
        if let Ok(entry) = archive.zip.by_index_raw(i) {
            declared = declared.saturating_add(entry.size());
        }
    }
    if declared > caps.max_inflated {
        return Err(Rejection::new(
            FailureCode::Unsafe,
            format!(
                "the {} inflates to more than {} MB; it looks like a zip bomb",
                kind.noun(),
                caps.max_inflated >> 20
            ),
        ));
    }
    Ok(())
}

/// Pages joined by page breaks, empty ones (a picture-only slide) kept so
/// that page numbers match the document's.
fn paged(pages: Vec<String>) -> Result<(String, Option<u32>), Rejection> {
    let n = u32::try_from(pages.len()).unwrap_or(u32::MAX);
    Ok((pages.join(PAGE_BREAK), Some(n)))
}

/// A zip archive and what is left of its budget.
struct Archive<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    kind: Kind,
    left: u64,
    limit: u64,
    max_text: usize,
    /// Text produced so far, across parts.
    produced: usize,
}

impl<'a> Archive<'a> {
    fn open(bytes: &'a [u8], kind: Kind, caps: Caps) -> Result<Self, Rejection> {
        let zip = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| damaged(kind, format!("it is not a readable zip archive ({e})")))?;
        if zip.len() > MAX_ENTRIES {
            return Err(Rejection::new(
                FailureCode::Unsafe,
                format!(
                    "the {} holds {} files inside it; at most {MAX_ENTRIES} are read",
                    kind.noun(),
                    zip.len()
                ),
            ));
        }
        Ok(Self {
            zip,
            kind,
            left: caps.max_inflated,
            limit: caps.max_inflated,
            max_text: caps.max_text,
            produced: 0,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.zip.index_for_name(name).is_some()
    }

    /// Names `{prefix}{n}{suffix}` in the order of `n` (slide2 before slide10).
    fn numbered(&self, prefix: &str, suffix: &str) -> Vec<String> {
        let mut found: Vec<(u32, String)> = self
            .zip
            .file_names()
            .filter_map(|name| {
                let name = name.ok()?;
                let n = name
                    .strip_prefix(prefix)?
                    .strip_suffix(suffix)?
                    .parse()
                    .ok()?;
                Some((n, name.to_string()))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, name)| name).collect()
    }

    /// Part `name`, inflated and charged to the budget: a part that claims
    /// to be small and is not is stopped at the budget all the same. Its
    /// buffer is reserved once at what is left of the budget, so that it
    /// never doubles while it fills (nothing but the part is ever held).
    fn read(&mut self, name: &str) -> Result<Vec<u8>, Rejection> {
        let kind = self.kind;
        let entry = self
            .zip
            .by_name(name)
            .map_err(|_| damaged(kind, format!("it has no {name}")))?;
        if entry.encrypted() {
            return Err(Rejection::new(
                FailureCode::Encrypted,
                format!(
                    "the {} is encrypted; upload a copy without a password",
                    kind.noun()
                ),
            ));
        }
        let bomb = || {
            Rejection::new(
                FailureCode::Unsafe,
                format!(
                    "the {} inflates to more than {} MB; it looks like a zip bomb",
                    kind.noun(),
                    self.limit >> 20
                ),
            )
        };
        let room = self.left.min(entry.size()).saturating_add(1);
        let mut out = Vec::new();
        out.try_reserve_exact(usize::try_from(room).unwrap_or(usize::MAX))
            .map_err(|_| bomb())?;
        entry
            .take(self.left + 1)
            .read_to_end(&mut out)
            .map_err(|e| damaged(kind, format!("{name} could not be inflated ({e})")))?;
        if out.len() as u64 > self.left {
            return Err(bomb());
        }
        self.left -= out.len() as u64;
        Ok(out)
    }

    fn text_of(&mut self, name: &str, vocabulary: Vocabulary) -> Result<String, Rejection> {
        let xml = self.read(name)?;
        let room = self.max_text.saturating_sub(self.produced);
        let text = xml_text(&xml, vocabulary, room).map_err(|e| match e {
            XmlError::TooDeep => Rejection::new(
                FailureCode::Unsafe,
                format!(
                    "the {}'s {name} nests elements more than {MAX_DEPTH} deep",
                    self.kind.noun()
                ),
            ),
            XmlError::TooMuchText => super::extract::too_much_text(self.max_text),
            XmlError::Syntax(e) => {
                damaged(self.kind, format!("{name} is not well-formed XML ({e})"))
            }
        })?;
        self.produced += text.len();
        Ok(text)
    }

    /// An EPUB's chapters in reading order: the container names the package
    /// document, whose spine lists manifest items. A spine entry that leaves
    /// the archive (`../`, an absolute path) or names nothing in it makes
    /// the book damaged rather than being skipped silently.
    fn spine(&mut self) -> Result<Vec<String>, Rejection> {
        let container = self.read("META-INF/container.xml")?;
        let package = first_attribute(&container, b"rootfile", "full-path")?
            .ok_or_else(|| damaged(Kind::Epub, "its container names no package document"))?;
        let opf = self.read(&package)?;
        let base = package.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut manifest = std::collections::HashMap::new();
        let mut order = Vec::new();
        each_element(&opf, |name, attrs| match name {
            b"item" => {
                if let (Some(id), Some(href)) = (attrs.get("id"), attrs.get("href")) {
                    manifest.insert(id.clone(), href.clone());
                }
            }
            b"itemref" => order.extend(attrs.get("idref").cloned()),
            _ => {}
        })
        .map_err(|e| {
            damaged(
                Kind::Epub,
                format!("its package document is not readable ({e})"),
            )
        })?;
        let mut chapters = Vec::with_capacity(order.len());
        for id in order {
            let href = manifest.get(&id).ok_or_else(|| {
                damaged(
                    Kind::Epub,
                    format!("its spine names {id}, which is not in its manifest"),
                )
            })?;
            let path = inside(base, href).ok_or_else(|| {
                Rejection::new(
                    FailureCode::Unsafe,
                    format!("the EPUB's reading order points outside the book ({href})"),
                )
            })?;
            if !self.has(&path) {
                return Err(damaged(
                    Kind::Epub,
                    format!("its spine names {path}, which the archive does not hold"),
                ));
            }
            chapters.push(path);
        }
        if chapters.is_empty() {
            return Err(damaged(Kind::Epub, "its spine lists no chapters"));
        }
        Ok(chapters)
    }
}

/// `href` resolved against `base` inside the archive: `None` when it would
/// leave it (an absolute path, a scheme, more `..` than there are folders).
fn inside(base: &str, href: &str) -> Option<String> {
    let href = href.split('#').next().unwrap_or_default();
    let href = percent_decoded(href);
    if href.starts_with('/') || href.contains(':') || href.contains('\\') {
        return None;
    }
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for part in href.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// `%20` and friends in an EPUB's hrefs, as the archive's names hold them.
fn percent_decoded(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
}

fn damaged(kind: Kind, why: impl std::fmt::Display) -> Rejection {
    Rejection::new(
        FailureCode::Damaged,
        format!("the {} is damaged: {why}", kind.noun()),
    )
}

/// The XML dialect of a part: which elements hold text and which end a
/// line, a cell or a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vocabulary {
    /// WordprocessingML: `w:t` text in `w:p` paragraphs, `w:tc` cells.
    Word,
    /// DrawingML in slides: `a:t` text in `a:p` paragraphs, `a:tc` cells.
    Slides,
    /// OpenDocument: `text:p`/`text:h` paragraphs, `table:table-cell`
    /// cells, `draw:page` slides.
    OpenDocument,
    /// XHTML chapters of an EPUB.
    Xhtml,
}

/// What an element does to the text around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Its text is the document's (`w:t`).
    Text,
    /// Ends a line when it closes (a paragraph, a heading, a row).
    Line,
    /// Ends a table cell.
    Cell,
    /// Ends a page (an OpenDocument slide).
    Page,
    /// Stands for a character (`w:tab`, `text:s`).
    Char(char),
    /// Its content is not text a reader sees (`head`, `script`).
    Hidden,
    /// Nothing of its own.
    None,
}

fn role(vocabulary: Vocabulary, name: &[u8]) -> Role {
    use Vocabulary as V;
    match (vocabulary, name) {
        (V::Word, b"w:t") | (V::Slides, b"a:t") => Role::Text,
        (V::Word, b"w:p" | b"w:tr") | (V::Slides, b"a:p" | b"a:tr") => Role::Line,
        (V::Word, b"w:tc") | (V::Slides, b"a:tc") => Role::Cell,
        (V::Word, b"w:tab") => Role::Char('\t'),
        (V::Word, b"w:br" | b"w:cr") | (V::Slides, b"a:br") => Role::Char('\n'),
        (V::Word, b"w:instrText" | b"w:delText") => Role::Hidden,
        (V::OpenDocument, b"text:p" | b"text:h" | b"table:table-row") => Role::Line,
        (V::OpenDocument, b"table:table-cell") => Role::Cell,
        (V::OpenDocument, b"draw:page") => Role::Page,
        (V::OpenDocument, b"text:s") => Role::Char(' '),
        (V::OpenDocument, b"text:tab") => Role::Char('\t'),
        (V::OpenDocument, b"text:line-break") => Role::Char('\n'),
        (V::OpenDocument, b"office:annotation" | b"text:tracked-changes") => Role::Hidden,
        (
            V::Xhtml,
            b"p" | b"h1" | b"h2" | b"h3" | b"h4" | b"h5" | b"h6" | b"li" | b"tr" | b"div"
            | b"blockquote" | b"pre" | b"dt" | b"dd" | b"figcaption",
        ) => Role::Line,
        (V::Xhtml, b"td" | b"th") => Role::Cell,
        (V::Xhtml, b"br") => Role::Char('\n'),
        (V::Xhtml, b"head" | b"script" | b"style") => Role::Hidden,
        _ => Role::None,
    }
}

#[derive(Debug, thiserror::Error)]
enum XmlError {
    #[error("elements nest more than {MAX_DEPTH} deep")]
    TooDeep,
    #[error("more text than allowed")]
    TooMuchText,
    #[error("{0}")]
    Syntax(quick_xml::Error),
}

/// The text of one XML part. In Office Open XML only the text elements'
/// content counts (the rest is layout); in OpenDocument and XHTML all text
/// outside hidden elements does, its whitespace collapsed as they specify.
fn xml_text(xml: &[u8], vocabulary: Vocabulary, max_text: usize) -> Result<String, XmlError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    // A mismatched end tag (common in hand-made EPUB chapters) costs its
    // structure, not the document's text.
    reader.config_mut().check_end_names = false;
    let mut out = String::new();
    let mut depth = 0usize;
    // Depths at which a text element and a hidden element are open.
    let mut in_text = 0usize;
    let mut hidden = 0usize;
    let all_text = matches!(vocabulary, Vocabulary::OpenDocument | Vocabulary::Xhtml);
    let mut cell_open = false;
    loop {
        // Borrowed from `xml`: no copy of an event, however long.
        let event = reader.read_event().map_err(XmlError::Syntax)?;
        let visible = hidden == 0 && (all_text || in_text > 0);
        match event {
            Event::Start(e) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(XmlError::TooDeep);
                }
                match role(vocabulary, e.name().as_ref()) {
                    Role::Text if in_text == 0 => in_text = depth,
                    Role::Hidden if hidden == 0 => hidden = depth,
                    Role::Char(c) if hidden == 0 => out.push(c),
                    _ => {}
                }
            }
            Event::Empty(e) => {
                if let Role::Char(c) = role(vocabulary, e.name().as_ref()) {
                    if hidden == 0 {
                        // `text:s` may stand for several spaces.
                        let n = e
                            .try_get_attribute("text:c")
                            .ok()
                            .flatten()
                            .and_then(|a| std::str::from_utf8(&a.value).ok()?.parse::<usize>().ok())
                            .unwrap_or(1)
                            .min(64);
                        out.extend(std::iter::repeat_n(c, n));
                    }
                }
            }
            Event::End(e) => {
                if in_text == depth {
                    in_text = 0;
                }
                if hidden == depth {
                    hidden = 0;
                }
                depth = depth.saturating_sub(1);
                if hidden == 0 {
                    match role(vocabulary, e.name().as_ref()) {
                        Role::Line => {
                            if cell_open && out.ends_with(" | ") {
                                out.truncate(out.len() - 3);
                            }
                            trim_end_spaces(&mut out);
                            cell_open = false;
                            if !out.is_empty() && !out.ends_with('\n') {
                                out.push('\n');
                            }
                        }
                        Role::Cell => {
                            trim_end_spaces(&mut out);
                            if out.ends_with('\n') {
                                out.pop();
                            }
                            out.push_str(" | ");
                            cell_open = true;
                        }
                        Role::Page => out.push_str(PAGE_BREAK),
                        _ => {}
                    }
                }
            }
            Event::Text(t) if visible => {
                let text = t.decode().map_err(|e| XmlError::Syntax(e.into()))?;
                if out.len() + text.len() > max_text {
                    return Err(XmlError::TooMuchText);
                }
                if all_text {
                    push_collapsed(&mut out, &text);
                } else {
                    out.push_str(&text);
                }
            }
            Event::CData(t) if visible => out.push_str(&String::from_utf8_lossy(&t)),
            Event::GeneralRef(r) if visible => {
                // Numeric and XML's own entities only: a document's own
                // (`<!ENTITY lol …>`) are dropped, never expanded.
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    out.push(c);
                } else if let Ok(name) = r.decode() {
                    if let Some(s) = quick_xml::escape::resolve_predefined_entity(&name) {
                        out.push_str(s);
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if out.len() > max_text {
            return Err(XmlError::TooMuchText);
        }
    }
    Ok(out.trim_end().to_string() + "\n")
}

/// XHTML text with its source line breaks and indentation as single spaces.
fn push_collapsed(out: &mut String, text: &str) {
    for (i, word) in text.split_whitespace().enumerate() {
        let starts_line = out.is_empty() || out.ends_with('\n') || out.ends_with(' ');
        if i > 0 || (!starts_line && text.starts_with(char::is_whitespace)) {
            out.push(' ');
        }
        out.push_str(word);
    }
    if text.ends_with(char::is_whitespace) && !text.trim().is_empty() {
        out.push(' ');
    }
}

fn trim_end_spaces(out: &mut String) {
    let kept = out.trim_end_matches([' ', '\t']).len();
    out.truncate(kept);
}

/// Attributes of an element, by local name without namespace prefix.
type Attributes = std::collections::HashMap<String, String>;

/// Calls `f` with each element's local name and attributes.
fn each_element(xml: &[u8], mut f: impl FnMut(&[u8], &Attributes)) -> Result<(), XmlError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut depth = 0usize;
    loop {
        let event = reader.read_event().map_err(XmlError::Syntax)?;
        let element = match &event {
            Event::Start(e) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(XmlError::TooDeep);
                }
                Some(e)
            }
            Event::Empty(e) => Some(e),
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                None
            }
            Event::Eof => return Ok(()),
            _ => None,
        };
        if let Some(e) = element {
            let attrs: Attributes = e
                .attributes()
                .flatten()
                .filter_map(|a| {
                    let key = std::str::from_utf8(a.key.local_name().as_ref())
                        .ok()?
                        .to_string();
                    let value = a.unescape_value().ok()?.into_owned();
                    Some((key, value))
                })
                .collect();
            f(e.local_name().as_ref(), &attrs);
        }
    }
}

/// The first `attribute` of the first `element` in `xml`.
fn first_attribute(
    xml: &[u8],
    element: &[u8],
    attribute: &str,
) -> Result<Option<String>, Rejection> {
    let mut found = None;
    each_element(xml, |name, attrs| {
        if found.is_none() && name == element {
            found = attrs.get(attribute).cloned();
        }
    })
    .map_err(|e| damaged(Kind::Epub, format!("its container is not readable ({e})")))?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::super::office_files as files;
    use super::*;

    const BUDGET: Caps = Caps {
        max_text: 4 << 20,
        max_pages: 10_000,
        max_inflated: 16 << 20,
        ocr_max_pixels: 40_000_000,
        ocr_max_pages: 100,
    };

    fn text(kind: Kind, bytes: &[u8]) -> (String, Option<u32>) {
        extract(kind, bytes, BUDGET, &mut |_| {}).expect("readable")
    }

    fn refused(kind: Kind, bytes: &[u8]) -> Rejection {
        extract(kind, bytes, BUDGET, &mut |_| {}).expect_err("refused")
    }

    #[test]
    fn a_word_document_reads_in_order_with_table_rows_and_footnotes() {
        let doc = files::docx(
            &["Quarterly report & outlook", "Sales rose in the north."],
            &[&["Region", "Q1"], &["North", "1200"]],
            Some("Figures are unaudited."),
        );
        let (text, pages) = text(Kind::Docx, &doc);
        assert_eq!(pages, None);
        assert_eq!(
            text,
            "Quarterly report & outlook\nSales rose in the north.\nRegion | Q1\nNorth | 1200\n\
             Figures are unaudited.\n"
        );
    }

    #[test]
    fn each_slide_and_chapter_read_is_reported() {
        let mut heard = Vec::new();
        let deck = files::pptx(&[&["One"], &["Two"], &["Three"]]);
        extract(Kind::Pptx, &deck, BUDGET, &mut |p| {
            heard.push((p.done, p.total))
        })
        .expect("readable");
        assert_eq!(heard, [(1, 3), (2, 3), (3, 3)]);
        heard.clear();
        let book = files::epub(&[("Harbour", "Boats."), ("Quay", "Cranes.")]);
        extract(Kind::Epub, &book, BUDGET, &mut |p| {
            heard.push((p.done, p.total))
        })
        .expect("readable");
        assert_eq!(heard, [(1, 2), (2, 2)]);
    }

    #[test]
    fn slides_are_pages_in_their_numbered_order() {
        let slides: Vec<Vec<String>> = (1..=11)
            .map(|i| vec![format!("Slide {i} title"), format!("Point on slide {i}")])
            .collect();
        let slides: Vec<Vec<&str>> = slides
            .iter()
            .map(|s| s.iter().map(String::as_str).collect())
            .collect();
        let slides: Vec<&[&str]> = slides.iter().map(Vec::as_slice).collect();
        let (text, pages) = text(Kind::Pptx, &files::pptx(&slides));
        assert_eq!(pages, Some(11));
        let pages: Vec<&str> = text.split('\u{c}').map(str::trim).collect();
        assert_eq!(pages.len(), 11);
        assert_eq!(pages[1], "Slide 2 title\nPoint on slide 2");
        assert_eq!(
            pages[10], "Slide 11 title\nPoint on slide 11",
            "slide11 after slide2"
        );
    }

    #[test]
    fn open_document_text_and_slides_read_like_their_office_twins() {
        let (text, _) = text(
            Kind::Odt,
            &files::odt(
                "Maintenance",
                &["Change the oil every 10,000 km."],
                &["Filter", "yearly"],
            ),
        );
        assert_eq!(
            text,
            "Maintenance\nChange the oil every 10,000 km.\nFilter | yearly\n"
        );
        let (text, pages) = text_of_odp();
        assert_eq!(pages, Some(2));
        assert!(
            text.starts_with("Welcome\n") && text.contains("\u{c}Agenda\n"),
            "{text:?}"
        );
    }

    fn text_of_odp() -> (String, Option<u32>) {
        text(
            Kind::Odp,
            &files::odp(&[&["Welcome"], &["Agenda", "Budget"]]),
        )
    }

    #[test]
    fn an_epub_reads_in_its_spine_order_without_head_or_styles() {
        let book = files::epub(&[
            ("The harbour", "Gulls over the quay."),
            ("The storm", "Rain on the slate roofs."),
        ]);
        let (text, pages) = text(Kind::Epub, &book);
        assert_eq!(pages, Some(2));
        assert_eq!(
            text,
            "The harbour\nGulls over the quay.\n\n\n\u{c}The storm\nRain on the slate roofs.\n"
        );
        assert!(!text.contains("Chapter") && !text.contains("margin"));
    }

    #[test]
    fn a_zip_bomb_stops_at_the_budget_however_small_it_claims_to_be() {
        // 64 MB of one character deflates to about 64 KB.
        let body = format!(
            "<w:document xmlns:w=\"x\"><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:body></w:document>",
            "a".repeat(64 << 20)
        );
        let bomb = files::zip_of(&[("word/document.xml", body.as_bytes())]);
        assert!(bomb.len() < 1 << 20, "{}", bomb.len());
        let err = refused(Kind::Docx, &bomb);
        assert_eq!(err.code, FailureCode::Unsafe, "{err}");
        assert_eq!(
            err.message,
            "the Word document inflates to more than 16 MB; it looks like a zip bomb"
        );
    }

    #[test]
    fn zips_nested_inside_a_document_are_never_opened() {
        // The 42.zip shape: only the document's own XML parts are read,
        // and the embedded zips stay shut.
        let docx = files::nested_zips_docx("Quarterly figures attached.");
        assert!(docx.len() < 2 << 20, "{}", docx.len());
        let (text, _) = text(Kind::Docx, &docx);
        assert_eq!(text.trim(), "Quarterly figures attached.");
    }

    #[test]
    fn a_workbook_whose_parts_declare_more_than_the_budget_is_refused_before_it_is_read() {
        let sheet = vec![b' '; 20 << 20];
        let book = files::zip_of(&[("xl/worksheets/sheet1.xml", &sheet)]);
        let err = check_archive(Kind::Xlsx, &book, BUDGET).expect_err("refused");
        assert_eq!(err.code, FailureCode::Unsafe);
        assert_eq!(
            err.message,
            "the Excel workbook inflates to more than 16 MB; it looks like a zip bomb"
        );
        let small = files::xlsx(&[("S", &[&["a"]])], None);
        assert!(check_archive(Kind::Xlsx, &small, BUDGET).is_ok());
    }

    /// `zip` with the uncompressed size of its entry `name` rewritten to
    /// `size` in the local header and the central directory: a lie.
    fn lying_about(mut zip: Vec<u8>, name: &str, size: u32) -> Vec<u8> {
        let n = name.len();
        for (signature, size_at, name_at) in [(b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)] {
            let at = (0..zip.len().saturating_sub(name_at + n))
                .find(|&i| {
                    &zip[i..i + 4] == signature
                        && &zip[i + name_at..i + name_at + n] == name.as_bytes()
                })
                .expect("the entry's header");
            zip[at + size_at..at + size_at + 4].copy_from_slice(&size.to_le_bytes());
        }
        zip
    }

    #[test]
    fn a_workbook_part_that_lies_about_its_size_is_not_read_past_the_lie() {
        // 24 MB of content.xml, declared as 1 KB: the declared sizes pass
        // the budget check, and reading stops where the declaration ends.
        let cell = "x".repeat(24 << 20);
        let book = files::ods(&[("Sheet", &[&[cell.as_str()]])]);
        // Told the truth, the budget refuses it (and calamine could read it).
        assert!(check_archive(Kind::Ods, &book, BUDGET).is_err());
        let (honest, _) =
            super::super::sheets::workbook(Kind::Ods, &book, 32 << 20, &mut |_| {}).expect("read");
        assert!(honest.len() > 24 << 20);
        let liar = lying_about(book, "content.xml", 1_000);
        assert!(check_archive(Kind::Ods, &liar, BUDGET).is_ok());
        let err = super::super::sheets::workbook(Kind::Ods, &liar, 32 << 20, &mut |_| {})
            .expect_err("not read past the lie");
        assert_eq!(err.code, FailureCode::Damaged, "{err}");
        assert!(err.message.contains("larger than its declared"), "{err}");
    }

    #[test]
    fn an_archive_of_too_many_entries_is_refused_before_reading_them() {
        let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("f{i}")).collect();
        let parts: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        let err = refused(Kind::Pptx, &files::zip_of(&parts));
        assert_eq!(err.code, FailureCode::Unsafe);
        assert_eq!(
            err.message,
            "the PowerPoint deck holds 10001 files inside it; at most 10000 are read"
        );
    }

    #[test]
    fn entities_a_document_declares_are_never_expanded() {
        let doc = files::billion_laughs_docx("Kept &amp; &#233;", " words");
        assert_eq!(text(Kind::Docx, &doc).0, "Kept & é words\n");
    }

    #[test]
    fn nesting_past_the_depth_limit_is_refused() {
        let deep = format!(
            "<w:document xmlns:w=\"x\">{}{}</w:document>",
            "<w:p>".repeat(MAX_DEPTH + 1),
            "</w:p>".repeat(MAX_DEPTH + 1)
        );
        let doc = files::zip_of(&[("word/document.xml", deep.as_bytes())]);
        let err = refused(Kind::Docx, &doc);
        assert_eq!(err.code, FailureCode::Unsafe);
        assert!(
            err.message.contains("nests elements more than 512 deep"),
            "{err}"
        );
    }

    #[test]
    fn an_epub_spine_that_leaves_the_book_is_refused() {
        let container = br#"<container><rootfiles><rootfile full-path="OEBPS/book.opf"/></rootfiles></container>"#;
        let opf = br#"<package><manifest><item id="x" href="../../etc/passwd"/></manifest><spine><itemref idref="x"/></spine></package>"#;
        let book = files::zip_of(&[
            ("mimetype", b"application/epub+zip"),
            ("META-INF/container.xml", container),
            ("OEBPS/book.opf", opf),
        ]);
        let err = refused(Kind::Epub, &book);
        assert_eq!(err.code, FailureCode::Unsafe);
        assert_eq!(
            err.message,
            "the EPUB's reading order points outside the book (../../etc/passwd)"
        );
        assert_eq!(
            inside("OEBPS/text", "../img/a%20b.xhtml#x").as_deref(),
            Some("OEBPS/img/a b.xhtml")
        );
        assert_eq!(inside("", "/etc/passwd"), None);
        assert_eq!(inside("", "http://example.com/x"), None);
    }

    #[test]
    fn a_zip_that_is_not_the_format_it_claims_is_damaged() {
        let err = refused(Kind::Docx, &files::zip_of(&[("readme.txt", b"hello")]));
        assert_eq!(err.code, FailureCode::Damaged);
        assert_eq!(
            err.message,
            "the Word document is damaged: it has no word/document.xml"
        );
        let err = refused(Kind::Odt, b"PK\x03\x04 not really a zip");
        assert_eq!(err.code, FailureCode::Damaged);
        assert!(
            err.message
                .starts_with("the OpenDocument text is damaged: it is not a readable zip archive"),
            "{err}"
        );
    }
}
