//! Accepting an upload: content sniffing, queue choice, and the one
//! transaction that writes document, job and outbox row. Nothing here reads
//! a document's structure: that is the parse step's, in a contained child.

use chrono::Utc;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::{
    db::Plan,
    jobs::{machine, JobState, Tier},
    pipeline::events::JobEvent,
};

/// Longest filename accepted, in bytes.
pub const MAX_FILENAME_BYTES: usize = 255;
/// Bytes of text counted as one page, for the slow-queue threshold.
pub const TEXT_PAGE_BYTES: u64 = 3_000;

/// A content type docflow can process, decided from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pdf,
    Text,
    Markdown,
    Html,
}

impl Kind {
    pub fn mime(self) -> &'static str {
        match self {
            Kind::Pdf => "application/pdf",
            Kind::Text => "text/plain",
            Kind::Markdown => "text/markdown",
            Kind::Html => "text/html",
        }
    }

    pub fn from_mime(m: &str) -> Option<Kind> {
        [Kind::Pdf, Kind::Text, Kind::Markdown, Kind::Html]
            .into_iter()
            .find(|k| k.mime() == m)
    }
}

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
#[derive(Debug, Default)]
pub struct Sniffer {
    head: Vec<u8>,
    /// Bytes of an incomplete UTF-8 sequence at the end of the last chunk.
    carry: Vec<u8>,
    utf8: bool,
    started: bool,
    nul: bool,
}

const HEAD_BYTES: usize = 1024;

impl Sniffer {
    pub fn new() -> Self {
        Self {
            utf8: true,
            ..Default::default()
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.started = true;
        if self.head.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
        }
        if self.is_pdf() || !self.utf8 {
            return;
        }
        if chunk.contains(&0) {
            self.nul = true;
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        match std::str::from_utf8(&buf) {
            Ok(_) => {}
            // An incomplete sequence at the end may complete in the next chunk.
            Err(e) if e.error_len().is_none() => self.carry = buf[e.valid_up_to()..].to_vec(),
            Err(_) => self.utf8 = false,
        }
    }

    fn is_pdf(&self) -> bool {
        self.head.starts_with(b"%PDF-")
    }

    /// The verdict once every byte was fed, with the filename as a hint for Markdown.
    pub fn finish(&self, filename: &str) -> Result<Kind, String> {
        if self.is_pdf() {
            return Ok(Kind::Pdf);
        }
        if !self.utf8 || !self.carry.is_empty() || self.nul {
            return Err(
                "only PDF, plain text, Markdown and HTML files are accepted; this file is binary"
                    .into(),
            );
        }
        let text = String::from_utf8_lossy(&self.head);
        let start = text
            .trim_start_matches('\u{feff}')
            .trim_start()
            .to_ascii_lowercase();
        let lower = filename.to_ascii_lowercase();
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
        Ok(Kind::Text)
    }
}

/// Pages of a document as far as the upload can tell from its size alone:
/// 3,000-byte pages of text, 0 for a PDF (its parse step counts them).
pub fn count_pages(kind: Kind, size: u64) -> u32 {
    match kind {
        Kind::Pdf => 0,
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
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO documents (id, tenant_id, uploaded_by, filename, content_type, size_bytes, sha256, pages, blob_key, idempotency_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
         RETURNING id",
    )
    .bind(d.id)
    .bind(d.tenant_id)
    .bind(d.user_id)
    .bind(d.filename)
    .bind(d.kind.mime())
    .bind(d.size)
    .bind(d.sha256)
    .bind(d.pages as i32)
    .bind(d.blob_key)
    .bind(d.idempotency_key)
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
    sqlx::query_as(
        "SELECT j.id, j.document_id, j.queue, j.state FROM documents d JOIN jobs j ON j.document_id = d.id
         WHERE d.tenant_id = $1 AND d.idempotency_key = $2",
    )
    .bind(tenant_id)
    .bind(key)
    .fetch_optional(conn)
    .await
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
    fn types_come_from_the_bytes() {
        assert_eq!(sniff(&[b"%PDF-1.7\n..."], "x.txt"), Ok(Kind::Pdf));
        assert_eq!(sniff(&[b"  <!DOCTYPE html><p>hi"], "page"), Ok(Kind::Html));
        assert_eq!(sniff(&[b"# Title\n"], "notes.md"), Ok(Kind::Markdown));
        assert_eq!(sniff(&[b"plain words"], "a.pdf"), Ok(Kind::Text));
        assert!(sniff(&[b"\x89PNG\r\n\x1a\n\0\0"], "a.png").is_err());
        assert!(sniff(&[b"abc\0def"], "a.txt").is_err());
    }

    #[test]
    fn utf8_split_across_chunks_is_still_text() {
        let s = "café ünïcode".as_bytes();
        let (a, b) = s.split_at(4); // splits the two-byte 'é'
        assert_eq!(sniff(&[a, b], "a.txt"), Ok(Kind::Text));
        assert!(
            sniff(&[a], "a.txt").is_err(),
            "a file ending mid-sequence is not text"
        );
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
