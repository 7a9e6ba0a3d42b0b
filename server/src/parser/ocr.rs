//! Text from pictures of text: PDF pages without a text layer, and uploaded
//! PNG, JPEG and TIFF images, recognised by Tesseract. A PDF page is first
//! drawn by poppler's `pdftoppm`, at a resolution that keeps it under the
//! pixel cap; an image over the cap, or a TIFF with more pages than one
//! document may have recognised, is refused from its header, before a pixel
//! is decoded.
//!
//! Both programs run as processes of the parser child, so they inherit its
//! address-space and CPU limits, and its process group, which the worker
//! kills with the child when a deadline passes.

use std::{
    io::{Read, Write},
    process::{Command, Stdio},
};

use app::dto::FailureCode;

use super::{
    extract::{Caps, Rejection},
    Kind,
};

/// Tesseract's languages when none are configured.
pub const DEFAULT_LANGUAGES: &str = "eng";
/// The resolution a page is drawn at when the pixel cap allows it: what
/// Tesseract reads best.
const BEST_DPI: f64 = 300.0;
/// Below this a page's letters are too small to recognise.
const LEAST_DPI: f64 = 50.0;

/// How this parser child recognises text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ocr {
    /// Tesseract's language list, `+`-joined ("eng", "eng+deu").
    pub languages: String,
}

impl Default for Ocr {
    fn default() -> Self {
        Self {
            languages: DEFAULT_LANGUAGES.into(),
        }
    }
}

