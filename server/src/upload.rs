//! Accepting an upload: content sniffing, queue choice, and the one
//! transaction that writes document, job and outbox row. Nothing here reads
//! a document's structure: that is the parse step's, in a contained child.

use chrono::Utc;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    jobs::{events::JobEvent, machine, JobState, Tier},
    platform::db::Plan,
};

/// Longest filename accepted, in bytes.
pub const MAX_FILENAME_BYTES: usize = 255;
/// Bytes of text counted as one page, for the slow-queue threshold.
pub const TEXT_PAGE_BYTES: u64 = 3_000;

use crate::parser::Kind;

/// Checks a client-supplied filename; the message says what is wrong.
pub fn validate_filename(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("the file needs a name".into());
    }
    if name.len() > MAX_FILENAME_BYTES {
        return Err(format!(
            "the filename is {} bytes long; at most {MAX_FILENAME_BYTES} are allowed",
            name.len()
        ));
    }
    if name.contains(['/', '\\']) || name == "." || name == ".." {
        return Err("the filename must not contain path separators".into());
    }
    if name.chars().any(char::is_control) {
        return Err("the filename must not contain control characters".into());
    }
    // Bidirectional controls make `invoice\u{202E}txt.exe` display as
    // `invoiceexe.txt`.
    if name.chars().any(is_bidi_control) {
        return Err(
            "the filename must not contain bidirectional text controls (such as U+202E)".into(),
        );
    }
    Ok(())
}

/// Unicode's bidirectional formatting characters (UAX #9): marks,
/// embeddings, overrides and isolates.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Incremental content sniffer: fed every chunk of the upload in order.
///
/// Text is accepted in any encoding (the parse step decodes it, see
/// `parser::extract::decode`); what is refused is what is not text: a
/// format known by its magic bytes (an image, an archive, an office
/// document: the message names it), or bytes with NULs or more than one
/// C0 control character in a hundred, which no text encoding produces
/// (UTF-16 with a byte-order mark aside).
#[derive(Debug, Default)]
pub struct Sniffer {
    head: Vec<u8>,
    bytes: u64,
    controls: u64,
    nul: bool,
}

const HEAD_BYTES: usize = 1024;

/// Controls that occur in ordinary text: tab, line feed, form feed,
/// carriage return, escape.
fn is_binary_control(b: u8) -> bool {
    b < 0x20 && !matches!(b, b'\t' | b'\n' | 0x0c | b'\r' | 0x1b)
}

