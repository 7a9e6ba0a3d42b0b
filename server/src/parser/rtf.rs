//! Rich Text Format (`.rtf`), read with `rtf-parser-tt`: the body's text in
//! the code page the document declares (or UTF-8), with `\uN` characters,
//! table cells separated by tabs and rows by lines, then footnotes; and
//! the title from the document's information group, as the first line.
//! The reader keeps its groups on a stack of its own, so a document nested
//! 100,000 groups deep is read, not a stack overflow.

use app::dto::FailureCode;
use rtf_parser_tt::RtfDocument;

use super::extract::{too_much_text, Rejection};

/// The text of the RTF document in `bytes`, at most `max_text` bytes.
pub fn text(bytes: &[u8], max_text: usize) -> Result<String, Rejection> {
    let document = RtfDocument::from_bytes(bytes).map_err(|e| {
        Rejection::new(
            FailureCode::Damaged,
            format!("the RTF document is damaged: {e}"),
        )
    })?;
    let mut text = String::new();
    if let Some(title) = document.info.title.as_deref().map(str::trim) {
        if !title.is_empty() {
            text.push_str(title);
            text.push('\n');
        }
    }
    text.push_str(&document.get_text());
    if text.len() > max_text {
        return Err(too_much_text(max_text));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_tables_footnotes_and_code_page_characters_are_read() {
        let rtf = br"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\froman Times;}}{\info{\title Harbour log}}
{\pard Cr\'e8me br\u251?l\'e9e at the quay.\par}
{\pard The second paragraph{\footnote\pard\plain A footnote about seals.}.\par}
\trowd\cellx2000\cellx4000 Region\cell North\cell\row
\trowd\cellx2000\cellx4000 Q1\cell 1200\cell\row
}";
        let text = text(rtf, 1 << 20).expect("read");
        assert_eq!(
            text,
            "Harbour log\nCrème brûlée at the quay.\nThe second paragraph.\n\
             Region\tNorth\nQ1\t1200\nA footnote about seals."
        );
    }

    #[test]
    fn a_document_nested_200_000_groups_deep_is_read() {
        let deep = format!(
            "{{\\rtf1 {}deep{}}}",
            "{".repeat(200_000),
            "}".repeat(200_000)
        );
        assert_eq!(text(deep.as_bytes(), 1 << 20).expect("read"), "deep");
    }

    #[test]
    fn damaged_and_oversized_documents_are_rejected_with_their_reason() {
        let unclosed = text(br"{\rtf1 {{{ words", 1 << 20).expect_err("unclosed");
        assert_eq!(unclosed.code, FailureCode::Damaged);
        assert!(
            unclosed
                .message
                .starts_with("the RTF document is damaged: "),
            "{}",
            unclosed.message
        );
        let bad_escape = text(br"{\rtf1 \'zz}", 1 << 20).expect_err("bad escape");
        assert_eq!(bad_escape.code, FailureCode::Damaged);
        let long = format!("{{\\rtf1 {}}}", "word ".repeat(1_000));
        let too_long = text(long.as_bytes(), 1_000).expect_err("too long");
        assert_eq!(too_long.code, FailureCode::TooLarge, "{}", too_long.message);
    }
}
