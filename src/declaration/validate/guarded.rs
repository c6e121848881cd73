//! Validation of an opening on a port the guard refuses: the store's and the broker
//! management's, which no opening may admit from beyond the private network.
//!
//! On an adopted node the guard drops a new connection to those two ports arriving on any
//! interface but loopback, the private network's and the runtime's bridge, whatever the found
//! firewall or an opening admits; on a converged node the derived filter admits them from the
//! private network only. An opening wider than that would be reported "in force" while the guard
//! drops it, and would open the store to the world after `converge`. So the declaration is
//! refused before anything changes, naming the guard setting the opening contradicts.

use super::{join, parse_cidr, Walker};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// What the guard of these settings refuses: the two guarded ports (tcp) and the private range
/// they may be reached from.
#[derive(Debug, Clone, Default)]
pub(super) struct Guarded {
    /// `(port, setting)`: the store's and broker-management's ports, as the settings name them.
    pub ports: Vec<(u16, &'static str)>,
    /// The private ranges (`range`, then `range_v6`).
    pub private: Vec<(IpAddr, u8)>,
}

impl Walker {
    /// An opening on a guarded port (tcp, either path) must come `from: "private"` or from CIDRs
    /// inside the private range (or loopback).
    pub(super) fn guarded_opening(&mut self, map: &Map<String, Value>, path: &str) {
        let Some(guarded) = self.guarded.clone() else {
            return;
        };
        let port = map.get("port").and_then(Value::as_u64);
        let Some((port, setting)) = guarded
            .ports
            .iter()
            .find(|(p, _)| Some(u64::from(*p)) == port)
            .copied()
        else {
            return;
        };
        if map.get("proto").and_then(Value::as_str) != Some("tcp") {
            return;
        }
        let range = match guarded.private.as_slice() {
            [] => "a private network (these settings declare none)".to_string(),
            [(a, l)] => format!("settings.private_network.range {a}/{l}"),
            ranges => format!(
                "settings.private_network's ranges {}",
                ranges
                    .iter()
                    .map(|(a, l)| format!("{a}/{l}"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        };
        let refuse = |w: &mut Walker, at: String, what: String| {
            w.err(
                at,
                format!(
                    "{what}: port {port} is settings.ports.{setting}, which the guard refuses \
                     from everywhere but {range} and loopback; such an opening would be reported \
                     in force while the guard drops it, and reach the {} from outside after \
                     converge; declare from \"private\" or CIDRs inside the private range",
                    service(setting)
                ),
            )
        };
        let fp = join(path, "from");
        match map.get("from") {
            Some(Value::String(s)) if s == "anywhere" => {
                refuse(self, fp, "an opening from anywhere".to_string())
            }
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let Some(Ok((net, len))) = item.as_str().map(|c| parse_cidr(c, true)) else {
                        continue;
                    };
                    let within = guarded.private.iter().any(|r| inside(Some(*r), net, len));
                    if !within && !net.is_loopback() {
                        let what = format!("an opening from {}", item.as_str().unwrap_or(""));
                        refuse(self, format!("{fp}[{i}]"), what);
                    }
                }
            }
            _ => {}
        }
    }
}

/// What a guard setting's port carries, in words.
fn service(setting: &str) -> &'static str {
    match setting {
        "store" => "store",
        _ => "broker's management",
    }
}

/// Whether `net/len` lies wholly inside the private range.
fn inside(private: Option<(IpAddr, u8)>, net: IpAddr, len: u8) -> bool {
    let Some((range, rlen)) = private else {
        return false;
    };
    if len < rlen {
        return false;
    }
    match (range, net) {
        (IpAddr::V4(r), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(rlen)).unwrap_or(0);
            u32::from(r) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(r), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(rlen)).unwrap_or(0);
            u128::from(r) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
