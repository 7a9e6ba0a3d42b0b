//! `Docflow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` over
//! `"<t>.<raw body>"`, keyed by the endpoint's secret (its UTF-8 bytes,
//! `whsec_` included), in the style of Stripe's. A receiver recomputes the
//! HMAC over the raw body it received, compares in constant time, and
//! refuses a timestamp more than [`TOLERANCE_SECS`] from its own clock, so
//! a captured delivery cannot be replayed later.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a signature's timestamp may be from the receiver's clock.
pub const TOLERANCE_SECS: i64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// A new endpoint secret: `whsec_` and 32 random bytes in hex.
pub fn new_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("whsec_{}", hex::encode(bytes))
}

fn mac(secret: &str, t: i64, body: &[u8]) -> HmacSha256 {
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value for `body` sent at unix time `t`.
pub fn header(secret: &str, t: i64, body: &[u8]) -> String {
    let tag = mac(secret, t, body).finalize().into_bytes();
    format!("t={t},v1={}", hex::encode(tag))
}

/// Why a signature was refused; [`Refused::code`] is what the README
/// documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `t=` or no `v1=` in the header.
    Malformed,
    /// The timestamp is more than the tolerance from now.
    Stale,
    /// No `v1` matches the body: tampered, or another secret.
    Mismatch,
}

impl Refused {
    pub fn code(self) -> &'static str {
        match self {
            Refused::Malformed => "signature_malformed",
            Refused::Stale => "signature_expired",
            Refused::Mismatch => "signature_mismatch",
        }
    }
}

/// Verifies `header` for `body` at unix time `now`, as a receiver does.
pub fn verify(secret: &str, header: &str, body: &[u8], now: i64) -> Result<(), Refused> {
    let mut t = None;
    let mut tags = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => tags.extend(hex::decode(v).ok()),
            _ => {}
        }
    }
    let t = t.ok_or(Refused::Malformed)?;
    if tags.is_empty() {
        return Err(Refused::Malformed);
    }
    if (now - t).abs() > TOLERANCE_SECS {
        return Err(Refused::Stale);
    }
    let expected = mac(secret, t, body);
    if tags
        .iter()
        .any(|tag| expected.clone().verify_slice(tag).is_ok())
    {
        Ok(())
    } else {
        Err(Refused::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_the_hmac_sha256_of_the_timestamp_and_body() {
        // Computed independently: Python's
        // hmac.new(b"whsec_x", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            header("whsec_x", 1_700_000_000, br#"{"a":1}"#),
            "t=1700000000,v1=b3438763ab46d9634b9844c8722818eaf523f803db1327484c6067462a5fd6d1"
        );
    }

    #[test]
    fn verification_refuses_a_tampered_body_an_old_timestamp_and_a_bad_header() {
        let secret = new_secret();
        assert!(secret.starts_with("whsec_") && secret.len() == 6 + 64);
        let now = 1_800_000_000;
        let body = br#"{"id":"e1","type":"job.done"}"#;
        let h = header(&secret, now, body);
        assert_eq!(verify(&secret, &h, body, now + 10), Ok(()));
        assert_eq!(
            verify(&secret, &h, br#"{"id":"e1","type":"job.failed"}"#, now),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            verify(&secret, &h, body, now + TOLERANCE_SECS + 1),
            Err(Refused::Stale)
        );
        assert_eq!(verify("whsec_other", &h, body, now), Err(Refused::Mismatch));
        assert_eq!(
            verify(&secret, "v1=abcd", body, now),
            Err(Refused::Malformed)
        );
        assert_eq!(verify(&secret, "t=1", body, now), Err(Refused::Malformed));
        // A second v1 (an old secret during rotation) may be present.
        let both = format!("{h},v1={}", "00".repeat(32));
        assert_eq!(verify(&secret, &both, body, now), Ok(()));
        assert_eq!(Refused::Stale.code(), "signature_expired");
    }
}
