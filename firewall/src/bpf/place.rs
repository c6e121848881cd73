//! Placing the guard's four links through [`LinkCalls`]: each hook's link reclaimed when it runs
//! this program (pinned again when its pin was out of sight), else a new link attached at the
//! priority the old one does not hold before the old one is unpinned and detached, so at no
//! moment is neither in place.

use super::seam::LinkCalls;
use super::sys::F_NETFILTER_IP_DEFRAG;
use super::{link_ok, HeldLink, Pins, HOOKS, PRIORITIES};
use crate::error::{Errno, Error, Result};
use std::os::fd::OwnedFd;

/// What placing the links came to.
pub(super) struct Placed {
    /// Each hook's link, in the order of [`HOOKS`].
    pub link_ids: Vec<u32>,
    /// Whether any link was attached anew.
    pub attached_new: bool,
}

/// Places the links of `prog` (id `prog_id`) at every hook of [`HOOKS`], pinned under `pins`;
/// `old_prog` is the program the pinned objects were reclaimed with (its links are kept), and
/// `held` this namespace's guard links the kernel holds, a hook's taken out when it is used.
pub(super) fn place_links(
    calls: &dyn LinkCalls,
    pins: &Pins,
    prog: &OwnedFd,
    prog_id: u32,
    old_prog: Option<u32>,
    held: &mut Vec<HeldLink>,
) -> Result<Placed> {
    let mut link_ids = Vec::new();
    let mut attached_new = false;
    for (pf, hook, name) in HOOKS {
        let path = pins.path(name);
        // The pinned link, or else one the kernel holds for this hook (its pin out of sight).
        let (old, pinned_here) = match calls.obj_get(&path)? {
            Some(fd) => (Some(fd), true),
            None => (take_held(held, pf, hook, prog_id), false),
        };
        let mut taken = None;
        if let Some(old) = &old {
            let info = calls.link_info(old, &format!("link {}", path.display()))?;
            if old_prog == Some(prog_id) && link_ok(&info, pf, hook, prog_id) {
                if !pinned_here {
                    calls.obj_pin(old, &path)?;
                }
                link_ids.push(info.id);
                continue;
            }
            taken = Some(info.priority);
        }
        // A new link is attached before the old one is unpinned and detached, at the priority
        // the old one does not hold: at no moment is neither in place.
        let new = attach(calls, prog, pf, hook, taken)?;
        if let Some(old) = old {
            if pinned_here {
                calls.unpin(&path)?;
            }
            // A link whose namespace is gone cannot be detached again; nothing holds it then.
            let _ = calls.link_detach(&old, &format!("old link {}", path.display()));
        }
        calls.obj_pin(&new, &path)?;
        link_ids.push(
            calls
                .link_info(&new, &format!("link {}", path.display()))?
                .id,
        );
        attached_new = true;
    }
    Ok(Placed {
        link_ids,
        attached_new,
    })
}

/// Takes out of `held` the link for `pf`/`hook`, the one running `prog_id` first.
fn take_held(held: &mut Vec<HeldLink>, pf: u32, hook: u32, prog_id: u32) -> Option<OwnedFd> {
    let at = |l: &HeldLink| l.info.pf == pf && l.info.hooknum == hook;
    let i = held
        .iter()
        .position(|l| at(l) && l.info.prog_id == prog_id)
        .or_else(|| held.iter().position(at))?;
    Some(held.remove(i).fd)
}

/// Attaches `prog` at one hook, at the first of [`PRIORITIES`] another link does not hold
/// (`taken`, or one the kernel says is busy).
fn attach(
    calls: &dyn LinkCalls,
    prog: &OwnedFd,
    pf: u32,
    hook: u32,
    taken: Option<i32>,
) -> Result<OwnedFd> {
    for prio in PRIORITIES.into_iter().filter(|p| Some(*p) != taken) {
        match calls.link_create(prog, pf, hook, prio, F_NETFILTER_IP_DEFRAG) {
            Ok(fd) => return Ok(fd),
            Err(Error::Bpf {
                errno: Errno(e), ..
            }) if e == nix::errno::Errno::EBUSY as i32 => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Bpf {
        op: "link create",
        what: format!(
            "netfilter link pf {pf} hook {hook}: every free priority of {PRIORITIES:?} is held by \
             another bpf hook"
        ),
        errno: Errno(nix::errno::Errno::EBUSY as i32),
        log: None,
    })
}

#[cfg(test)]
mod tests;
