//! Per-source flood limits kept (issue 30): where a ruleset drops a source's new connections over
//! a rate or a count (`add @set { ip saddr limit rate over ... } drop`, `... ct count over ...`),
//! the opening from anywhere must be written behind the limits, so after the apply a burst of new
//! connections from one outside source is cut short. The same burst from the node itself (on
//! `lo`, which such a ruleset accepts before its limits) shows the listener takes them all, so a
//! short burst from outside is the limit's doing, not the listener's.

use std::net::IpAddr;
use std::time::Duration;

use lab::addr::{NODE_PUBLIC_V4, NODE_PUBLIC_V6};
use lab::{Adoption, Machine, Probe};

use super::{Family, Source, PORT_ANYWHERE};

/// Connections in one burst, all at once.
pub(super) const BURST: usize = 40;
/// How long each waits: past the first SYN retransmission (1 s), not the second (3 s).
const WAIT: Duration = Duration::from_millis(2500);
/// At most this many of a burst from outside may get through: a limit of 10 a second with the
/// default burst of 5 lets about 5 through at once and 10 more with the retransmissions.
pub(super) const AT_MOST: usize = 25;
/// At least this many of a burst from the node itself must get through, or the burst proves
/// nothing about the limit.
pub(super) const BASELINE: usize = 35;

/// One family's bursts: how many of [`BURST`] got through from the node itself and from outside.
#[derive(Debug, Clone)]
pub(super) struct Flooded {
    pub family: Family,
    pub own: Result<usize, String>,
    pub outside: Result<usize, String>,
}

impl Flooded {
    /// Whether the limit held (and the baseline shows it could have failed).
    pub fn holds(&self) -> bool {
        matches!((&self.own, &self.outside), (Ok(own), Ok(out)) if *own >= BASELINE && *out <= AT_MOST)
    }
}

fn node_addr(family: Family) -> IpAddr {
    match family {
        Family::V4 => NODE_PUBLIC_V4.into(),
        Family::V6 => NODE_PUBLIC_V6.into(),
    }
}

/// [`BURST`] connections from `from` (from `source` where given) to the node's public address at
/// once; how many got through.
fn burst(from: &Machine, source: Option<IpAddr>, to: IpAddr) -> Result<usize, String> {
    let results: Vec<Result<Probe, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..BURST)
            .map(|_| {
                s.spawn(|| {
                    match source {
                        Some(src) => from.probe_tcp_from(src, to, PORT_ANYWHERE, WAIT),
                        None => from.probe_tcp(to, PORT_ANYWHERE, WAIT),
                    }
                    .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the probe panicked".into()))
            })
            .collect()
    });
    let mut reached = 0;
    for r in results {
        reached += usize::from(r?.is_reached());
    }
    Ok(reached)
}

/// The bursts of both families, the node's own first, then the outside machine's.
pub(super) fn flood(net: &Adoption) -> Vec<Flooded> {
    Family::ALL
        .iter()
        .map(|&family| {
            let own = burst(&net.node, None, node_addr(family));
            let outside = burst(
                &net.outside,
                Some(Source::Outside.addr(family)),
                node_addr(family),
            );
            Flooded {
                family,
                own,
                outside,
            }
        })
        .collect()
}

#[test]
fn a_burst_through_whole_or_a_listener_that_takes_too_few_fails() {
    let f = |own: usize, outside: usize| Flooded {
        family: Family::V4,
        own: Ok(own),
        outside: Ok(outside),
    };
    assert!(f(BURST, 15).holds());
    assert!(!f(BURST, BURST).holds(), "the limit skipped");
    assert!(!f(10, 5).holds(), "a listener that takes 10 proves nothing");
    assert!(!Flooded {
        family: Family::V6,
        own: Err("x".into()),
        outside: Ok(0)
    }
    .holds());
}
