//! The declared openings in the firewall crate's terms: `private` becomes the private network's
//! interface from the node's settings, CIDRs become networks; the foundation's openings derived
//! from the settings; and back, an opening as a declaration's resource. Pure: nothing here reads
//! the machine, so the apply, genesis, `status` and the preview of a flip all translate alike.

use super::{FromName, OpeningSpec, PathKind, Resource, Settings};
use crate::firewall_terms;
use crate::firewall_terms::{Network, Opening};

/// Why a declared opening cannot be put in the firewall crate's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Untranslatable(pub String);

/// The firewall crate's opening for a declared one; `private` becomes the private network's
/// interface from the node's settings.
pub fn to_opening(
    spec: &OpeningSpec,
    settings: Option<&Settings>,
) -> Result<Opening, Untranslatable> {
    let from = match &spec.from {
        super::From::Named(FromName::Anywhere) => firewall_terms::opening::From::Anywhere,
        super::From::Named(FromName::Private) => {
            let iface = settings
                .and_then(|s| s.private_network.as_ref())
                .map(|p| p.interface.clone())
                .ok_or_else(|| Untranslatable(format!("opening {} is from the private network, but the node has no private network in its settings", spec.id)))?;
            firewall_terms::opening::From::Interface(iface)
        }
        super::From::Cidrs(list) => {
            let mut nets = Vec::new();
            for c in list {
                let (addr, len) = super::validate::parse_cidr(c, true)
                    .map_err(|e| Untranslatable(format!("opening {}: {e}", spec.id)))?;
                nets.push(Network { addr, len });
            }
            firewall_terms::opening::From::Networks(nets)
        }
    };
    Ok(Opening {
        id: spec.id.clone(),
        port: spec.port,
        proto: spec.proto,
        from,
        path: match spec.path {
            PathKind::Incoming => firewall_terms::opening::Path::Incoming,
            PathKind::Forwarded => firewall_terms::opening::Path::Forwarded,
        },
    })
}

/// Every opening of `decl` in the firewall crate's terms; the first that cannot be translated
/// fails the whole list.
pub fn declared(
    decl: &super::Declaration,
    settings: Option<&Settings>,
) -> Result<Vec<Opening>, Untranslatable> {
    decl.resources
        .iter()
        .filter_map(|r| match r {
            Resource::Opening(o) => Some(to_opening(o, settings)),
            _ => None,
        })
        .collect()
}

/// The openings of `decl` that can be put in the firewall crate's terms, in order: what the one
/// convergence is given, so an opening that cannot be translated fails on its own line alone.
pub fn translatable(decl: &super::Declaration, settings: Option<&Settings>) -> Vec<Opening> {
    decl.resources
        .iter()
        .filter_map(|r| match r {
            Resource::Opening(o) => to_opening(o, settings).ok(),
            _ => None,
        })
        .collect()
}

/// An opening of the firewall crate as a declaration's resource, its module the part of its id
/// before the first `/`.
pub fn to_resource(o: &Opening) -> serde_json::Value {
    let from = match &o.from {
        firewall_terms::opening::From::Anywhere => serde_json::json!("anywhere"),
        // The only interface an opening can name is the private network's.
        firewall_terms::opening::From::Interface(_) => serde_json::json!("private"),
        firewall_terms::opening::From::Networks(n) => {
            serde_json::json!(n.iter().map(|n| n.to_string()).collect::<Vec<_>>())
        }
    };
    let mut v = serde_json::json!({
        "id": o.id,
        "type": "opening",
        "port": o.port,
        "proto": o.proto.as_str(),
        "from": from,
        "path": o.path.as_str(),
    });
    if let Some((module, _)) = o.id.split_once('/') {
        v["module"] = serde_json::json!(module);
    }
    v
}

/// The openings a node needs: the foundation's from its settings, then the listens its modules
/// declare (the declaration's own openings), through the one function that derives them.
pub fn derive_for(
    settings: &Settings,
    declared: &[OpeningSpec],
) -> Result<Vec<Opening>, Untranslatable> {
    let private = settings
        .private_network
        .as_ref()
        .map(|p| p.interface.clone())
        .ok_or_else(|| Untranslatable("the node has no private network in its settings, so the store's opening has nowhere to come from".into()))?;
    let mut listens = Vec::new();
    for spec in declared {
        let o = to_opening(spec, Some(settings))?;
        listens.push(firewall_terms::Listen {
            id: o.id,
            port: o.port,
            proto: o.proto,
            from: o.from,
            path: o.path,
        });
    }
    let p = settings.ports;
    Ok(firewall_terms::derive(&firewall_terms::Inputs {
        ports: p,
        private_interface: &private,
        listens: &listens,
    }))
}
