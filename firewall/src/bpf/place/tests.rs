//! Placing the links against the fake kernel: a reclaim attaches nothing, a link whose pin was out
//! of sight is pinned again, a new program's link is attached beside the old one before the old
//! is unpinned and detached, and each replacement swaps to the priority the old link does not
//! hold, passing over one another program holds.

use super::super::seam::fake::Recording;
use super::super::PRIORITY;
use super::*;
use std::path::Path;

fn pins() -> Pins {
    Pins::under(Path::new("/nonexistent/fake-root"))
}

/// Links of program `prog` at every hook at `priority`, pinned under `pins` when `pinned`.
fn left(k: &Recording, pins: &Pins, prog: u32, priority: i32, pinned: bool) -> Vec<u32> {
    HOOKS
        .iter()
        .map(|(pf, hook, name)| {
            let path = pins.path(name);
            k.left(prog, *pf, *hook, priority, pinned.then_some(path.as_path()))
        })
        .collect()
}

/// Each hook's attached links: (link id, program, priority).
fn attached(k: &Recording) -> Vec<Vec<(u32, u32, i32)>> {
    let links = k.links.borrow();
    HOOKS
        .iter()
        .map(|(pf, hook, _)| {
            k.attached
                .borrow()
                .iter()
                .map(|id| links[id])
                .filter(|l| (l.pf, l.hooknum) == (*pf, *hook))
                .map(|l| (l.id, l.prog_id, l.priority))
                .collect()
        })
        .collect()
}

#[test]
fn links_pinned_for_this_program_are_reclaimed_and_nothing_is_attached() {
    let (k, pins) = (Recording::default(), pins());
    let ids = left(&k, &pins, 7, PRIORITY, true);
    let placed = place_links(&k, &pins, &k.handle(7), 7, Some(7), &mut Vec::new()).unwrap();
    assert_eq!(placed.link_ids, ids);
    assert!(!placed.attached_new);
    assert!(k.calls.borrow().is_empty(), "{:?}", k.calls.borrow());
}

#[test]
fn a_held_link_whose_pin_is_out_of_sight_is_pinned_again_and_never_attached_twice() {
    let (k, pins) = (Recording::default(), pins());
    let ids = left(&k, &pins, 7, PRIORITY, false);
    let mut held: Vec<HeldLink> = ids
        .iter()
        .map(|id| HeldLink {
            info: k.links.borrow()[id],
            fd: k.handle(*id),
        })
        .collect();
    let placed = place_links(&k, &pins, &k.handle(7), 7, Some(7), &mut held).unwrap();
    assert_eq!(placed.link_ids, ids);
    assert!(!placed.attached_new && held.is_empty());
    let want: Vec<String> = ids
        .iter()
        .zip(HOOKS)
        .map(|(id, (_, _, name))| format!("pin link {id} at {name}"))
        .collect();
    assert_eq!(*k.calls.borrow(), want);
}

#[test]
fn a_new_programs_link_is_attached_beside_the_old_before_the_old_is_unpinned_and_detached() {
    let (k, pins) = (Recording::default(), pins());
    let old = left(&k, &pins, 5, PRIORITY, true);
    // The pinned objects were not reclaimed (another version's program): no old program.
    let placed = place_links(&k, &pins, &k.handle(7), 7, None, &mut Vec::new()).unwrap();
    assert!(placed.attached_new);
    let calls = k.calls.borrow();
    assert_eq!(calls.len(), 4 * HOOKS.len(), "{calls:?}");
    for (i, ((pf, hook, name), old)) in HOOKS.iter().zip(&old).enumerate() {
        let new = placed.link_ids[i];
        assert_eq!(
            calls[4 * i..4 * i + 4],
            [
                format!(
                    "create link {new} pf {pf} hook {hook} priority {}",
                    PRIORITY + 1
                ),
                format!("unpin {name}"),
                format!("detach link {old}"),
                format!("pin link {new} at {name}"),
            ],
        );
    }
    assert!(attached(&k)
        .iter()
        .zip(&placed.link_ids)
        .all(|(at, new)| *at == [(*new, 7, PRIORITY + 1)]));
}

#[test]
fn each_replacement_swaps_to_the_priority_the_old_link_does_not_hold() {
    let (k, pins) = (Recording::default(), pins());
    left(&k, &pins, 5, PRIORITY, true);
    place_links(&k, &pins, &k.handle(7), 7, None, &mut Vec::new()).unwrap();
    let placed = place_links(&k, &pins, &k.handle(9), 9, None, &mut Vec::new()).unwrap();
    assert!(attached(&k)
        .iter()
        .zip(&placed.link_ids)
        .all(|(at, new)| *at == [(*new, 9, PRIORITY)]));
    // The pins name the new links.
    for ((_, _, name), id) in HOOKS.iter().zip(&placed.link_ids) {
        assert_eq!(k.pins.borrow().get(&pins.path(name)), Some(id));
    }
}

#[test]
fn a_priority_another_program_holds_is_passed_over_and_none_free_is_an_error_naming_the_hook() {
    let (k, pins) = (Recording::default(), pins());
    k.foreign
        .borrow_mut()
        .extend(HOOKS.iter().map(|(pf, hook, _)| (*pf, *hook, PRIORITY)));
    let placed = place_links(&k, &pins, &k.handle(7), 7, None, &mut Vec::new()).unwrap();
    assert!(attached(&k)
        .iter()
        .zip(&placed.link_ids)
        .all(|(at, new)| *at == [(*new, 7, PRIORITY + 1)]));

    let k = Recording::default();
    let (pf, hook, _) = HOOKS[0];
    k.foreign
        .borrow_mut()
        .extend(PRIORITIES.map(|p| (pf, hook, p)));
    let Err(e) = place_links(&k, &pins, &k.handle(7), 7, None, &mut Vec::new()) else {
        panic!("placed with every priority held");
    };
    assert!(
        matches!(&e, Error::Bpf { errno, .. } if errno.0 == nix::errno::Errno::EBUSY as i32),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!(
            "netfilter link pf {pf} hook {hook}: every free priority"
        )),
        "{e}"
    );
    assert!(k.calls.borrow().is_empty(), "{:?}", k.calls.borrow());
}