impl Sniffer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.head.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        self.bytes += chunk.len() as u64;
        if self.is_pdf() || self.utf16() {
            return;
        }
        self.nul |= chunk.contains(&0);
        self.controls += chunk.iter().filter(|b| is_binary_control(**b)).count() as u64;
    }

    /// A PDF header in the first kilobyte (readers allow junk before it).
    fn is_pdf(&self) -> bool {
        self.head.windows(5).any(|w| w == b"%PDF-")
    }

    /// A zip archive docflow reads: OpenDocument and EPUB name their type
    /// in a first, uncompressed `mimetype` entry; Office Open XML is told
    /// by its extension (its parts are checked by the parse step, which
    /// calls a zip that is not what its name says damaged).
    fn archive_kind(&self, lower_name: &str) -> Option<Kind> {
        const LOCAL_HEADER: &[u8] = b"PK\x03\x04";
        if !self.head.starts_with(LOCAL_HEADER) {
            return None;
        }
        let declared = first_entry(&self.head)
            .filter(|(name, _)| *name == b"mimetype")
            .map(|(_, data)| data);
        let by_content = [Kind::Odt, Kind::Odp, Kind::Ods, Kind::Epub]
            .into_iter()
            .find(|k| declared == Some(k.mime().as_bytes()));
        by_content.or_else(|| {
            let ext = lower_name.rsplit_once('.')?.1;
            [
                ("docx", Kind::Docx),
                ("pptx", Kind::Pptx),
                ("odt", Kind::Odt),
                ("odp", Kind::Odp),
                ("epub", Kind::Epub),
                ("xlsx", Kind::Xlsx),
                ("ods", Kind::Ods),
            ]
            .into_iter()
            .find(|(e, _)| *e == ext)
            .map(|(_, k)| k)
        })
    }

    /// A picture of text docflow reads by OCR, told by its signature.
    fn image_kind(&self) -> Option<Kind> {
        use infer::image::{is_jpeg, is_png, is_tiff};
        let head = &self.head[..];
        [
            (is_png(head), Kind::Png),
            (is_jpeg(head), Kind::Jpeg),
            (is_tiff(head), Kind::Tiff),
        ]
        .into_iter()
        .find(|(is, _)| *is)
        .map(|(_, k)| k)
    }

    fn utf16(&self) -> bool {
        self.head.starts_with(&[0xff, 0xfe]) || self.head.starts_with(&[0xfe, 0xff])
    }

    /// The verdict once every byte was fed, with the filename as a hint for
    /// Markdown and HTML.
    pub fn finish(&self, filename: &str) -> Result<Kind, String> {
        const ACCEPTED: &str = app::format::ACCEPTED_TYPES;
        if self.is_pdf() {
            return Ok(Kind::Pdf);
        }
        let lower = filename.to_ascii_lowercase();
        if let Some(kind) = self.archive_kind(&lower) {
            return Ok(kind);
        }
        if let Some(kind) = self.image_kind() {
            return Ok(kind);
        }
        // Rich Text Format is text, but a format of its own (and one that
        // `infer` calls an office document).
        if self.head.trim_ascii_start().starts_with(b"{\\rtf") {
            return Ok(Kind::Rtf);
        }
        if !self.utf16() {
            if let Some(found) =
                infer::get(&self.head).filter(|t| t.matcher_type() != infer::MatcherType::Text)
            {
                return Err(format!(
                    "{ACCEPTED}; this file is {} ({})",
                    what_it_is(found.matcher_type()),
                    found.extension()
                ));
            }
            if self.nul || self.controls * 100 > self.bytes {
                if lower.ends_with(".pdf") {
                    return Err(
                        "the file is a damaged PDF: it does not begin with a PDF header".into(),
                    );
                }
                return Err(format!("{ACCEPTED}; this file is binary, not text"));
            }
        }
        let (head, _) = encoding_rs::Encoding::for_bom(&self.head)
            .map_or(encoding_rs::UTF_8, |(e, _)| e)
            .decode_with_bom_removal(&self.head);
        let start = head.trim_start().to_ascii_lowercase();
        if start.starts_with("<!doctype html")
            || start.starts_with("<html")
            || lower.ends_with(".html")
            || lower.ends_with(".htm")
        {
            return Ok(Kind::Html);
        }
        if lower.ends_with(".md") || lower.ends_with(".markdown") {
            return Ok(Kind::Markdown);
        }
        if lower.ends_with(".csv") {
            return Ok(Kind::Csv);
        }
        if lower.ends_with(".tsv") {
            return Ok(Kind::Tsv);
        }
        if lower.ends_with(".eml") {
            return Ok(Kind::Eml);
        }
        Ok(Kind::Text)
    }
}

/// The name and (stored, uncompressed) data of a zip's first entry, read
/// from its local file header: data size at 18, name and extra field
/// lengths at 26 and 28, the name at 30, then the extra field, then data.
fn first_entry(zip: &[u8]) -> Option<(&[u8], &[u8])> {
    let le = |at: usize, len: usize| {
        let b = zip.get(at..at + len)?;
        Some(
            b.iter()
                .rev()
                .fold(0usize, |n, byte| n << 8 | usize::from(*byte)),
        )
    };
    let (size, name, extra) = (le(18, 4)?, le(26, 2)?, le(28, 2)?);
    let data = 30 + name + extra;
    Some((zip.get(30..30 + name)?, zip.get(data..data + size)?))
}

/// A refused format, in words.
fn what_it_is(kind: infer::MatcherType) -> &'static str {
    use infer::MatcherType as M;
    match kind {
        M::Image => "an image",
        M::Video => "a video",
        M::Audio => "an audio file",
        M::Archive => "an archive",
        M::Doc => "an office document of a kind docflow does not read; save it as PDF first",
        M::Book => "an e-book",
        M::Font => "a font",
        M::App => "a program",
        M::Text | M::Custom => "not text",
    }
}

/// Pages of a document as far as the upload can tell from its size alone:
/// 3,000-byte pages of text, 0 for a PDF or an archive format (its parse
/// step counts them).
pub fn count_pages(kind: Kind, size: u64) -> u32 {
    match kind {
        Kind::Pdf => 0,
        // Compressed: the size says little; the parse step counts slides.
        k if k.is_archive() => 0,
        // Pictures: the parse step counts a TIFF's pages.
        k if k.is_image() => 0,
        _ => u32::try_from(size.div_ceil(TEXT_PAGE_BYTES)).unwrap_or(u32::MAX),
    }
}

/// Paid tenants go to `high`, free ones to `normal`, and long documents of
/// anyone to `slow`.
pub fn pick_tier(plan: Plan, pages: u32, slow_pages: u32) -> Tier {
    if pages > slow_pages {
        Tier::Slow
    } else if plan == Plan::Paid {
        Tier::High
    } else {
        Tier::Normal
    }
}

