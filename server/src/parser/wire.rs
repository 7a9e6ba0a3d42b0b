//! What a worker and its parser child say to each other over the child's
//! standard input and output: fixed little-endian headers, then bytes.
//!
//! Request: `DFRQ`, kind (u8), max text bytes (u64), max pages (u32), CPU
//! seconds (u32), body length (u64), max inflated bytes (u64), body. Response: `DFRS`, status (u8: 0 text, 1
//! rejected), pages (u32, `u32::MAX` for none), length (u64), then the text
//! or the rejection's message, UTF-8.

use app::dto::FailureCode;

use super::extract::{Caps, Parsed, Rejection};
use super::Kind;

pub const REQUEST_HEAD: usize = 4 + 1 + 8 + 4 + 4 + 8 + 8;
pub const RESPONSE_HEAD: usize = 4 + 1 + 4 + 8;
const REQUEST_MAGIC: &[u8; 4] = b"DFRQ";
const RESPONSE_MAGIC: &[u8; 4] = b"DFRS";
const NO_PAGES: u32 = u32::MAX;

const KINDS: [Kind; 13] = Kind::ALL;

/// One document to parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    pub caps: Caps,
    pub cpu_seconds: u32,
    pub len: u64,
}

impl Request {
    pub fn encode(&self) -> [u8; REQUEST_HEAD] {
        let mut h = [0u8; REQUEST_HEAD];
        h[..4].copy_from_slice(REQUEST_MAGIC);
        h[4] = KINDS.iter().position(|k| *k == self.kind).unwrap_or(0) as u8;
        h[5..13].copy_from_slice(&(self.caps.max_text as u64).to_le_bytes());
        h[13..17].copy_from_slice(&self.caps.max_pages.to_le_bytes());
        h[17..21].copy_from_slice(&self.cpu_seconds.to_le_bytes());
        h[21..29].copy_from_slice(&self.len.to_le_bytes());
        h[29..37].copy_from_slice(&self.caps.max_inflated.to_le_bytes());
        h
    }

    pub fn decode(h: &[u8; REQUEST_HEAD]) -> anyhow::Result<Self> {
        anyhow::ensure!(&h[..4] == REQUEST_MAGIC, "not a parse request");
        let kind = *KINDS
            .get(usize::from(h[4]))
            .ok_or_else(|| anyhow::anyhow!("unknown document kind {}", h[4]))?;
        Ok(Self {
            kind,
            caps: Caps {
                max_text: usize::try_from(u64_at(h, 5))?,
                max_pages: u32_at(h, 13),
                max_inflated: u64_at(h, 29),
            },
            cpu_seconds: u32_at(h, 17),
            len: u64_at(h, 21),
        })
    }
}

fn u32_at(h: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}

fn u64_at(h: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Header and payload of a child's answer.
pub fn encode_response(result: &Result<Parsed, Rejection>) -> Vec<u8> {
    let (status, pages, payload) = match result {
        Ok(p) => (OK, p.pages.unwrap_or(NO_PAGES), p.text.as_bytes()),
        Err(r) => (rejected(r.code), NO_PAGES, r.message.as_bytes()),
    };
    let mut out = Vec::with_capacity(RESPONSE_HEAD + payload.len());
    out.extend_from_slice(RESPONSE_MAGIC);
    out.push(status);
    out.extend_from_slice(&pages.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The status byte of a response with text; a rejection's is 1 + the
/// index of its code in `FailureCode::ALL`.
const OK: u8 = 0;

fn rejected(code: FailureCode) -> u8 {
    let at = FailureCode::ALL
        .iter()
        .position(|c| *c == code)
        .unwrap_or(0);
    u8::try_from(at + 1).unwrap_or(u8::MAX)
}

/// A response header: whether it is text (or else the rejection's code),
/// its pages, and the payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u8,
    pub pages: Option<u32>,
    pub len: u64,
}

impl ResponseHead {
    pub fn decode(h: &[u8; RESPONSE_HEAD]) -> anyhow::Result<Self> {
        anyhow::ensure!(&h[..4] == RESPONSE_MAGIC, "the parser answered garbage");
        let pages = u32_at(h, 5);
        Ok(Self {
            status: h[4],
            pages: (pages != NO_PAGES).then_some(pages),
            len: u64_at(h, 9),
        })
    }

    /// Turns the payload into the parse result.
    pub fn finish(self, payload: Vec<u8>) -> Result<Parsed, Rejection> {
        let text = String::from_utf8(payload)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        match self.status {
            OK => Ok(Parsed {
                text,
                pages: self.pages,
            }),
            // A code this side does not know (the child is another build)
            // is read as a damaged file: the text still says why.
            n => {
                let code = FailureCode::ALL.get(usize::from(n) - 1);
                Err(Rejection::new(
                    code.copied().unwrap_or(FailureCode::Damaged),
                    text,
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_responses_survive_the_round_trip() {
        let req = Request {
            kind: Kind::Html,
            caps: Caps {
                max_text: 32_000_000,
                max_pages: 10_000,
                max_inflated: 64 << 20,
            },
            cpu_seconds: 60,
            len: 12_345,
        };
        assert_eq!(Request::decode(&req.encode()).expect("decodes"), req);

        let ok = Ok(Parsed {
            text: "héllo".into(),
            pages: Some(3),
        });
        let bytes = encode_response(&ok);
        let mut head = [0u8; RESPONSE_HEAD];
        head.copy_from_slice(&bytes[..RESPONSE_HEAD]);
        let h = ResponseHead::decode(&head).expect("head");
        assert_eq!(h.len as usize, bytes.len() - RESPONSE_HEAD);
        assert_eq!(h.finish(bytes[RESPONSE_HEAD..].to_vec()), ok);

        for code in FailureCode::ALL {
            let err: Result<Parsed, Rejection> = Err(Rejection::new(code, "damaged"));
            let bytes = encode_response(&err);
            head.copy_from_slice(&bytes[..RESPONSE_HEAD]);
            let h = ResponseHead::decode(&head).expect("head");
            assert_eq!(h.finish(bytes[RESPONSE_HEAD..].to_vec()), err);
        }
        assert!(ResponseHead::decode(&[0u8; RESPONSE_HEAD]).is_err());
    }
}
