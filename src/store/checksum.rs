//! The store's checksums: CRC-32C over each journal line, chained from the line before, and a
//! sha256 line at the head of the snapshot over the rest of its bytes.
//!
//! A journal line is short (a record of a hundred bytes or so) and there are many, so it carries
//! CRC-32C (Castagnoli), written here: 8 hex digits, and a CRC of 32 bits detects every error
//! burst of up to 32 bits, so a flipped byte (or up to four adjacent ones) in a line is always
//! caught, not only with high probability. Each line's CRC is seeded with the CRC of the line
//! before it (the header's with 0), so a line dropped, repeated, moved or taken from another
//! journal fails too. The snapshot is written once per fold, and the store already digests it
//! with sha256 to name it in the journal's header: its checksum is the same digest, whole.

use std::fmt::Write as _;

/// CRC-32C's table, reflected polynomial 0x82F63B78.
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-32C of `bytes`, continued from `seed` (the CRC of what came before, 0 for nothing):
/// `crc32c(crc32c(0, a), b) == crc32c(0, a ++ b)`.
pub fn crc32c(seed: u32, bytes: &[u8]) -> u32 {
    let mut crc = !seed;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// A line's CRC as written: 8 lowercase hex digits. Compared as text, so `A` for `a` fails.
pub fn crc_text(crc: u32) -> [u8; 8] {
    let mut out = [0u8; 8];
    let s = format!("{crc:08x}");
    out.copy_from_slice(s.as_bytes());
    out
}

/// How the snapshot's checksum line begins: the first field of its JSON object.
const SEAL_START: &[u8] = b"{\n  \"checksum\": \"";
/// `sha256:` and 64 hex digits.
const DIGEST_LEN: usize = 71;
const SEAL_END: &[u8] = b"\",\n";

/// The snapshot with its checksum: `body` (JSON, an object of at least one field, its first line
/// `{` alone, as `serde_json::to_vec_pretty` and [`super::layout`] write it) with a first field
/// `"checksum"` holding the sha256 of `body` itself. The file stays JSON, readable by `jq` and by
/// tests. The store seals its snapshot with [`seal_json`]; this is the tests' way to seal bytes
/// they made.
#[cfg(test)]
pub fn seal(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0; BODY_AT];
    out.extend_from_slice(body);
    sealed(out)
}

/// `value` in the snapshot's layout ([`super::layout`]), sealed: the same bytes as [`seal`] of
/// that layout's with a newline after it, made in one buffer of `hint` bytes or so (the last
/// snapshot's size) with room left at its head for the checksum's line, rather than in a buffer
/// grown as it is written and then copied whole behind that line.
pub fn seal_json<T: serde::Serialize>(
    value: &T,
    hint: usize,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(hint + hint / 8 + BODY_AT + 4096);
    out.resize(BODY_AT, 0);
    super::layout::write(&mut out, value)?;
    out.push(b'\n');
    Ok(sealed(out))
}

/// How long the checksum's line is, the body's own `{\n` included.
const HEAD: usize = SEAL_START.len() + DIGEST_LEN + SEAL_END.len();
/// Where the body starts in a buffer being sealed: its own `{\n` is the last two bytes the
/// checksum's line takes the place of.
const BODY_AT: usize = HEAD - 2;

/// The checksum's line written over the head of `out`, whose bytes from [`BODY_AT`] on are the
/// body: the sha256 of the body, in the snapshot's first field.
fn sealed(mut out: Vec<u8>) -> Vec<u8> {
    let body = &out[BODY_AT..];
    debug_assert!(
        body.starts_with(b"{\n  \""),
        "a snapshot is an object with fields"
    );
    let digest = super::digest(body);
    out[..SEAL_START.len()].copy_from_slice(SEAL_START);
    out[SEAL_START.len()..SEAL_START.len() + DIGEST_LEN].copy_from_slice(digest.as_bytes());
    out[SEAL_START.len() + DIGEST_LEN..HEAD].copy_from_slice(SEAL_END);
    out
}

/// The checksum a snapshot's first line records (`sha256:…`), unchecked: for bytes just sealed,
/// or read and already [`unseal`]ed. `None` for a snapshot without one.
pub fn recorded(bytes: &[u8]) -> Option<&str> {
    let at = SEAL_START.len();
    bytes
        .starts_with(SEAL_START)
        .then(|| bytes.get(at..at + DIGEST_LEN))
        .flatten()
        .and_then(|d| std::str::from_utf8(d).ok())
}

/// Why a snapshot that carries a checksum does not match it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("its checksum line is damaged")]
    Damaged,
    #[error("its checksum {recorded} does not match its bytes ({computed})")]
    Mismatch { recorded: String, computed: String },
}

/// The snapshot's body as it was sealed, when `bytes` begin with a checksum line (`Ok(None)`
/// when they do not: a store of the previous format, or not one at all, for the caller to
/// judge); an error when the line is there and does not hold.
pub fn unseal(bytes: &[u8]) -> Result<Option<Vec<u8>>, SealError> {
    if !bytes.starts_with(SEAL_START) {
        return Ok(None);
    }
    let at = SEAL_START.len();
    let end = at + DIGEST_LEN;
    let recorded = bytes.get(at..end).ok_or(SealError::Damaged)?;
    if bytes.get(end..end + SEAL_END.len()) != Some(SEAL_END) {
        return Err(SealError::Damaged);
    }
    let mut body = Vec::with_capacity(bytes.len() - DIGEST_LEN - SEAL_START.len());
    body.extend_from_slice(b"{\n");
    body.extend_from_slice(&bytes[end + SEAL_END.len()..]);
    let computed = super::digest(&body);
    if computed.as_bytes() != recorded {
        let mut shown = String::new();
        for &b in recorded {
            // The recorded text may be any bytes; said escaped.
            let _ = write!(shown, "{}", std::ascii::escape_default(b));
        }
        return Err(SealError::Mismatch {
            recorded: shown,
            computed,
        });
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value_and_continues() {
        // The check value of CRC-32C (RFC 3720, B.4): a wrong table or reflection fails here.
        assert_eq!(crc32c(0, b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(crc32c(0, b"12345"), b"6789"), 0xE306_9283);
        assert_eq!(&crc_text(0xE306_9283), b"e3069283");
    }

    #[test]
    fn a_sealed_snapshot_is_json_and_unseals_to_its_body() {
        let body = b"{\n  \"version\": 3,\n  \"taken\": []\n}\n";
        let sealed = seal(body);
        let v: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        assert_eq!(v["checksum"], super::super::digest(body));
        assert_eq!(unseal(&sealed).unwrap().as_deref(), Some(&body[..]));
        assert_eq!(unseal(body).unwrap(), None);
        let mut bad = sealed.clone();
        let last = bad.len() - 3;
        bad[last] ^= 1;
        assert!(matches!(unseal(&bad), Err(SealError::Mismatch { .. })));
        let mut bad = sealed;
        bad[SEAL_START.len() + DIGEST_LEN] = b' ';
        assert_eq!(unseal(&bad), Err(SealError::Damaged));
    }

    #[test]
    fn a_value_sealed_in_one_buffer_is_sealed_in_the_snapshot_layout() {
        let value = serde_json::json!({"version": 4, "taken": [{"id": "a"}, "b"], "node": "n1"});
        let mut body = Vec::new();
        super::super::layout::write(&mut body, &value).unwrap();
        body.push(b'\n');
        // A hint too small, none, and one to spare: the bytes are the same.
        for hint in [0, 10, body.len(), 1 << 16] {
            assert_eq!(seal_json(&value, hint).unwrap(), seal(&body), "hint {hint}");
        }
    }
}