/// Whether `languages` is a list Tesseract takes: names made of letters,
/// digits and `_`, joined by `+`.
pub fn valid_languages(languages: &str) -> bool {
    !languages.is_empty()
        && languages.split('+').all(|l| {
            !l.is_empty()
                && l.len() <= 32
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// What went wrong running one of the OCR programs.
#[derive(Debug)]
enum RunError {
    /// The program is not installed.
    Missing(&'static str),
    /// It wrote more than it may.
    TooMuchOutput,
    /// It failed or was killed.
    Failed(String),
}

impl Ocr {
    /// The text of page `page` (1-based) of `pdf`, `size` being the page's
    /// width and height in points.
    pub fn pdf_page(
        &self,
        pdf: &[u8],
        page: u32,
        size: (f64, f64),
        caps: Caps,
    ) -> Result<String, Rejection> {
        let dpi = dpi_for(size, caps.ocr_max_pixels);
        if dpi < LEAST_DPI {
            return Err(Rejection::new(
                FailureCode::TooLarge,
                format!(
                    "page {page} is a scanned image too large to recognise ({:.0} × {:.0} cm)",
                    size.0 / 72.0 * 2.54,
                    size.1 / 72.0 * 2.54
                ),
            ));
        }
        let (dpi_arg, page_arg) = (format!("{dpi:.2}"), page.to_string());
        // A little over the cap: pdftoppm rounds the page's size up.
        let max_image = caps.ocr_max_pixels.saturating_mul(11) / 10 + 64;
        let image = run(
            "pdftoppm",
            &[
                "-f", &page_arg, "-l", &page_arg, "-r", &dpi_arg, "-gray", "-",
            ],
            pdf,
            usize::try_from(max_image).unwrap_or(usize::MAX),
        )
        .map_err(|e| failure(e, &format!("page {page} could not be drawn")))?;
        let text = self.recognise(&image, Some(dpi), caps)?;
        Ok(text.replace('\u{c}', "\n"))
    }

    /// The text of an uploaded image, a page per TIFF page, and its pages.
    pub fn image(&self, kind: Kind, bytes: &[u8], caps: Caps) -> Result<(String, u32), Rejection> {
        let pages = image_pages(kind, bytes, caps)?;
        let text = self.recognise(bytes, None, caps)?;
        // Tesseract ends each page with a form feed: docflow's page break.
        let text = text
            .trim_end_matches(['\u{c}', '\n', ' '])
            .replace('\u{c}', "\n\n\u{c}");
        Ok((text, pages))
    }

    fn recognise(&self, image: &[u8], dpi: Option<f64>, caps: Caps) -> Result<String, Rejection> {
        let dpi = dpi.map(|d| format!("{:.0}", d.round()));
        let mut args = vec!["stdin", "stdout", "-l", &self.languages, "--psm", "3"];
        if let Some(dpi) = &dpi {
            args.extend(["--dpi", dpi]);
        }
        let out = run("tesseract", &args, image, caps.max_text.saturating_add(1))
            .map_err(|e| failure(e, "the text could not be recognised"))?;
        if out.len() > caps.max_text {
            return Err(super::extract::too_much_text(caps.max_text));
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// The resolution at which a page of `size` points stays within
/// `max_pixels`, at most [`BEST_DPI`].
pub fn dpi_for((width, height): (f64, f64), max_pixels: u64) -> f64 {
    let area = width.abs() * height.abs();
    if !area.is_finite() || area < 1.0 {
        return BEST_DPI;
    }
    // Pixels at d dpi: area × (d / 72)².
    let fits = 72.0 * (max_pixels as f64 / area).sqrt();
    fits.min(BEST_DPI)
}

/// Checks an image's declared size (each page of a TIFF) against the caps
/// and returns its pages.
pub fn image_pages(kind: Kind, bytes: &[u8], caps: Caps) -> Result<u32, Rejection> {
    let check = |width: u64, height: u64, page: u32| {
        if width.saturating_mul(height) > caps.ocr_max_pixels {
            let which = if page > 1 {
                format!("page {page} of the image")
            } else {
                "the image".into()
            };
            return Err(Rejection::new(
                FailureCode::TooLarge,
                format!(
                    "{which} is {width} × {height} pixels; docflow recognises images of at most {} megapixels",
                    caps.ocr_max_pixels / 1_000_000
                ),
            ));
        }
        Ok(())
    };
    let damaged = |e: &dyn std::fmt::Display| {
        Rejection::new(
            FailureCode::Damaged,
            format!("the {} is damaged and could not be read ({e})", kind.noun()),
        )
    };
    if kind != Kind::Tiff {
        let size = imagesize::blob_size(bytes).map_err(|e| damaged(&e))?;
        check(size.width as u64, size.height as u64, 1)?;
        return Ok(1);
    }
    let mut tiff =
        tiff::decoder::Decoder::new(std::io::Cursor::new(bytes)).map_err(|e| damaged(&e))?;
    let mut pages = 0u32;
    loop {
        pages += 1;
        if pages > caps.ocr_max_pages {
            return Err(Rejection::new(
                FailureCode::TooLarge,
                format!(
                    "the TIFF has more than {} pages; docflow recognises at most {} pages of one document",
                    caps.ocr_max_pages, caps.ocr_max_pages
                ),
            ));
        }
        let (w, h) = tiff.dimensions().map_err(|e| damaged(&e))?;
        check(u64::from(w), u64::from(h), pages)?;
        if !tiff.more_images() {
            return Ok(pages);
        }
        tiff.next_image().map_err(|e| damaged(&e))?;
    }
}

/// The user's words for a program that could not do its part.
fn failure(e: RunError, what: &str) -> Rejection {
    match e {
        RunError::Missing(program) => Rejection::new(
            FailureCode::NoText,
            format!(
                "{what}: it is a scanned image, and this worker has no OCR ({program} is not installed)"
            ),
        ),
        RunError::TooMuchOutput => Rejection::new(
            FailureCode::TooLarge,
            format!("{what}: it is larger than docflow reads"),
        ),
        RunError::Failed(why) => Rejection::new(FailureCode::Damaged, format!("{what} ({why})")),
    }
}

/// Runs `program` with `input` on its standard input; its standard output,
/// refused past `max_output` bytes.
fn run(
    program: &'static str,
    args: &[&str],
    input: &[u8],
    max_output: usize,
) -> Result<Vec<u8>, RunError> {
    let mut child = Command::new(program)
        .args(args)
        // One thread: the parser children already use every core.
        .env("OMP_THREAD_LIMIT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RunError::Missing(program),
            _ => RunError::Failed(format!("{program} could not be started: {e}")),
        })?;
    let (Some(mut stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        return Err(RunError::Failed(format!("{program} has no pipes")));
    };
    let read = std::thread::scope(|s| {
        // The input is written beside the reading: a program may answer
        // before it has read everything.
        s.spawn(move || {
            let _ = stdin.write_all(input);
        });
        let mut out = Vec::new();
        let limit = u64::try_from(max_output).unwrap_or(u64::MAX);
        let read = (&mut stdout)
            .take(limit.saturating_add(1))
            .read_to_end(&mut out);
        if read.is_err() || out.len() > max_output {
            // Stops the program, which also ends the writer's pipe.
            let _ = child.kill();
        }
        read.map(|_| out)
    });
    let status = child
        .wait()
        .map_err(|e| RunError::Failed(format!("{program}: {e}")))?;
    let out = read.map_err(|e| RunError::Failed(format!("{program}: {e}")))?;
    if out.len() > max_output {
        return Err(RunError::TooMuchOutput);
    }
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        const SIGXCPU: i32 = 24;
        return Err(RunError::Failed(match status.signal() {
            Some(SIGXCPU) => format!("{program} ran out of processor time"),
            Some(6 | 9 | 11) => format!("{program} ran out of memory or crashed"),
            _ => format!("{program} {status}"),
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: Caps = Caps {
        max_text: 1 << 20,
        max_pages: 100,
        max_inflated: 1 << 20,
        ocr_max_pixels: 40_000_000,
        ocr_max_pages: 10,
    };

    #[test]
    fn a_page_is_drawn_at_300_dpi_unless_that_passes_the_pixel_cap() {
        let a4 = (595.0, 842.0);
        assert_eq!(dpi_for(a4, 40_000_000), 300.0);
        // 10 × 10 m: drawn smaller, never over the cap.
        let huge = (28_346.0, 28_346.0);
        let dpi = dpi_for(huge, 40_000_000);
        let pixels = (huge.0 * dpi / 72.0) * (huge.1 * dpi / 72.0);
        assert!(pixels <= 40_000_000.0 * 1.0001, "{pixels}");
        assert!(dpi < LEAST_DPI);
        assert_eq!(dpi_for((0.0, 0.0), 1), BEST_DPI);
    }

    #[test]
    fn languages_are_tesseract_names_joined_by_plus() {
        assert!(valid_languages("eng"));
        assert!(valid_languages("eng+deu+chi_sim"));
        for bad in ["", "eng+", "../eng", "eng deu", "-l"] {
            assert!(!valid_languages(bad), "{bad}");
        }
    }

    /// A PNG header declaring `w` × `h` (no pixels: they are never read).
    fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0, 0]);
        b
    }

    #[test]
    fn an_image_over_the_pixel_cap_is_refused_from_its_header() {
        assert_eq!(image_pages(Kind::Png, &png_header(2000, 3000), CAPS), Ok(1));
        let err = image_pages(Kind::Png, &png_header(100_000, 100_000), CAPS).expect_err("cap");
        assert_eq!(err.code, FailureCode::TooLarge);
        assert!(
            err.message.contains("100000 × 100000 pixels") && err.message.contains("40 megapixels"),
            "{}",
            err.message
        );
        let err = image_pages(Kind::Jpeg, b"\xff\xd8\xff garbage", CAPS).expect_err("damaged");
        assert_eq!(err.code, FailureCode::Damaged);
    }
}
