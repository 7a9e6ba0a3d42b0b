//! Parsing outside the worker's address space. A [`ParserPool`] keeps a few
//! long-lived `docflow parse-child` processes; each document is sent to one
//! of them over a pipe, under OS limits (address space, CPU time, see
//! [`child`]) and a wall-clock deadline enforced here, which each report of
//! progress (a page done) renews. A child that dies or overruns is killed
//! with the programs it started (OCR, [`ocr`]) and replaced; the document
//! fails permanently with a reason its owner can read, and the worker
//! carries on.

pub mod child;
pub mod extract;
pub mod mail;
pub mod ocr;
pub mod office;
pub mod rtf;
pub mod sheets;
pub mod wire;

#[cfg(test)]
#[path = "../../tests/api/sample_pdf.rs"]
mod sample_pdf;

#[cfg(test)]
#[path = "../../tests/api/office_files.rs"]
pub(crate) mod office_files;

use std::{
    path::PathBuf,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    process::{Child, ChildStdin, ChildStdout},
    sync::Semaphore,
    task::JoinHandle,
};

pub use self::extract::{Parsed, Progress, Rejection};

/// A content type docflow can process (decided from the bytes at upload:
/// `upload::Sniffer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pdf,
    Text,
    Markdown,
    Html,
    /// Word (`.docx`).
    Docx,
    /// PowerPoint (`.pptx`).
    Pptx,
    /// OpenDocument text (`.odt`).
    Odt,
    /// OpenDocument presentation (`.odp`).
    Odp,
    /// An e-book (`.epub`).
    Epub,
    /// Excel (`.xlsx`).
    Xlsx,
    /// OpenDocument spreadsheet (`.ods`).
    Ods,
    /// Comma-separated values.
    Csv,
    /// Tab-separated values.
    Tsv,
    /// A PNG image (a scan, a screenshot), read by OCR.
    Png,
    /// A JPEG image (a photo of a page), read by OCR.
    Jpeg,
    /// A TIFF image, one page or many (a fax, a scanner's output), read by OCR.
    Tiff,
    /// An e-mail (`.eml`): its text and its text attachments.
    Eml,
    /// Rich Text Format (`.rtf`).
    Rtf,
}

impl Kind {
    /// Every kind, in the order the parser wire numbers them.
    pub const ALL: [Kind; 18] = [
        Kind::Pdf,
        Kind::Text,
        Kind::Markdown,
        Kind::Html,
        Kind::Docx,
        Kind::Pptx,
        Kind::Odt,
        Kind::Odp,
        Kind::Epub,
        Kind::Xlsx,
        Kind::Ods,
        Kind::Csv,
        Kind::Tsv,
        Kind::Png,
        Kind::Jpeg,
        Kind::Tiff,
        Kind::Eml,
        Kind::Rtf,
    ];

    pub fn mime(self) -> &'static str {
        match self {
            Kind::Pdf => "application/pdf",
            Kind::Text => "text/plain",
            Kind::Markdown => "text/markdown",
            Kind::Html => "text/html",
            Kind::Docx => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            Kind::Pptx => {
                "application/vnd.openxmlformats-officedocument.presentationml.presentation"
            }
            Kind::Odt => "application/vnd.oasis.opendocument.text",
            Kind::Odp => "application/vnd.oasis.opendocument.presentation",
            Kind::Epub => "application/epub+zip",
            Kind::Xlsx => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            Kind::Ods => "application/vnd.oasis.opendocument.spreadsheet",
            Kind::Csv => "text/csv",
            Kind::Tsv => "text/tab-separated-values",
            Kind::Png => "image/png",
            Kind::Jpeg => "image/jpeg",
            Kind::Tiff => "image/tiff",
            Kind::Eml => "message/rfc822",
            Kind::Rtf => "application/rtf",
        }
    }

    pub fn from_mime(m: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.mime() == m)
    }

    /// What a user calls a file of this kind, in the messages they read:
    /// "this PDF", "the Word document is damaged".
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Pdf => "PDF",
            Kind::Html => "HTML page",
            Kind::Markdown => "Markdown file",
            Kind::Text => "text file",
            Kind::Docx => "Word document",
            Kind::Pptx => "PowerPoint deck",
            Kind::Odt => "OpenDocument text",
            Kind::Odp => "OpenDocument presentation",
            Kind::Epub => "EPUB book",
            Kind::Xlsx => "Excel workbook",
            Kind::Ods => "OpenDocument spreadsheet",
            Kind::Csv => "CSV file",
            Kind::Tsv => "TSV file",
            Kind::Png => "PNG image",
            Kind::Jpeg => "JPEG image",
            Kind::Tiff => "TIFF image",
            Kind::Eml => "e-mail",
            Kind::Rtf => "RTF document",
        }
    }

    /// A picture of text, read by OCR ([`ocr`]).
    pub fn is_image(self) -> bool {
        matches!(self, Kind::Png | Kind::Jpeg | Kind::Tiff)
    }

    /// A zip archive of XML parts ([`office`]).
    pub fn is_archive(self) -> bool {
        matches!(
            self,
            Kind::Docx | Kind::Pptx | Kind::Odt | Kind::Odp | Kind::Epub | Kind::Xlsx | Kind::Ods
        )
    }
}

