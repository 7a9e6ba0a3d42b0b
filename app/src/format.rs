//! Pure presentation helpers shared by the pages: durations, sizes, times,
//! failure reasons in user words and the client-side
//! upload checks. No browser or server APIs, so they are unit-tested here.

use chrono::{DateTime, Utc};

use crate::dto::FailureCode;

/// The pipeline's steps, in order.
pub const STEPS: [&str; 4] = ["parse", "chunk", "embed", "store"];

/// The largest file the server accepts (`DOCFLOW_MAX_UPLOAD_BYTES` default).
pub const MAX_UPLOAD_BYTES: f64 = 50.0 * 1024.0 * 1024.0;

/// File types the pipeline can read, by extension (the server reads any
/// text; these are the text files people upload).
pub const ACCEPTED_EXTENSIONS: [&str; 22] = [
    "pdf", "txt", "md", "markdown", "html", "htm", "csv", "tsv", "docx", "pptx", "xlsx", "odt",
    "odp", "ods", "epub", "eml", "rtf", "png", "jpg", "jpeg", "tif", "tiff",
];

/// What the file picker offers.
pub const ACCEPT_ATTR: &str =
    ".pdf,.txt,.md,.markdown,.html,.htm,.csv,.tsv,.docx,.pptx,.xlsx,.odt,\
                               .odp,.ods,.epub,.eml,.rtf,.png,.jpg,.jpeg,.tif,.tiff,application/pdf,\
                               text/plain,text/markdown,text/html,text/csv,text/tab-separated-values,\
                               image/png,image/jpeg,image/tiff,message/rfc822,application/rtf";

/// The refusal of a file type, in the same words from the browser's check
/// and from the server's.
pub const ACCEPTED_TYPES: &str =
    "only PDF, plain text (.txt), CSV and TSV, Markdown, HTML, Word (.docx), PowerPoint (.pptx), \
     Excel (.xlsx), OpenDocument (.odt, .odp, .ods), EPUB, e-mail (.eml), RTF, and PNG, JPEG and TIFF images \
     (read by OCR) are accepted";

/// `820 ms`, `3.2 s`, `4 min 05 s`, `2 h 03 min`.
pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        age_s(ms as f64 / 1000.0)
    }
}