/// The tenant's latest earlier upload of the same bytes (not deleted) and
/// its job (a document has one): one entry of
/// `documents_tenant_sha256_latest`, however many copies there are.
/// Parameters: tenant, SHA-256.
pub const LATEST_COPY_SQL: &str =
    "SELECT d.id, (SELECT j.id FROM jobs j WHERE j.document_id = d.id),
            d.filename, d.created_at
     FROM documents d
     WHERE d.tenant_id = $1 AND d.sha256 = $2 AND d.deleted_at IS NULL
     ORDER BY d.created_at DESC LIMIT 1";

/// The tenant's latest earlier upload of the same bytes (not deleted): runs
/// [`LATEST_COPY_SQL`] (a runtime query: a test reads its plan).
pub async fn latest_copy(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    sha256: &[u8],
) -> sqlx::Result<Option<app::dto::DuplicateDto>> {
    let row: Option<(Uuid, Option<Uuid>, String, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as(LATEST_COPY_SQL)
            .bind(tenant_id)
            .bind(sha256)
            .fetch_optional(conn)
            .await?;
    Ok(row.map(|(id, job, filename, at)| app::dto::DuplicateDto {
        document_id: id.to_string(),
        job_id: job.map(|j| j.to_string()),
        filename,
        uploaded_at: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
}

/// What the upload transaction needs.
pub struct NewDocument<'a> {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub user_id: Uuid,
    pub filename: &'a str,
    pub kind: Kind,
    pub size: i64,
    pub sha256: &'a [u8],
    pub pages: u32,
    pub blob_key: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub tier: Tier,
}

/// Inserts document, job, first event and outbox row; `None` when the
/// idempotency key was already used (the caller answers with the first upload).
/// Returns the job's first event too, to publish once committed.
pub async fn insert(
    conn: &mut PgConnection,
    d: &NewDocument<'_>,
) -> sqlx::Result<Option<JobEvent>> {
    let inserted = sqlx::query_scalar!(
        "INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes, sha256, pages, blob_key, idempotency_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
         RETURNING id",
        // The domain-typed columns' values are passed `as _`: see `db::Timestamp`.
        d.id,
        d.tenant_id,
        d.user_id,
        d.filename as _,
        d.kind.mime() as _,
        d.size as _,
        d.sha256 as _,
        d.pages as i32 as _,
        d.blob_key,
        d.idempotency_key as _
    )
    .fetch_optional(&mut *conn)
    .await?;
    if inserted.is_none() {
        return Ok(None);
    }
    let event = machine::create(
        conn,
        &machine::NewJob {
            id: Uuid::now_v7(),
            tenant_id: d.tenant_id,
            document_id: d.id,
            queue: d.tier,
            enqueued_at: Utc::now(),
        },
    )
    .await?;
    Ok(Some(event))
}

/// The job of an earlier upload with the same idempotency key.
pub async fn job_by_idempotency_key(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &str,
) -> sqlx::Result<Option<(Uuid, Uuid, String, JobState)>> {
    let row = sqlx::query!(
        r#"SELECT j.id, j.document_id, j.queue AS "queue: String", j.state AS "state: JobState"
           FROM documents d JOIN jobs j ON j.document_id = d.id
           WHERE d.tenant_id = $1 AND d.idempotency_key = $2"#,
        tenant_id,
        key
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.id, r.document_id, r.queue, r.state)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sniff(chunks: &[&[u8]], name: &str) -> Result<Kind, String> {
        let mut s = Sniffer::new();
        for c in chunks {
            s.feed(c);
        }
        s.finish(name)
    }

    #[test]
    fn opendocument_and_epub_say_what_they_are_and_office_files_go_by_their_name() {
        use crate::parser::office_files::{docx, epub, odp, odt, zip_of};
        let odt = odt("Title", &["Body"], &[]);
        assert_eq!(sniff(&[&odt], "minutes.bin"), Ok(Kind::Odt));
        assert_eq!(sniff(&[&odp(&[&["Hi"]])], "deck"), Ok(Kind::Odp));
        assert_eq!(sniff(&[&epub(&[("A", "b")])], "book.zip"), Ok(Kind::Epub));
        let doc = docx(&["Body"], &[], None);
        assert_eq!(sniff(&[&doc], "Report.DOCX"), Ok(Kind::Docx));
        assert_eq!(
            sniff(&[&doc], "report.pptx"),
            Ok(Kind::Pptx),
            "checked by the parse step"
        );
        // A template is another type than the one whose name it begins with.
        let template = zip_of(&[(
            "mimetype",
            b"application/vnd.oasis.opendocument.text-template",
        )]);
        assert!(sniff(&[&template], "letter.ott").is_err());
        let plain = zip_of(&[("a.txt", b"hello")]);
        let refused = sniff(&[&plain], "photos.zip").expect_err("a plain zip");
        assert!(
            refused.ends_with("this file is an archive (zip)"),
            "{refused}"
        );
    }

    #[test]
    fn types_come_from_the_bytes() {
        assert_eq!(sniff(&[b"%PDF-1.7\n..."], "x.txt"), Ok(Kind::Pdf));
        assert_eq!(sniff(&[b"\r\n%PDF-1.4\n..."], "x.pdf"), Ok(Kind::Pdf));
        assert_eq!(sniff(&[b"  <!DOCTYPE html><p>hi"], "page"), Ok(Kind::Html));
        assert_eq!(sniff(&[b"# Title\n"], "notes.md"), Ok(Kind::Markdown));
        assert_eq!(sniff(&[b"plain words"], "a.pdf"), Ok(Kind::Text));
        assert!(sniff(&[b"abc\0def"], "a.txt").is_err());
        // Scans and photos, whatever their name says.
        assert_eq!(
            sniff(&[b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"], "scan.txt"),
            Ok(Kind::Png)
        );
        assert_eq!(
            sniff(&[b"\xff\xd8\xff\xe0\0\x10JFIF\0"], "page"),
            Ok(Kind::Jpeg)
        );
        assert_eq!(
            sniff(&[b"II*\0\x08\0\0\0\x0c\0"], "fax.tif"),
            Ok(Kind::Tiff)
        );
        assert_eq!(
            sniff(&[b"MM\0*\0\0\0\x08\0\x0c"], "fax.tiff"),
            Ok(Kind::Tiff)
        );
        // Rich Text Format, which `infer` calls an office document.
        assert_eq!(
            sniff(&[b"{\\rtf1\\ansi Minutes\\par}"], "minutes.txt"),
            Ok(Kind::Rtf)
        );
        assert_eq!(sniff(&[b"\r\n{\\rtf1 x}"], "minutes.rtf"), Ok(Kind::Rtf));
    }

    #[test]
    fn a_refusal_says_what_the_file_is() {
        let gif = sniff(&[b"GIF89a\x01\0\x01\0\0\0\0"], "a.txt").expect_err("gif");
        assert!(gif.contains("an image (gif)"), "{gif}");
        let zip = sniff(&[b"PK\x03\x04\x14\0\0\0"], "a.txt").expect_err("zip");
        assert!(zip.contains("archive"), "{zip}");
        let pdf =
            sniff(&[b"\x01\x02garbage\0\0 where a header was"], "scan.pdf").expect_err("damaged");
        assert!(pdf.contains("damaged PDF"), "{pdf}");
        let bin = sniff(&[&[0x01, 0x02, 0x03, 0x04, 0x05, 0x06][..]], "a.txt").expect_err("binary");
        assert!(bin.ends_with("this file is binary, not text"), "{bin}");
    }

    #[test]
    fn text_in_any_encoding_is_text() {
        // Windows-1252 (Latin-1): "café déjà vu" with 0xE9, 0xE0.
        assert_eq!(sniff(&[b"caf\xe9 d\xe9j\xe0 vu"], "a.txt"), Ok(Kind::Text));
        // UTF-16 with a byte-order mark is full of NULs and still text.
        let utf16: Vec<u8> = [0xff, 0xfe]
            .into_iter()
            .chain("<html><p>hi</p>".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(sniff(&[&utf16], "page"), Ok(Kind::Html));
        // UTF-8 split anywhere across chunks.
        let s = "café ünïcode".as_bytes();
        let (a, b) = s.split_at(4);
        assert_eq!(sniff(&[a, b], "a.txt"), Ok(Kind::Text));
    }

    #[test]
    fn filenames_with_paths_or_too_long_are_refused() {
        assert!(validate_filename("report.pdf").is_ok());
        assert!(validate_filename("../etc/passwd").is_err());
        assert!(validate_filename("a\\b.txt").is_err());
        assert!(validate_filename(&"a".repeat(256)).is_err());
        assert!(validate_filename("").is_err());
        assert!(validate_filename("invoice\u{202E}txt.exe").is_err());
        assert!(validate_filename("report\u{2067}.pdf").is_err());
        assert!(validate_filename("résumé 2026.pdf").is_ok());
    }

    #[test]
    fn tiers_follow_plan_and_length() {
        assert_eq!(pick_tier(Plan::Paid, 5, 200), Tier::High);
        assert_eq!(pick_tier(Plan::Free, 5, 200), Tier::Normal);
        assert_eq!(pick_tier(Plan::Paid, 300, 200), Tier::Slow);
        assert_eq!(count_pages(Kind::Text, 6_001), 3);
        assert_eq!(count_pages(Kind::Pdf, 6_001), 0);
    }
}
