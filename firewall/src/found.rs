//! The found firewall as data: its layers (every base chain a packet crosses on its way to a
//! service), the kind of firewall that wrote each (`Backend`), and the mesh's own table, which is
//! never one of them. `detect.rs` reads them; the drivers in `backend/` write through them.

use crate::netlink::{Family, Hook, Policy};
use crate::opening::{Opening, Path};
use crate::rules::Site;
use std::fmt;

/// The mesh's own table (the guard, and later the derived filter); never a found layer.
pub const MESH_TABLE: &str = "mesh_host";

/// Who wrote a layer, and so in whose terms an opening is written into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Backend {
    /// Written with `nft` (a hand-written ruleset): openings are written natively.
    Nftables,
    /// Written through `iptables` on the nf_tables backend (the operator, Docker, Podman):
    /// openings are written with `iptables-nft`, so the tables stay readable by iptables.
    IptablesNft,
    /// The legacy x_tables: openings are written with `iptables-legacy`.
    IptablesLegacy,
    /// firewalld's own table: openings are rich rules in the mesh's firewalld policy, over
    /// firewalld's D-Bus API.
    Firewalld,
    /// ufw's chains: openings are written with `ufw allow` and `ufw route allow`.
    Ufw,
}

impl Backend {
    /// Every kind, in the order the flip surveys them.
    pub const ALL: [Backend; 5] = [
        Backend::Nftables,
        Backend::IptablesNft,
        Backend::IptablesLegacy,
        Backend::Firewalld,
        Backend::Ufw,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Nftables => "nftables",
            Backend::IptablesNft => "iptables-nft",
            Backend::IptablesLegacy => "iptables-legacy",
            Backend::Firewalld => "firewalld",
            Backend::Ufw => "ufw",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One base chain (or legacy built-in chain) at a hook a packet crosses on its way to a
/// service: ingress, prerouting and input on the incoming path; ingress, prerouting and forward
/// on the forwarded path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub backend: Backend,
    pub hook: Hook,
    /// `ip`, `ip6`, `inet` or `netdev`; a legacy layer is `ip` (iptables) or `ip6` (ip6tables).
    pub family: Family,
    pub table: String,
    pub chain: String,
    pub priority: i32,
    pub policy: Policy,
    pub rules: usize,
    /// Whether anything in it can drop a packet: a drop policy, or a rule that drops, rejects,
    /// jumps elsewhere or does something this host cannot read.
    pub can_drop: bool,
    /// Why the host thinks `backend` wrote it.
    pub evidence: String,
    /// The device of an ingress chain: only packets arriving on it cross it.
    pub device: Option<String>,
    /// Why the host cannot write in this layer, when it cannot (a table only its owner may
    /// change): an opening it would refuse is reported missing there, naming the layer.
    pub unwritable: Option<String>,
}

impl Layer {
    /// Whether packets on `path` cross this layer.
    pub fn on(&self, path: Path) -> bool {
        match self.hook {
            Hook::Ingress | Hook::Prerouting => true,
            Hook::Input => path == Path::Incoming,
            Hook::Forward => path == Path::Forwarded,
            _ => false,
        }
    }

    /// Whether the packets an opening admits cross this layer: on its path, and for an ingress
    /// chain of one device, arriving on that device (an opening from an interface arrives only
    /// there).
    pub fn crossed_by(&self, o: &Opening) -> bool {
        self.on(o.path)
            && match (&self.device, &o.from) {
                (Some(d), crate::opening::From::Interface(i)) => d == i,
                _ => true,
            }
    }

    /// Whether the chain runs before destination NAT (-100): a published port is still on the
    /// packet there.
    pub fn before_dnat(&self) -> bool {
        self.hook == Hook::Ingress || (self.hook == Hook::Prerouting && self.priority < -100)
    }

    /// Where the chain runs, for an opening's rule.
    pub fn site(&self) -> Site {
        Site {
            family: self.family,
            before_dnat: self.before_dnat(),
            local: false,
        }
    }

    /// The hook's name, as nft prints it.
    pub fn hook_name(&self) -> &'static str {
        match self.hook {
            Hook::Ingress => "ingress",
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            _ => "other",
        }
    }

    /// The paths that cross it, for reports: `incoming`, `forwarded` or `both`.
    pub fn paths(&self) -> &'static str {
        match (self.on(Path::Incoming), self.on(Path::Forwarded)) {
            (true, true) => "both",
            (true, false) => "incoming",
            (false, true) => "forwarded",
            _ => "none",
        }
    }

    /// Which layer this is, as a state names it.
    pub fn id(&self) -> crate::outcome::LayerId {
        crate::outcome::LayerId {
            backend: self.backend,
            family: self.family,
            table: self.table.clone(),
            chain: self.chain.clone(),
        }
    }

    /// `ip filter INPUT (iptables-nft)`, for reports.
    pub fn describe(&self) -> String {
        self.id().to_string()
    }
}

/// The found firewall.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub layers: Vec<Layer>,
    /// Why openings cannot be converged through it, if they cannot.
    pub refusal: Option<String>,
    /// What could not be read, if anything (reported, never guessed at).
    pub notes: Vec<String>,
    /// The legacy tables as `*-save` printed them while detecting, by family and table: the
    /// iptables-legacy driver reads them from here within the same convergence instead of
    /// running the program again.
    pub legacy_saves: std::collections::BTreeMap<(Family, String), String>,
}

impl Found {
    /// The layers that can drop a packet on a path: an opening must be admitted by each.
    pub fn droppers(&self, path: Path) -> impl Iterator<Item = &Layer> {
        self.layers.iter().filter(move |l| l.on(path) && l.can_drop)
    }

    /// `none`, one backend's name, or several joined with `+` (e.g. `iptables-legacy+nftables`).
    pub fn kind(&self) -> String {
        let mut kinds: Vec<Backend> = self
            .layers
            .iter()
            .filter(|l| l.can_drop)
            .map(|l| l.backend)
            .collect();
        kinds.sort();
        kinds.dedup();
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds
                .iter()
                .map(|b| b.as_str())
                .collect::<Vec<_>>()
                .join("+")
        }
    }
}