/// The hidden subcommand that runs a parser child.
pub const CHILD_COMMAND: &str = "parse-child";
/// Documents a child parses before it is replaced (fragmentation, leaks).
const RECYCLE_AFTER: u32 = 500;
/// Bytes of a child's standard error kept to explain its death.
const STDERR_TAIL: usize = 8 * 1024;

/// What one parse may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Address space of a parser child, in bytes.
    pub memory: u64,
    /// Wall-clock time for one document, or for one of its pages when it
    /// reports them (a scan, recognised page by page); also its CPU-time
    /// limit.
    pub timeout: Duration,
    /// Largest extracted text, in bytes.
    pub max_text: usize,
    /// Most PDF pages a document may have (declared or found).
    pub max_pages: u32,
    /// Most pixels a page is recognised at.
    pub ocr_max_pixels: u64,
    /// Most pages of one document recognised by OCR.
    pub ocr_max_pages: u32,
}

impl ParseLimits {
    /// What the parts of an archive (a Word document, an EPUB) may inflate
    /// to, together: four times the text they may yield (the markup around
    /// it), and no more than an eighth of the child's memory (a part is
    /// held whole while it is read, beside the text it yields), so that
    /// reading them stays far inside it; at least 1 MB.
    pub fn max_inflated(&self) -> u64 {
        (self.max_text as u64)
            .saturating_mul(4)
            .min(self.memory / 8)
            .max(1 << 20)
    }
}

/// Why a document produced no text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The document is unreadable, empty or too large; its owner is told why.
    #[error("{0}")]
    Rejected(Rejection),
    /// The document broke a limit and its parser was killed.
    #[error("{0}")]
    Unsafe(String),
    /// docflow could not run a parser; nothing is known about the document.
    #[error("no parser could be started: {0}")]
    Unavailable(String),
}

/// A pool of parser children, at most `size` of them at work at once.
pub struct ParserPool {
    exe: PathBuf,
    limits: ParseLimits,
    ocr: ocr::Ocr,
    idle: Mutex<Vec<ParserChild>>,
    slots: Semaphore,
}

impl ParserPool {
    /// A pool running `exe parse-child`; children start when first needed.
    pub fn new(exe: PathBuf, limits: ParseLimits, ocr: ocr::Ocr, size: usize) -> Self {
        Self {
            exe,
            limits,
            ocr,
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(size.max(1)),
        }
    }

    /// Parses `bytes` in a child; waits for a free one first.
    pub async fn parse(&self, kind: Kind, bytes: &[u8]) -> Result<Parsed, ParseError> {
        self.parse_reporting(kind, bytes, &|_| {}).await
    }

