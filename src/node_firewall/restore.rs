//! The return: a converged node given an adopted declaration has the guard back first (the guard
//! phase ensured it before the store was opened), then the found firewall restored exactly as
//! saved and its boot units enabled again; the derived filter is unloaded with it.

use super::outcome::{Returned, UnitFate};
use super::{Error, Node};

/// The return: the guard is in force already (the apply ensured it before opening the store);
/// the found firewall is put back exactly as saved, its boot unit enabled again if it was, and
/// the derived filter unloaded; then the store forgets the flip and the openings converge
/// through the found firewall as before.
pub(super) fn unflip(cx: &mut Node<'_>) -> Result<Returned, Error> {
    let Some(saved) = cx.store.state.flip.clone() else {
        return Ok(Returned::NothingFlipped);
    };
    // A firewall that is a daemon (firewalld) must run before its state can be put back; it is
    // started once the firewall has listed the ruleset the return's wait compares with.
    let runner = cx.runner;
    let mut start = || -> Result<(), Error> {
        for r in saved.retired.iter().filter(|r| r.daemon) {
            if let Some(unit) = &r.unit {
                let unit_error = |why: String| Error::Unit {
                    doing: "starting",
                    unit: unit.clone(),
                    why,
                };
                let sm = crate::system::service_manager(runner)
                    .map_err(|e| unit_error(e.to_string()))?;
                sm.start(unit).map_err(|e| unit_error(e.to_string()))?;
            }
        }
        Ok(())
    };
    cx.fw
        .unflip(&saved.retired, &mut start)
        .map_err(|e| e.doing("restoring the found firewall"))?;
    crate::failpoint::hit("return", "restored");
    let mut units = Vec::new();
    if let Ok(sm) = crate::system::service_manager(cx.runner) {
        for u in saved.units.iter().filter(|u| u.enabled == Some(true)) {
            sm.enable(&u.unit).map_err(|e| Error::Unit {
                doing: "enabling",
                unit: u.unit.clone(),
                why: e.to_string(),
            })?;
            units.push(UnitFate::Enabled(u.unit.clone()));
        }
    }
    cx.store.state.flip = None;
    cx.store.save()?;
    Ok(Returned::Restored {
        restored: saved.retired,
        units,
    })
}