/// A duration in seconds for humans: `12 s`, `4 min 05 s`, `2 h 03 min`, `3 d 4 h`.
pub fn age_s(s: f64) -> String {
    let s = s.max(0.0).round() as i64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        3600..=86_399 => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// When a queue's backlog clears, for its card: `Backlog empty`, `Not
/// draining` (no ETA), `Clears in under a minute`, `Clears in about 4 min`,
/// `Clears in about 2 h 05 min`, `Clears in about 3 d`.
pub fn eta(backlog: i64, eta_s: Option<f64>) -> String {
    let s = match eta_s {
        _ if backlog <= 0 => return "Backlog empty".into(),
        None => return "Not draining".into(),
        Some(s) => s,
    };
    format!("Clears in {}", roughly(s))
}

/// A time to come, roughly: `under a minute`, `about 4 min`, `about 2 h
/// 05 min`, `about 3 d`.
pub fn roughly(s: f64) -> String {
    let s = s.max(0.0);
    let minutes = (s / 60.0).round() as i64;
    if s < 60.0 {
        "under a minute".into()
    } else if minutes < 60 {
        format!("about {minutes} min")
    } else if minutes < 24 * 60 {
        format!("about {} h {:02} min", minutes / 60, minutes % 60)
    } else {
        format!("about {} d", (s / 86_400.0).round() as i64)
    }
}

/// `0.753` → `75 %`.
pub fn percent(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

/// Seconds from `from` to `to`.
pub fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

/// `12:03:04` (UTC).
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S").to_string()
}

/// `2026-11-29 12:03:04 UTC`.
pub fn date_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `1.4 MB`.
pub fn bytes(n: f64) -> String {
    if n < 1024.0 {
        format!("{n:.0} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.1} KB", n / 1024.0)
    } else {
        format!("{:.1} MB", n / 1024.0 / 1024.0)
    }
}

/// A number for a dashboard card: integers plainly, others with one decimal.
pub fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The timeline line of a job put on `queue`: `queued on high`. Members
/// read it as [`member_words`] says.
pub fn queued_on(queue: impl std::fmt::Display) -> String {
    format!("queued on {queue}")
}

/// The timeline line of a job handed over to another queue (`slow`), `why`.
pub fn handed_over(why: &str, queue: impl std::fmt::Display) -> String {
    format!("{why}{HANDED_OVER}{queue} queue")
}

const HANDED_OVER: &str = "; handed over to the ";

/// What an administrator's re-enqueue writes on the job's timeline.
pub const REQUEUED_BY_ADMIN: &str = "re-enqueued by an administrator";

/// A timeline line in a member's words: no queue names, no re-enqueues
/// (the lines above, as the server writes them).
pub fn member_words(message: &str) -> String {
    if message.starts_with("queued on ") {
        return "received, waiting for a worker".into();
    }
    if let Some((why, _)) = message.split_once(HANDED_OVER) {
        return format!("{why}; it goes on with the long documents");
    }
    match message {
        REQUEUED_BY_ADMIN => "retried by an administrator".into(),
        other => other.into(),
    }
}

/// `embedding provider` → `Embedding provider`.
pub fn capitalised(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// At most `max` characters of `s`, whitespace runs folded to one space; a
/// cut ends on a word boundary where one is near, with `…`.
pub fn truncated(s: &str, max: usize) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() <= max {
        return s;
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i >= cut.len() * 3 / 4 => &cut[..i],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end_matches([' ', ',', ';', ':', '.']))
}

/// Checks a file before it is sent; the message says what to do instead.
pub fn check_upload(name: &str, size: f64) -> Result<(), String> {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    if !ACCEPTED_EXTENSIONS.contains(&ext.as_str()) {
        return Err(format!("{name} cannot be uploaded: {ACCEPTED_TYPES}."));
    }
    if size > MAX_UPLOAD_BYTES {
        return Err(format!(
            "{name} is too large ({}): the limit is 50 MB.",
            bytes(size)
        ));
    }
    if size == 0.0 {
        return Err(format!("{name} is empty."));
    }
    Ok(())
}

/// A job's failure in words a user can act on, chosen by its code; the
/// server's text (`step: error`) says the rest when the code has no words
/// of its own (a limit already said plainly, an unknown code). `filename`
/// names the file's type: "not a real PDF".
pub fn failure_text(code: Option<FailureCode>, raw: &str, filename: &str) -> String {
    let (step, detail) = match raw.split_once(": ") {
        Some((s, d)) if STEPS.contains(&s) => (Some(s), d),
        _ => (None, raw),
    };
    let kind = filename
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_uppercase())
        .unwrap_or_else(|| "document".into());
    let text = match code {
        Some(FailureCode::Encrypted) => {
            "This PDF is password-protected. Remove the password and upload it again.".to_string()
        }
        Some(FailureCode::Damaged) => format!(
            "This file looks damaged or is not a real {kind}, so its text could not be read. Export it again and re-upload it."
        ),
        Some(FailureCode::NoText) => {
            "No text was found in this document (a scanned image?). Upload a version with selectable text.".to_string()
        }
        Some(FailureCode::NotUtf8) => {
            "This text file is not UTF-8 encoded. Save it as UTF-8 and upload it again.".to_string()
        }
        Some(FailureCode::UnsupportedType) => format!("This file type is not supported: {ACCEPTED_TYPES}."),
        Some(FailureCode::Unavailable) => {
            "The search index service was unavailable. The document will be retried.".to_string()
        }
        _ => {
            let mut s = capitalised(detail);
            if !s.ends_with('.') {
                s.push('.');
            }
            s
        }
    };
    match step {
        Some(step) => format!("{text} (It failed while {}.)", step_verb(step)),
        None => text,
    }
}

/// A job's last failure in user words ([`failure_text`]); `None` when it
/// has none.
pub fn job_failure(job: &crate::dto::JobDto) -> Option<String> {
    let raw = job.last_error.as_deref()?;
    Some(failure_text(job.last_error_code, raw, &job.filename))
}

