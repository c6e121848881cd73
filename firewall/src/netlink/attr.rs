//! Netlink attributes: writing them 4-byte aligned, and walking them without trusting the bytes.

use super::consts::{NLA_F_NESTED, NLA_HDRLEN, NLA_TYPE_MASK};

/// Rounds a length up to netlink's 4-byte alignment.
pub const fn align(len: usize) -> usize {
    (len + 3) & !3
}

/// Appends one attribute with its header and padding; attribute headers are host-endian.
pub fn put(buf: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = NLA_HDRLEN + data.len();
    debug_assert!(len <= u16::MAX as usize, "netlink attribute too long");
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(data);
    pad(buf);
}

/// Pads the buffer with zeroes to the next 4-byte boundary.
pub fn pad(buf: &mut Vec<u8>) {
    let padded = align(buf.len());
    buf.resize(padded, 0);
}

pub fn put_u8(buf: &mut Vec<u8>, ty: u16, v: u8) {
    put(buf, ty, &[v]);
}

/// nf_tables carries its integer attributes in network byte order.
pub fn put_be32(buf: &mut Vec<u8>, ty: u16, v: u32) {
    put(buf, ty, &v.to_be_bytes());
}

pub fn put_be64(buf: &mut Vec<u8>, ty: u16, v: u64) {
    put(buf, ty, &v.to_be_bytes());
}

/// Strings go to the kernel NUL-terminated, as `NLA_STRING` policies accept and nft sends.
pub fn put_str(buf: &mut Vec<u8>, ty: u16, s: &str) {
    let mut data = Vec::with_capacity(s.len() + 1);
    data.extend_from_slice(s.as_bytes());
    data.push(0);
    put(buf, ty, &data);
}

/// Opens a nested attribute; the returned offset is handed to [`nest_end`].
pub fn nest_start(buf: &mut Vec<u8>, ty: u16) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u16.to_ne_bytes());
    buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
    start
}

/// Closes a nested attribute by writing its final length.
pub fn nest_end(buf: &mut [u8], start: usize) {
    let len = buf.len() - start;
    debug_assert!(
        len <= u16::MAX as usize,
        "nested netlink attribute too long"
    );
    buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
}

/// One attribute read from a message: its type without the flag bits, and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub ty: u16,
    pub data: &'a [u8],
}

impl<'a> Attr<'a> {
    pub fn u8(&self) -> Option<u8> {
        (self.data.len() == 1).then(|| self.data[0])
    }

    pub fn be32(&self) -> Option<u32> {
        Some(u32::from_be_bytes(self.data.try_into().ok()?))
    }

    pub fn be64(&self) -> Option<u64> {
        Some(u64::from_be_bytes(self.data.try_into().ok()?))
    }

    /// A string attribute without its terminating NUL; non-UTF-8 bytes are replaced, since names
    /// written by other tools must never fail a listing.
    pub fn string(&self) -> String {
        let bytes = match self.data.iter().position(|&b| b == 0) {
            Some(nul) => &self.data[..nul],
            None => self.data,
        };
        String::from_utf8_lossy(bytes).into_owned()
    }

    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.data)
    }
}

/// Walks a run of attributes; a truncated or overlong attribute ends the walk and is remembered,
/// so callers can fall back to keeping raw bytes instead of failing.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl<'a> Attrs<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Attrs {
            rest: data,
            malformed: false,
        }
    }

    /// True when the walk stopped at bytes that were not a well-formed attribute.
    pub fn malformed(&self) -> bool {
        self.malformed
    }

    /// Walks everything and reports whether all of it was well formed.
    pub fn all_well_formed(data: &[u8]) -> bool {
        let mut attrs = Attrs::new(data);
        for _ in attrs.by_ref() {}
        !attrs.malformed()
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Attr<'a>;

    fn next(&mut self) -> Option<Attr<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < NLA_HDRLEN {
            self.malformed = true;
            self.rest = &[];
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let ty = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > self.rest.len() {
            self.malformed = true;
            self.rest = &[];
            return None;
        }
        let data = &self.rest[NLA_HDRLEN..len];
        // The last attribute of a message may omit its padding.
        let step = align(len).min(self.rest.len());
        self.rest = &self.rest[step..];
        Some(Attr { ty, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_to_four_bytes() {
        let mut buf = Vec::new();
        put_u8(&mut buf, 3, 0);
        assert_eq!(buf, [5, 0, 3, 0, 0, 0, 0, 0]);
        put_str(&mut buf, 1, "lo");
        assert_eq!(&buf[8..], [7, 0, 1, 0, b'l', b'o', 0, 0]);
        put_be32(&mut buf, 2, 0x0102_0304);
        assert_eq!(&buf[16..], [8, 0, 2, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn nests_carry_the_nested_flag_and_their_length() {
        let mut buf = Vec::new();
        let n = nest_start(&mut buf, 4);
        put_be32(&mut buf, 1, 7);
        nest_end(&mut buf, n);
        assert_eq!(buf, [12, 0, 4, 0x80, 8, 0, 1, 0, 0, 0, 0, 7]);
        let outer: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(outer.len(), 1);
        assert_eq!(outer[0].ty, 4);
        let inner: Vec<_> = outer[0].nested().collect();
        assert_eq!(inner[0].be32(), Some(7));
    }

    #[test]
    fn walking_reads_values_and_strings() {
        let mut buf = Vec::new();
        put_str(&mut buf, 1, "filter");
        put_be64(&mut buf, 4, 42);
        put_u8(&mut buf, 3, 1);
        let attrs: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(attrs[0].string(), "filter");
        assert_eq!(attrs[1].be64(), Some(42));
        assert_eq!(attrs[2].u8(), Some(1));
        assert_eq!(attrs[2].be32(), None);
    }

    #[test]
    fn a_truncated_attribute_stops_the_walk_and_is_reported() {
        let mut buf = Vec::new();
        put_be32(&mut buf, 1, 1);
        buf.extend_from_slice(&[40, 0, 2, 0, 1, 2]);
        let mut attrs = Attrs::new(&buf);
        assert_eq!(attrs.next().map(|a| a.ty), Some(1));
        assert!(attrs.next().is_none());
        assert!(attrs.malformed());
        assert!(!Attrs::all_well_formed(&buf));
    }

    #[test]
    fn the_last_attribute_may_lack_padding() {
        let buf = [5u8, 0, 3, 0, 1];
        let attrs: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(attrs[0].u8(), Some(1));
    }
}
