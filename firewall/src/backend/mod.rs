//! One driver per kind of found firewall, each answering the seams of `seam.rs` in its own terms,
//! and [`kind`], the one place a [`Backend`] is turned into its driver. Table drivers read and
//! write rules the engine places: `nftables.rs` for hand-written rulesets and `iptables.rs` for
//! both iptables variants, both reading nf_tables tables through `nf.rs`. Whole drivers converge
//! every opening in their own terms: `firewalld.rs` (a policy and a zone of the mesh's, over
//! D-Bus) and `ufw.rs` (ufw's own commands). Every kind detects its own layers and retires and
//! restores its own firewall. No driver's code knows another's: a new kind is one file here, its
//! arm in [`kind`] and its `Backend` variant (with its place in detection's order).

mod firewalld;
mod iptables;
mod nf;
pub(crate) mod nftables;
mod seam;
mod ufw;

pub use firewalld::{listen_for_reloads as firewalld_reloads, POLICY as FIREWALLD_POLICY};
pub(crate) use iptables::quoted;
pub use iptables::Variant;
pub use seam::{
    Change, Converger, Cx, Detect, Kind, Removal, Retire, TableDriver, TableKey, TableView,
    WholeDriver,
};

use crate::found::Backend;

/// What this build does with a kind of found firewall: its driver behind each seam.
pub fn kind(backend: Backend) -> Kind {
    match backend {
        Backend::Nftables => nftables::KIND,
        Backend::IptablesNft => iptables::NFT,
        Backend::IptablesLegacy => iptables::LEGACY,
        Backend::Firewalld => firewalld::KIND,
        Backend::Ufw => ufw::KIND,
    }
}

#[cfg(test)]
mod tests;
