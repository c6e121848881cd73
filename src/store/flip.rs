//! What the store keeps of the node's own firewall: what the boot step loads, and the flip of
//! an adopted node to converged with the found firewall it saved.

use super::*;

/// The node's own firewall as the last apply left it in force, for the boot step: the guard on
/// an adopted node, the derived filter on a flipped one.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Boot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<crate::firewall_terms::GuardSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<crate::firewall_terms::FilterSpec>,
}

/// What the flip of an adopted node to converged saved, and how far it got.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Flip {
    pub stage: FlipStage,
    /// The found firewall of each kind as it was before the flip: what return puts back.
    pub retired: Vec<crate::firewall_terms::Retired>,
    /// Each found firewall's boot unit, and whether it was enabled before the flip.
    pub units: Vec<BootUnit>,
    /// The ports ssh listened on at the flip, kept reachable by the derived filter.
    pub ssh: Vec<u16>,
    /// Where the operator's ssh sessions came from when genesis raised the node converged, kept
    /// reachable on ssh's ports by the derived filter (empty for the flip of an adopted node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_from: Vec<std::net::IpAddr>,
}

/// How far a flip got: `saved` when the found firewall's state is kept and nothing else may
/// have happened yet (the next apply finishes it), `done` when the filter is in force and the
/// found firewall retired.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FlipStage {
    Saved,
    Done,
}

/// A found firewall's boot unit as the flip found it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BootUnit {
    pub unit: String,
    /// `None` when the service manager could not say (no such unit, none here).
    pub enabled: Option<bool>,
}