    /// [`ParserPool::parse`], telling `progress` of pages as they are done.
    pub async fn parse_reporting(
        &self,
        kind: Kind,
        bytes: &[u8],
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Parsed, ParseError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|e| ParseError::Unavailable(e.to_string()))?;
        let idle = self.idle.lock().map(|mut v| v.pop()).unwrap_or(None);
        let mut child = match idle {
            Some(c) => c,
            None => self
                .spawn()
                .map_err(|e| ParseError::Unavailable(format!("{}: {e}", self.exe.display())))?,
        };
        child.clear_stderr();
        match child.exchange(kind, bytes, &self.limits, progress).await {
            Ok(result) => {
                child.served += 1;
                if child.served < RECYCLE_AFTER {
                    if let Ok(mut idle) = self.idle.lock() {
                        idle.push(child);
                    }
                }
                result.map_err(ParseError::Rejected)
            }
            Err(Exchange::Io(io)) => {
                let (status, stderr) = child.reap().await;
                tracing::warn!(%status, error = %io, stderr = %stderr.trim(), "parser child died");
                Err(ParseError::Unsafe(unsafe_reason(
                    kind,
                    &why_it_died(status, &stderr, &self.limits),
                )))
            }
            Err(Exchange::Deadline) => {
                let (status, _) = child.reap().await;
                tracing::warn!(%status, "parser child overran its deadline; killed");
                Err(ParseError::Unsafe(unsafe_reason(
                    kind,
                    &format!(
                        "it takes longer than {} to read",
                        humantime::format_duration(self.limits.timeout)
                    ),
                )))
            }
        }
    }

    fn spawn(&self) -> std::io::Result<ParserChild> {
        let mut process = tokio::process::Command::new(&self.exe)
            .arg(CHILD_COMMAND)
            .arg("--memory")
            .arg(self.limits.memory.to_string())
            .arg("--ocr-languages")
            .arg(&self.ocr.languages)
            // A group of its own: the programs it starts die with it.
            .process_group(0)
            // mimalloc reserves a 1 GiB arena up front by default, which an
            // address-space limit counts: reserve in small steps instead.
            .env("MIMALLOC_ARENA_RESERVE", "16MiB")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(std::io::Error::other("parser child without pipes"));
        };
        let tail = Arc::new(Mutex::new(Vec::new()));
        let stderr_task = tokio::spawn({
            let tail = tail.clone();
            async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                    if let Ok(mut t) = tail.lock() {
                        t.extend_from_slice(&buf[..n]);
                        let excess = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..excess);
                    }
                }
            }
        });
        Ok(ParserChild {
            process,
            stdin,
            stdout,
            stderr: tail,
            stderr_task,
            served: 0,
        })
    }
}

/// One running `docflow parse-child`.
struct ParserChild {
    process: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// The end of what the child wrote to standard error.
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_task: JoinHandle<()>,
    served: u32,
}

impl ParserChild {
    fn clear_stderr(&self) {
        if let Ok(mut t) = self.stderr.lock() {
            t.clear();
        }
    }

