//! What a worker and its parser child say to each other over the child's
//! standard input and output: fixed little-endian headers, then bytes.
//!
//! Request: `DFRQ`, kind (u8), max text bytes (u64), max pages (u32), CPU
//! seconds (u32), body length (u64), max inflated bytes (u64), OCR's max
//! pixels (u64) and max pages (u32), body.
//!
//! Answer: any number of progress frames, `DFPG`, pages done (u32), of
//! (u32); then the response, `DFRS`, status (u8: 0 text, else 1 + the
//! index of the rejection's code), pages (u32, `u32::MAX` for none), length
//! (u64), OCR ranges (u32), then the text or the rejection's message,
//! UTF-8, then each range of pages recognised by OCR as first and last
//! page (u32 each).

use app::dto::FailureCode;

use super::extract::{Caps, Parsed, Progress, Rejection};
use super::Kind;

pub const REQUEST_HEAD: usize = 4 + 1 + 8 + 4 + 4 + 8 + 8 + 8 + 4;
/// Every frame of the answer starts with its magic.
pub const MAGIC: usize = 4;
/// A response's header after its magic.
pub const RESPONSE_HEAD: usize = 1 + 4 + 8 + 4;
/// A progress frame after its magic.
pub const PROGRESS: usize = 4 + 4;
const REQUEST_MAGIC: &[u8; 4] = b"DFRQ";
pub const RESPONSE_MAGIC: &[u8; 4] = b"DFRS";
pub const PROGRESS_MAGIC: &[u8; 4] = b"DFPG";
const NO_PAGES: u32 = u32::MAX;

const KINDS: [Kind; 18] = Kind::ALL;

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
        h[37..45].copy_from_slice(&self.caps.ocr_max_pixels.to_le_bytes());
        h[45..49].copy_from_slice(&self.caps.ocr_max_pages.to_le_bytes());
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
                ocr_max_pixels: u64_at(h, 37),
                ocr_max_pages: u32_at(h, 45),
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

/// A progress frame: `done` pages of `total`.
pub fn encode_progress(p: Progress) -> [u8; MAGIC + PROGRESS] {
    let mut f = [0u8; MAGIC + PROGRESS];
    f[..4].copy_from_slice(PROGRESS_MAGIC);
    f[4..8].copy_from_slice(&p.done.to_le_bytes());
    f[8..12].copy_from_slice(&p.total.to_le_bytes());
    f
}

/// A progress frame's fields (after its magic).
pub fn decode_progress(f: &[u8; PROGRESS]) -> Progress {
    Progress {
        done: u32_at(f, 0),
        total: u32_at(f, 4),
    }
}

/// Header and payload of a child's answer.
pub fn encode_response(result: &Result<Parsed, Rejection>) -> Vec<u8> {
    let (status, pages, payload, ocr) = match result {
        Ok(p) => (
            OK,
            p.pages.unwrap_or(NO_PAGES),
            p.text.as_bytes(),
            &p.ocr[..],
        ),
        Err(r) => (rejected(r.code), NO_PAGES, r.message.as_bytes(), &[][..]),
    };
    let mut out = Vec::with_capacity(MAGIC + RESPONSE_HEAD + payload.len() + ocr.len() * 8);
    out.extend_from_slice(RESPONSE_MAGIC);
    out.push(status);
    out.extend_from_slice(&pages.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&u32::try_from(ocr.len()).unwrap_or(0).to_le_bytes());
    out.extend_from_slice(payload);
    for (first, last) in ocr {
        out.extend_from_slice(&first.to_le_bytes());
        out.extend_from_slice(&last.to_le_bytes());
    }
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

/// A response header (after its magic): whether it is text (or else the
/// rejection's code), its pages, the text's length and the count of OCR
/// ranges after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u8,
    pub pages: Option<u32>,
    pub len: u64,
    pub ocr_ranges: u32,
}

impl ResponseHead {
    pub fn decode(h: &[u8; RESPONSE_HEAD]) -> Self {
        let pages = u32_at(h, 1);
        Self {
            status: h[0],
            pages: (pages != NO_PAGES).then_some(pages),
            len: u64_at(h, 5),
            ocr_ranges: u32_at(h, 13),
        }
    }

    /// The bytes after the header: the text, then the OCR ranges.
    pub fn payload_len(&self) -> u64 {
        self.len + u64::from(self.ocr_ranges) * 8
    }

    /// Turns the payload into the parse result.
    pub fn finish(self, mut payload: Vec<u8>) -> Result<Parsed, Rejection> {
        let at = usize::try_from(self.len)
            .unwrap_or(usize::MAX)
            .min(payload.len());
        let ocr = payload[at..]
            .chunks_exact(8)
            .map(|r| (u32_at(r, 0), u32_at(r, 4)))
            .collect();
        payload.truncate(at);
        let text = String::from_utf8(payload)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        match self.status {
            OK => Ok(Parsed {
                text,
                pages: self.pages,
                ocr,
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
                ocr_max_pixels: 40_000_000,
                ocr_max_pages: 1_000,
            },
            cpu_seconds: 60,
            len: 12_345,
        };
        assert_eq!(Request::decode(&req.encode()).expect("decodes"), req);

        let ok = Ok(Parsed {
            text: "héllo".into(),
            pages: Some(9),
            ocr: vec![(1, 3), (7, 9)],
        });
        let round_trip = |result: &Result<Parsed, Rejection>| {
            let bytes = encode_response(result);
            assert_eq!(&bytes[..MAGIC], RESPONSE_MAGIC);
            let mut head = [0u8; RESPONSE_HEAD];
            head.copy_from_slice(&bytes[MAGIC..MAGIC + RESPONSE_HEAD]);
            let h = ResponseHead::decode(&head);
            let payload = &bytes[MAGIC + RESPONSE_HEAD..];
            assert_eq!(h.payload_len() as usize, payload.len());
            h.finish(payload.to_vec())
        };
        assert_eq!(round_trip(&ok), ok);
        for code in FailureCode::ALL {
            let err: Result<Parsed, Rejection> = Err(Rejection::new(code, "damaged"));
            assert_eq!(round_trip(&err), err);
        }

        let p = Progress {
            done: 120,
            total: 300,
        };
        let frame = encode_progress(p);
        assert_eq!(&frame[..MAGIC], PROGRESS_MAGIC);
        let mut f = [0u8; PROGRESS];
        f.copy_from_slice(&frame[MAGIC..]);
        assert_eq!(decode_progress(&f), p);
    }
}
