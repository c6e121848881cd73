//! Sets of source addresses of one family as sorted, disjoint, inclusive intervals: the one
//! dimension of a connection the evaluator keeps symbolic, so a ban splits the sources instead
//! of making the answer "it depends".

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The family the addresses are of; fixes the width of the address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fam {
    V4,
    V6,
}

impl Fam {
    /// The largest address of the family.
    pub fn max(self) -> u128 {
        match self {
            Fam::V4 => u32::MAX as u128,
            Fam::V6 => u128::MAX,
        }
    }

    /// The address length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            Fam::V4 => 4,
            Fam::V6 => 16,
        }
    }

    /// The family an address is of.
    pub fn of(a: IpAddr) -> Fam {
        match a {
            IpAddr::V4(_) => Fam::V4,
            IpAddr::V6(_) => Fam::V6,
        }
    }

    /// "ipv4" or "ipv6".
    pub fn name(self) -> &'static str {
        match self {
            Fam::V4 => "ipv4",
            Fam::V6 => "ipv6",
        }
    }
}

/// A set of addresses of one family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Addrs {
    pub fam: Fam,
    /// Sorted, disjoint, not adjacent, inclusive.
    spans: Vec<(u128, u128)>,
}

/// An address as a number in its family's space.
pub fn num(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
    }
}

/// The number back as an address of `fam`.
pub fn addr(fam: Fam, n: u128) -> IpAddr {
    match fam {
        Fam::V4 => IpAddr::V4(Ipv4Addr::from(n as u32)),
        Fam::V6 => IpAddr::V6(Ipv6Addr::from(n)),
    }
}

/// Big-endian bytes (at most the family's length) as a number in its space: the key of a set
/// element or a comparison's data.
pub fn from_be(bytes: &[u8]) -> u128 {
    bytes.iter().fold(0u128, |n, b| (n << 8) | u128::from(*b))
}

impl Addrs {
    pub fn none(fam: Fam) -> Addrs {
        Addrs {
            fam,
            spans: Vec::new(),
        }
    }

    pub fn all(fam: Fam) -> Addrs {
        Addrs {
            fam,
            spans: vec![(0, fam.max())],
        }
    }

    /// The addresses from `lo` to `hi`, both included (empty when `lo > hi`).
    pub fn range(fam: Fam, lo: u128, hi: u128) -> Addrs {
        let hi = hi.min(fam.max());
        let mut a = Addrs::none(fam);
        if lo <= hi {
            a.spans.push((lo, hi));
        }
        a
    }

    /// A network: `base/prefix` (bits beyond the prefix ignored).
    pub fn cidr(fam: Fam, base: u128, prefix: u32) -> Addrs {
        let bits = fam.len() as u32 * 8;
        let prefix = prefix.min(bits);
        let host = if prefix == bits {
            0
        } else {
            fam.max() >> prefix
        };
        let lo = base & !host & fam.max();
        Addrs::range(fam, lo, lo | host)
    }

    pub fn one(a: IpAddr) -> Addrs {
        let n = num(a);
        Addrs::range(Fam::of(a), n, n)
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn is_all(&self) -> bool {
        self.spans == [(0, self.fam.max())]
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        if Fam::of(a) != self.fam {
            return false;
        }
        let n = num(a);
        self.spans.iter().any(|&(lo, hi)| lo <= n && n <= hi)
    }

    /// The spans, sorted and disjoint.
    pub fn spans(&self) -> &[(u128, u128)] {
        &self.spans
    }

    pub fn union(&self, other: &Addrs) -> Addrs {
        let all: Vec<(u128, u128)> = self.spans.iter().chain(&other.spans).copied().collect();
        Addrs::from_spans(self.fam, all)
    }

    /// A set from any spans (inclusive, in any order, overlapping or not).
    pub fn from_spans(fam: Fam, mut all: Vec<(u128, u128)>) -> Addrs {
        all.retain(|(lo, hi)| lo <= hi);
        for s in &mut all {
            s.1 = s.1.min(fam.max());
        }
        all.sort_unstable();
        let mut spans: Vec<(u128, u128)> = Vec::with_capacity(all.len());
        for (lo, hi) in all {
            match spans.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => spans.push((lo, hi)),
            }
        }
        Addrs { fam, spans }
    }