    /// Sends one document and reads the answer, passing on progress. An
    /// error means the child died, talks nonsense or overran its deadline,
    /// and must be reaped.
    async fn exchange(
        &mut self,
        kind: Kind,
        bytes: &[u8],
        limits: &ParseLimits,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Result<Parsed, Rejection>, Exchange> {
        let deadline = limits.timeout;
        let req = wire::Request {
            kind,
            caps: extract::Caps {
                max_text: limits.max_text,
                max_pages: limits.max_pages,
                max_inflated: limits.max_inflated(),
                ocr_max_pixels: limits.ocr_max_pixels,
                ocr_max_pages: limits.ocr_max_pages,
            },
            cpu_seconds: u32::try_from(limits.timeout.as_secs().max(1)).unwrap_or(u32::MAX),
            len: bytes.len() as u64,
        };
        let (stdin, stdout) = (&mut self.stdin, &mut self.stdout);
        within(deadline, async {
            stdin.write_all(&req.encode()).await?;
            stdin.write_all(bytes).await?;
            stdin.flush().await
        })
        .await?;
        // Progress frames until the response; each renews the deadline.
        let head = loop {
            let mut magic = [0u8; wire::MAGIC];
            within(deadline, stdout.read_exact(&mut magic)).await?;
            if &magic == wire::PROGRESS_MAGIC {
                let mut frame = [0u8; wire::PROGRESS];
                within(deadline, stdout.read_exact(&mut frame)).await?;
                progress(wire::decode_progress(&frame));
                continue;
            }
            if &magic != wire::RESPONSE_MAGIC {
                return Err(Exchange::Io(std::io::Error::other(
                    "the parser answered garbage",
                )));
            }
            let mut head = [0u8; wire::RESPONSE_HEAD];
            within(deadline, stdout.read_exact(&mut head)).await?;
            break wire::ResponseHead::decode(&head);
        };
        // Text is capped by the child; a longer answer is not from a sane child.
        if head.len > limits.max_text as u64 + 64 * 1024 || head.ocr_ranges > limits.max_pages {
            return Err(Exchange::Io(std::io::Error::other(
                "the parser's answer is over the text limit",
            )));
        }
        let mut payload = vec![0u8; usize::try_from(head.payload_len()).unwrap_or(usize::MAX)];
        within(deadline, stdout.read_exact(&mut payload)).await?;
        Ok(head.finish(payload))
    }

    /// Kills the child (if it still runs) and returns how it ended and the
    /// end of its standard error.
    async fn reap(mut self) -> (ExitStatus, String) {
        // The child and what it started (pdftoppm, tesseract).
        if let Some(group) = self.process.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(group),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.process.start_kill();
        let status = match tokio::time::timeout(Duration::from_secs(5), self.process.wait()).await {
            Ok(Ok(s)) => s,
            _ => std::os::unix::process::ExitStatusExt::from_raw(9),
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_task).await;
        let stderr = self
            .stderr
            .lock()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        (status, stderr)
    }
}

/// `io` if it ends within `deadline`.
async fn within<T>(
    deadline: Duration,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, Exchange> {
    match tokio::time::timeout(deadline, io).await {
        Ok(r) => r.map_err(Exchange::Io),
        Err(_) => Err(Exchange::Deadline),
    }
}

/// Why an exchange with a child ended without an answer.
enum Exchange {
    /// The child died or talks nonsense.
    Io(std::io::Error),
    /// It said nothing for longer than the deadline.
    Deadline,
}

fn unsafe_reason(kind: Kind, why: &str) -> String {
    format!("this {} could not be read safely: {why}", kind.noun())
}

/// The user's words for how a parser child ended.
fn why_it_died(status: ExitStatus, stderr: &str, limits: &ParseLimits) -> String {
    use std::os::unix::process::ExitStatusExt;
    const SIGXCPU: i32 = 24;
    if stderr.contains("memory allocation of") || stderr.contains("out of memory") {
        format!(
            "it needs more than {} MB of memory to open",
            limits.memory >> 20
        )
    } else if stderr.contains("overflowed its stack") {
        "its structure is nested too deeply".into()
    } else if status.signal() == Some(SIGXCPU) {
        format!(
            "it needs more than {} of processor time",
            humantime::format_duration(limits.timeout)
        )
    } else {
        format!("the parser stopped unexpectedly ({status})")
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    const LIMITS: ParseLimits = ParseLimits {
        memory: 512 << 20,
        timeout: Duration::from_secs(60),
        max_text: 1 << 20,
        max_pages: 10_000,
        ocr_max_pixels: 40_000_000,
        ocr_max_pages: 1_000,
    };

    #[test]
    fn a_dead_child_is_explained_in_plain_words() {
        let abort = ExitStatus::from_raw(6);
        assert_eq!(
            why_it_died(
                abort,
                "memory allocation of 1073741824 bytes failed\n",
                &LIMITS
            ),
            "it needs more than 512 MB of memory to open"
        );
        assert_eq!(
            why_it_died(
                abort,
                "\nthread 'main' has overflowed its stack\nfatal runtime error: stack overflow",
                &LIMITS
            ),
            "its structure is nested too deeply"
        );
        assert_eq!(
            why_it_died(ExitStatus::from_raw(24), "", &LIMITS),
            "it needs more than 1m of processor time"
        );
        assert!(why_it_died(ExitStatus::from_raw(11), "", &LIMITS).contains("unexpectedly"));
    }
}
