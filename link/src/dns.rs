//! The broker's host name checked as a DNS name before it is asked of anyone (the token's and
//! the resolver's check), and, for the resolver's tests, the answers their nameservers give.
//! Queries and answers themselves are hickory's (`resolve.rs`).

/// Why a host name is not a DNS name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("{0:?} is not a host name of 1 to 253 characters")]
    Length(String),
    #[error("{name:?} is not a host name (label {label:?}: 1 to 63 of a-z, 0-9, '-', '_')")]
    Label { name: String, label: String },
}

/// Checks a host name as a DNS name: at most 253 characters, labels of 1 to 63 letters, digits,
/// `-` or `_`, not starting or ending with `-` (a trailing dot is allowed).
pub fn check_name(name: &str) -> Result<(), BadName> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() || bare.len() > 253 {
        return Err(BadName::Length(name.to_string()));
    }
    for label in bare.split('.') {
        let ok_chars = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if label.is_empty()
            || label.len() > 63
            || !ok_chars
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(BadName::Label {
                name: name.to_string(),
                label: label.to_string(),
            });
        }
    }
    Ok(())
}

/// An answer to `query` (a query as a stub resolver writes it: one question, no other records)
/// with `rcode`, the truncation bit when `truncated`, and `records`: each owner name with an
/// address (an A or AAAA record) or a CNAME target. Names are written whole, uncompressed.
#[cfg(test)]
pub fn encode_answer(
    query: &[u8],
    rcode: u8,
    truncated: bool,
    records: &[(&str, Result<std::net::IpAddr, &str>)],
) -> Vec<u8> {
    use std::net::IpAddr;
    fn put_name(out: &mut Vec<u8>, name: &str) {
        let bare = name.strip_suffix('.').unwrap_or(name);
        for label in bare.split('.') {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
    }
    let mut out = query[..2].to_vec();
    // The response bit, the query's recursion-desired bit, recursion available, the rcode.
    let flags: u16 = 0x8180 | u16::from(rcode & 0x0f) | if truncated { 0x0200 } else { 0 };
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1]);
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&query[12..]);
    for (owner, value) in records {
        put_name(&mut out, owner);
        let (rtype, data) = match value {
            Ok(IpAddr::V4(a)) => (1u16, a.octets().to_vec()),
            Ok(IpAddr::V6(a)) => (28u16, a.octets().to_vec()),
            Err(target) => {
                let mut d = Vec::new();
                put_name(&mut d, target);
                (5u16, d)
            }
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&300u32.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_checked() {
        for ok in [
            "broker",
            "broker.mesh.lab",
            "b-1.example.",
            "_srv.x",
            "a.b.c.d9",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "a..b",
            "-a.b",
            "a-.b",
            "bad_name!",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&["abc"; 70].join(".")).is_err(), "over 253");
    }
}