    pub fn complement(&self) -> Addrs {
        let mut spans = Vec::new();
        let mut next = 0u128;
        let mut open = true;
        for &(lo, hi) in &self.spans {
            if lo > next {
                spans.push((next, lo - 1));
            }
            if hi == self.fam.max() {
                open = false;
                break;
            }
            next = hi + 1;
        }
        if open {
            spans.push((next, self.fam.max()));
        }
        Addrs {
            fam: self.fam,
            spans,
        }
    }

    pub fn intersect(&self, other: &Addrs) -> Addrs {
        let (mut i, mut j) = (0, 0);
        let mut spans = Vec::new();
        while i < self.spans.len() && j < other.spans.len() {
            let (a, b) = (self.spans[i], other.spans[j]);
            let lo = a.0.max(b.0);
            let hi = a.1.min(b.1);
            if lo <= hi {
                spans.push((lo, hi));
            }
            if a.1 < b.1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        Addrs {
            fam: self.fam,
            spans,
        }
    }

    pub fn minus(&self, other: &Addrs) -> Addrs {
        self.intersect(&other.complement())
    }

    /// The set as the fewest networks, the way an operator writes them.
    pub fn cidrs(&self) -> Vec<String> {
        let bits = self.fam.len() as u32 * 8;
        let mut out = Vec::new();
        for &(lo, hi) in &self.spans {
            let mut at = lo;
            loop {
                // The largest aligned block starting at `at` that stays within `hi`.
                let mut size = if at == 0 {
                    bits
                } else {
                    at.trailing_zeros().min(bits)
                };
                while size > 0 {
                    let span = if size >= 128 {
                        u128::MAX
                    } else {
                        (1u128 << size) - 1
                    };
                    if at.checked_add(span).is_some_and(|end| end <= hi) {
                        break;
                    }
                    size -= 1;
                }
                let prefix = bits - size;
                out.push(format!("{}/{prefix}", addr(self.fam, at)));
                let span = if size >= 128 {
                    u128::MAX
                } else {
                    (1u128 << size) - 1
                };
                match at.checked_add(span).and_then(|e| e.checked_add(1)) {
                    Some(n) if n <= hi => at = n,
                    _ => break,
                }
            }
        }
        out
    }
}

impl fmt::Display for Addrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_all() {
            return write!(f, "anywhere ({})", self.fam.name());
        }
        if self.is_empty() {
            return write!(f, "no address");
        }
        // A few networks in full; a blocklist's thousands as the first few and a count, read
        // from the first spans alone.
        let head = Addrs {
            fam: self.fam,
            spans: self.spans.iter().take(4).copied().collect(),
        };
        let nets = head.cidrs();
        if self.spans.len() <= 4 && nets.len() <= 4 {
            return write!(f, "{}", nets.join(", "));
        }
        let count: u128 = self
            .spans
            .iter()
            .map(|(lo, hi)| hi - lo + 1)
            .fold(0u128, |a, b| a.saturating_add(b));
        write!(
            f,
            "{}, … ({} ranges, {count} addresses)",
            nets[..nets.len().min(3)].join(", "),
            self.spans.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> u128 {
        num(s.parse().unwrap())
    }

    #[test]
    fn a_network_and_its_complement_partition_the_space() {
        let net = Addrs::cidr(Fam::V4, v4("10.200.1.0"), 24);
        assert_eq!(net.cidrs(), ["10.200.1.0/24"]);
        let rest = net.complement();
        assert!(rest.contains("10.200.2.1".parse().unwrap()));
        assert!(!rest.contains("10.200.1.7".parse().unwrap()));
        assert!(rest.union(&net).is_all());
        assert!(rest.intersect(&net).is_empty());
    }

    #[test]
    fn one_address_taken_out_of_a_network_reads_as_networks() {
        let net = Addrs::cidr(Fam::V4, v4("10.0.0.0"), 30);
        let less = net.minus(&Addrs::one("10.0.0.2".parse().unwrap()));
        assert_eq!(less.cidrs(), ["10.0.0.0/31", "10.0.0.3/32"]);
    }

    #[test]
    fn the_whole_v6_space_is_one_network() {
        assert_eq!(Addrs::all(Fam::V6).cidrs(), ["::/0"]);
        assert_eq!(Addrs::all(Fam::V4).cidrs(), ["0.0.0.0/0"]);
        let low = Addrs::cidr(Fam::V6, 0, 1);
        assert_eq!(low.complement().cidrs(), ["8000::/1"]);
    }
}
