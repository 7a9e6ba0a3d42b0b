//! E-mail (`.eml`, RFC 5322 with MIME), read with `mail-parser`: the
//! subject, sender, recipients and date as a few lines, the message's text
//! (an HTML-only message as its text), then each text attachment under its
//! name, and a forwarded message's text the same way, one level deep.

use app::dto::FailureCode;
use mail_parser::{Message, MessageParser, MimeHeaders};

use super::extract::{too_much_text, Rejection};

/// Forwarded messages read inside a message: the text of a message
/// attached to the message, not further.
const NESTED: usize = 1;

/// The text of the message in `bytes`, at most `max_text` bytes.
pub fn text(bytes: &[u8], max_text: usize) -> Result<String, Rejection> {
    let message = MessageParser::default().parse(bytes).ok_or_else(|| {
        Rejection::new(
            FailureCode::Damaged,
            "the e-mail is damaged: it has no header",
        )
    })?;
    let mut out = Out {
        text: String::new(),
        max_text,
    };
    message_text(&message, &mut out, 0)?;
    Ok(out.text)
}

/// Text written within its cap.
struct Out {
    text: String,
    max_text: usize,
}

impl Out {
    fn push(&mut self, s: &str) -> Result<(), Rejection> {
        if self.text.len() + s.len() > self.max_text {
            return Err(too_much_text(self.max_text));
        }
        self.text.push_str(s);
        Ok(())
    }

    fn line(&mut self, label: &str, value: Option<String>) -> Result<(), Rejection> {
        match value.filter(|v| !v.trim().is_empty()) {
            Some(v) => self.push(&format!("{label}: {}\n", v.trim())),
            None => Ok(()),
        }
    }
}

fn message_text(message: &Message<'_>, out: &mut Out, depth: usize) -> Result<(), Rejection> {
    let people = |a: Option<&mail_parser::Address<'_>>| {
        a.map(|a| {
            a.iter()
                .map(|p| match (p.name(), p.address()) {
                    (Some(n), Some(e)) => format!("{n} <{e}>"),
                    (Some(n), None) => n.to_string(),
                    (None, Some(e)) => e.to_string(),
                    (None, None) => String::new(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
    };
    out.line("Subject", message.subject().map(str::to_string))?;
    out.line("From", people(message.from()))?;
    out.line("To", people(message.to()))?;
    out.line("Date", message.date().map(|d| d.to_rfc3339()))?;
    out.push("\n")?;
    for i in 0..message.text_body_count() {
        if let Some(body) = message.body_text(i) {
            out.push(body.trim())?;
            out.push("\n\n")?;
        }
    }
    for part in message.attachments() {
        let name = part.attachment_name().unwrap_or("unnamed");
        if let Some(inner) = part.message() {
            if depth < NESTED {
                out.push(&format!("Forwarded message ({name}):\n"))?;
                message_text(inner, out, depth + 1)?;
            }
        } else if part.is_text() {
            let body = if part.is_text_html() {
                nanohtml2text::html2text(part.text_contents().unwrap_or_default())
            } else {
                part.text_contents().unwrap_or_default().to_string()
            };
            out.push(&format!("Attachment {name}:\n"))?;
            out.push(body.trim())?;
            out.push("\n\n")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIL: &str = "From: Ada Lovelace <ada@example.org>\r
To: Charles Babbage <charles@example.org>\r
Subject: The engine's notes\r
Date: Tue, 1 Dec 2026 10:00:00 +0000\r
MIME-Version: 1.0\r
Content-Type: multipart/mixed; boundary=\"b1\"\r
\r
--b1\r
Content-Type: text/plain; charset=utf-8\r
\r
Please find the table of Bernoulli numbers attached.\r
--b1\r
Content-Type: text/csv; name=\"bernoulli.csv\"\r
Content-Disposition: attachment; filename=\"bernoulli.csv\"\r
Content-Transfer-Encoding: base64\r
\r
bixCX24KMSwtMS8yCg==\r
--b1\r
Content-Type: image/png; name=\"portrait.png\"\r
Content-Disposition: attachment; filename=\"portrait.png\"\r
Content-Transfer-Encoding: base64\r
\r
iVBORw0KGgo=\r
--b1--\r
";

    #[test]
    fn a_message_is_its_headers_its_text_and_its_text_attachments() {
        let text = text(MAIL.as_bytes(), 1 << 20).expect("readable");
        assert!(text.starts_with("Subject: The engine's notes\nFrom: Ada Lovelace <ada@example.org>\nTo: Charles Babbage <charles@example.org>\nDate: 2026-12-01T10:00:00Z\n"), "{text}");
        assert!(
            text.contains("Please find the table of Bernoulli numbers attached."),
            "{text}"
        );
        assert!(
            text.contains("Attachment bernoulli.csv:\nn,B_n\n1,-1/2"),
            "{text}"
        );
        assert!(!text.contains("portrait"), "no binary attachment: {text}");
    }

    #[test]
    fn a_message_past_the_text_cap_is_refused_and_garbage_is_damaged() {
        let err = text(MAIL.as_bytes(), 100).expect_err("cap");
        assert_eq!(err.code, FailureCode::TooLarge);
        assert_eq!(
            text(b"", 1 << 20).expect_err("empty").code,
            FailureCode::Damaged
        );
    }
}