/// `parse` → `reading the file`.
pub fn step_verb(step: &str) -> &'static str {
    match step {
        "parse" => "reading the file",
        "chunk" => "splitting it into passages",
        "embed" => "indexing it for search",
        "store" => "saving it",
        _ => "processing it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration_ms(820), "820 ms");
        assert_eq!(duration_ms(3_240), "3.2 s");
        assert_eq!(duration_ms(245_000), "4 min 05 s");
        assert_eq!(age_s(7_380.0), "2 h 03 min");
    }

    #[test]
    fn a_backlog_eta_reads_as_words() {
        assert_eq!(eta(0, Some(0.0)), "Backlog empty");
        assert_eq!(eta(0, None), "Backlog empty");
        assert_eq!(eta(12, None), "Not draining");
        assert_eq!(eta(12, Some(20.0)), "Clears in under a minute");
        assert_eq!(eta(12, Some(240.0)), "Clears in about 4 min");
        assert_eq!(eta(12, Some(3_570.0)), "Clears in about 1 h 00 min");
        assert_eq!(eta(12, Some(7_500.0)), "Clears in about 2 h 05 min");
        assert_eq!(eta(12, Some(3.0 * 86_400.0)), "Clears in about 3 d");
        assert_eq!(percent(0.753), "75 %");
    }

    #[test]
    fn long_errors_are_cut_on_a_word_with_an_ellipsis() {
        assert_eq!(capitalised("embedding provider"), "Embedding provider");
        assert_eq!(capitalised(""), "");
        assert_eq!(truncated("connection\n  refused", 40), "connection refused");
        let long = "error sending request for url (http://embedder:8080/v1/embeddings): connection refused";
        assert_eq!(
            truncated("the quick brown fox jumps over the lazy dog", 20),
            "the quick brown…"
        );
        let cut = truncated(long, 60);
        assert_eq!(cut.chars().count(), 60, "{cut}");
        assert_eq!(
            cut,
            "error sending request for url (http://embedder:8080/v1/embe…"
        );
        // No space near the end: cut mid-word rather than lose most of it.
        assert_eq!(
            truncated(&"x".repeat(100), 10),
            format!("{}…", "x".repeat(9))
        );
        assert_eq!(truncated("é".repeat(20).as_str(), 5), "éééé…");
    }

    #[test]
    fn uploads_are_checked_for_type_and_size() {
        assert!(check_upload("a.pdf", 10.0).is_ok());
        assert!(check_upload("notes.MD", 10.0).is_ok());
        assert!(check_upload("export.csv", 10.0).is_ok());
        assert!(check_upload("export.TSV", 10.0).is_ok());
        assert_eq!(
            check_upload("pic.gif", 10.0),
            Err(format!("pic.gif cannot be uploaded: {ACCEPTED_TYPES}."))
        );
        assert!(check_upload("big.pdf", 51.0 * 1024.0 * 1024.0)
            .expect_err("refused")
            .contains("too large"));
    }

    #[test]
    fn a_failure_is_explained_by_its_code_in_user_words() {
        let raw = "parse: the PDF is damaged and could not be read (invalid file trailer)";
        let s = failure_text(Some(FailureCode::Damaged), raw, "report.pdf");
        assert!(
            s.starts_with("This file looks damaged or is not a real PDF"),
            "{s}"
        );
        assert!(s.contains("reading the file"), "{s}");
        // The words come from the code, not from the text: the same text
        // with another code says what that code means.
        let s = failure_text(Some(FailureCode::Encrypted), raw, "report.pdf");
        assert!(s.starts_with("This PDF is password-protected."), "{s}");
        // Without a code (a job failed before codes were kept), the
        // server's text is shown as it is, tidied.
        let s = failure_text(None, raw, "report.pdf");
        assert!(
            s.starts_with("The PDF is damaged and could not be read"),
            "{s}"
        );
        // A limit the parser ran into is already said in plain words.
        let s = failure_text(
            Some(FailureCode::Unsafe),
            "parse: this PDF could not be read safely: it needs more than 512 MB of memory to open",
            "big.pdf",
        );
        assert_eq!(
            s,
            "This PDF could not be read safely: it needs more than 512 MB of memory to open. (It failed while reading the file.)"
        );
    }
}
