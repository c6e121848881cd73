//! Table ownership on kernel 6.18: an owner|persist table lives with the socket that made it,
//! resists other processes, outlives the socket as an orphan, and is reclaimed by a new socket.

mod common;

use common::{in_fresh_netns, nft, nft_try};
use firewall::netlink::*;
use firewall::Error;

fn table(s: &mut NfSocket, name: &str) -> Option<Table> {
    s.tables(Some(Family::Inet))
        .unwrap()
        .into_iter()
        .find(|t| t.name == name)
}

fn guard(s: &mut NfSocket) {
    let mut b = Batch::new();
    common::add_guard_chain(&mut b);
    s.send(&b).unwrap();
}

fn refused_errno(r: Result<(), Error>) -> i32 {
    match r {
        Err(Error::Refused { errno, .. }) => errno.0,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_owned_persistent_table_resists_others_and_is_reclaimed_after_its_owner_goes() {
    in_fresh_netns();
    let mut owner = NfSocket::open().unwrap();
    assert_eq!(
        owner.claim_table(Family::Inet, "meshguard").unwrap(),
        Claim::Created
    );
    assert_eq!(
        owner.claim_table(Family::Inet, "meshguard").unwrap(),
        Claim::AlreadyOwned
    );
    guard(&mut owner);
    let t = table(&mut owner, "meshguard").unwrap();
    assert_eq!(t.flags, TableFlags::OWNER | TableFlags::PERSIST);
    assert_eq!(t.owner, Some(owner.portid()));
    // nft 1.0.6 knows "owner" but not "persist", and names the owning program.
    let listed = nft(&["list", "ruleset"]);
    assert!(
        listed.starts_with("table inet meshguard { # progname "),
        "{listed}"
    );
    assert!(listed.contains("\tflags owner\n"), "{listed}");

    // Another process's flush leaves it; another process cannot delete it.
    nft(&["flush", "ruleset"]);
    assert!(table(&mut owner, "meshguard").is_some());
    assert_eq!(owner.rules(Some(Family::Inet)).unwrap().len(), 1);
    let (ok, _, err) = nft_try(&["delete", "table", "inet", "meshguard"]);
    assert!(!ok && err.contains("Operation not permitted"), "{err}");

    // Another socket in this very process is just as much a stranger.
    let mut other = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.del_table(Family::Inet, "meshguard").unwrap();
    assert_eq!(refused_errno(other.send(&b)), libc::EPERM);
    let mut b = Batch::new();
    b.add_chain(Family::Inet, "meshguard", "sneak", None)
        .unwrap();
    assert_eq!(refused_errno(other.send(&b)), libc::EPERM);
    match other.claim_table(Family::Inet, "meshguard") {
        Err(Error::TableOwned { owner: o, .. }) => assert_eq!(o, owner.portid()),
        r => panic!("expected TableOwned, got {r:?}"),
    }
    // Re-sending NEWTABLE from the stranger is refused by the kernel as well.
    let mut b = Batch::new();
    b.add_table(
        Family::Inet,
        "meshguard",
        TableFlags::OWNER | TableFlags::PERSIST,
    )
    .unwrap();
    assert_eq!(refused_errno(other.send(&b)), libc::EPERM);

    // The owner goes: the table stays as an orphan, persist only, rules intact.
    drop(owner);
    let t = table(&mut other, "meshguard").expect("an owner|persist table outlives its owner");
    assert_eq!(t.flags, TableFlags::PERSIST);
    assert!(t.is_orphan());
    assert_eq!(t.owner, None);
    assert_eq!(other.rules(Some(Family::Inet)).unwrap().len(), 1);

    // Reclaiming with owner only is refused: persist cannot be toggled.
    let mut b = Batch::new();
    b.add_table(Family::Inet, "meshguard", TableFlags::OWNER)
        .unwrap();
    assert_eq!(refused_errno(other.send(&b)), libc::EOPNOTSUPP);

    // A new socket reclaims it with owner|persist, and it is protected again.
    let mut heir = NfSocket::open().unwrap();
    assert_eq!(
        heir.claim_table(Family::Inet, "meshguard").unwrap(),
        Claim::Reclaimed
    );
    let t = table(&mut heir, "meshguard").unwrap();
    assert_eq!(t.flags, TableFlags::OWNER | TableFlags::PERSIST);
    assert_eq!(t.owner, Some(heir.portid()));
    assert_eq!(heir.rules(Some(Family::Inet)).unwrap().len(), 1);
    nft(&["flush", "ruleset"]);
    assert!(table(&mut heir, "meshguard").is_some());
    let mut b = Batch::new();
    b.del_table(Family::Inet, "meshguard").unwrap();
    assert_eq!(refused_errno(other.send(&b)), libc::EPERM);

    // Orphaned again, `nft flush ruleset` removes it.
    drop(heir);
    assert!(table(&mut other, "meshguard").unwrap().is_orphan());
    nft(&["flush", "ruleset"]);
    assert!(table(&mut other, "meshguard").is_none());
}

#[test]
fn an_owned_table_without_persist_goes_with_its_socket() {
    in_fresh_netns();
    let mut watcher = NfSocket::open().unwrap();
    let mut owner = NfSocket::open().unwrap();
    let mut b = Batch::new();
    b.add_table(Family::Ipv4, "mine", TableFlags::OWNER)
        .unwrap();
    owner.send(&b).unwrap();
    assert!(watcher
        .tables(Some(Family::Ipv4))
        .unwrap()
        .iter()
        .any(|t| t.name == "mine" && t.owner == Some(owner.portid())));
    drop(owner);
    assert!(watcher.tables(None).unwrap().is_empty());
}

#[test]
fn a_plain_table_cannot_be_claimed() {
    in_fresh_netns();
    nft(&["add", "table", "inet", "meshguard"]);
    let mut s = NfSocket::open().unwrap();
    match s.claim_table(Family::Inet, "meshguard") {
        Err(Error::Refused { errno, what, .. }) => {
            assert_eq!(errno.0, libc::EOPNOTSUPP);
            assert_eq!(what, "add table inet meshguard");
        }
        r => panic!("expected EOPNOTSUPP, got {r:?}"),
    }
}
