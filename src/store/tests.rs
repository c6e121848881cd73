//! The store's unit tests: records journaled, replayed and folded, a stale or torn journal, the
//! earlier formats read and written back as the current one, a resource named twice refused, a
//! snapshot or journal that fails its checksum refused.

use super::*;

fn owned(id: &str) -> Owned {
    Owned {
        parents: Vec::new(),
        id: id.into(),
        module: None,
        shape: Shape::File,
        key: format!("/etc/{id}"),
        digest: Some(digest(id.as_bytes())),
        found: false,
        stamp: None,
    }
}

fn ids(state: &State) -> Vec<&str> {
    state.owned.iter().map(|o| o.id.as_str()).collect()
}

fn journal_of(root: &Path) -> Option<Vec<u8>> {
    fs::read(store_dir(root).join(journal::FILE)).ok()
}

#[test]
fn records_are_journaled_and_replayed_and_the_fold_empties_the_journal() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    s.record("a", Op::Intend(owned("a"))).unwrap();
    s.record("a", Op::Commit("a".into())).unwrap();
    s.record("b", Op::Own(owned("b"))).unwrap();
    // The snapshot still says nothing of them; the journal does.
    let path = store_dir(root.path()).join("state.json");
    let (snap, _) = read_snapshot(&path, &fs::read(&path).unwrap()).unwrap();
    assert!(snap.owned.is_empty());
    let j = String::from_utf8(journal_of(root.path()).unwrap()).unwrap();
    assert_eq!(j.lines().count(), 4, "{j}");
    assert!(
        j.lines().nth(2).unwrap().ends_with(r#" {"commit":"a"}"#),
        "{j}"
    );
    // Without the lock, a look replays it and writes nothing.
    let seen = peek(root.path()).unwrap().unwrap();
    assert_eq!(ids(&seen), ["a", "b"]);
    assert!(journal_of(root.path()).is_some());
    drop(s);
    // Opening under the lock replays and folds.
    let s = Store::open(root.path()).unwrap();
    assert_eq!(ids(&s.state), ["a", "b"]);
    assert_eq!(s.state.pending, None);
    assert!(journal_of(root.path()).is_none());
    let snap = peek(root.path()).unwrap().unwrap();
    assert_eq!(snap, s.state);
}

#[test]
fn the_journal_is_folded_when_it_outgrows_the_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let snapshot_len = || {
        fs::metadata(store_dir(root.path()).join("state.json"))
            .unwrap()
            .len()
    };
    let mut s = Store::open(root.path()).unwrap();
    s.save().unwrap();
    let (mut appended, mut folded, mut folds) = (0u64, 0u64, 0);
    for i in 0..3000 {
        let before = journal_of(root.path()).map_or(0, |j| j.len() as u64);
        let id = format!("r{i}");
        s.record(&id, Op::Own(owned(&id))).unwrap();
        let after = journal_of(root.path()).map_or(0, |j| j.len() as u64);
        if after < before {
            folds += 1;
            folded += snapshot_len();
            appended += journal::line(0, &Op::Own(owned(&id))).0.len() as u64;
        } else {
            appended += after - before;
        }
        assert!(
            after <= (2 * snapshot_len()).max(FOLD_FLOOR) + 300,
            "journal {after} bytes over a snapshot of {}",
            snapshot_len()
        );
    }
    // The folds rewrote no more than was appended.
    assert!(folds >= 2, "{folds} folds");
    assert!(
        folded <= appended,
        "folds wrote {folded}, appends {appended}"
    );
    drop(s);
    let s = Store::open(root.path()).unwrap();
    assert_eq!(s.state.owned.len(), 3000);
    assert_eq!(s.state.owned[2999].id, "r2999");
}

#[test]
fn a_stale_journal_is_ignored_and_a_torn_line_is_left_out() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    let mut s = Store::open(root.path()).unwrap();
    s.save().unwrap();
    s.record("a", Op::Own(owned("a"))).unwrap();
    let journal = journal_of(root.path()).unwrap();
    // A fold that renamed its snapshot and died before removing the journal.
    s.save().unwrap();
    drop(s);
    fs::write(dir.join(journal::FILE), &journal).unwrap();
    let mut extra = journal.clone();
    extra.extend(journal::line(0, &Op::Own(owned("ghost"))).0);
    fs::write(dir.join(journal::FILE), &extra).unwrap();
    let seen = peek(root.path()).unwrap().unwrap();
    assert_eq!(ids(&seen), ["a"], "a stale journal invents nothing");
    // A torn last line over the current snapshot.
    let s = Store::open(root.path()).unwrap();
    drop(s);
    let mut s = Store::open(root.path()).unwrap();
    s.record("b", Op::Own(owned("b"))).unwrap();
    drop(s);
    let mut torn = journal_of(root.path()).unwrap();
    let (line, _) = journal::line(0, &Op::Own(owned("c")));
    torn.extend(&line[..line.len() - 3]);
    fs::write(dir.join(journal::FILE), &torn).unwrap();
    assert_eq!(ids(&peek(root.path()).unwrap().unwrap()), ["a", "b"]);
    let s = Store::open(root.path()).unwrap();
    assert_eq!(ids(&s.state), ["a", "b"]);
    assert!(journal_of(root.path()).is_none());
}

#[test]
fn a_store_of_the_first_format_opens_and_is_written_back_as_the_second() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    fs::create_dir_all(&dir).unwrap();
    // As the host before the journal wrote it: state.json alone, version 1.
    let v1 = r#"{
  "version": 1,
  "node": "n1",
  "mode": "converged",
  "taken": [],
  "owned": [
{"id": "a", "shape": "file", "key": "/etc/a", "digest": "sha256:aa"},
{"id": "d", "shape": "directory", "key": "/srv/d"}
  ],
  "held": [{"id": "h", "shape": "file", "key": "/etc/h", "digest": "sha256:hh"}],
  "originals": [{"key": "/etc/h", "saved": "/var/lib/mesh-host/originals/x-h", "digest": "sha256:hh"}],
  "pending": {"record": {"id": "p", "shape": "file", "key": "/etc/p", "digest": "sha256:pp"}}
}
"#;
    fs::write(dir.join("state.json"), v1).unwrap();
    let seen = peek(root.path()).unwrap().unwrap();
    assert_eq!(seen.version, 1);
    assert_eq!(ids(&seen), ["a", "d"]);
    let mut s = Store::open(root.path()).unwrap();
    assert_eq!(
        s.state.owned_by_key(Shape::Directory, "/srv/d").unwrap().id,
        "d"
    );
    assert_eq!(
        s.state.held_at("h", "/etc/h").unwrap().digest.as_deref(),
        Some("sha256:hh")
    );
    assert_eq!(
        s.state.original("/etc/h").unwrap().saved,
        "/var/lib/mesh-host/originals/x-h"
    );
    assert_eq!(s.state.pending.as_ref().unwrap().record.id, "p");
    s.record("p", Op::Commit("p".into())).unwrap();
    drop(s);
    let s = Store::open(root.path()).unwrap();
    assert_eq!(ids(&s.state), ["a", "d", "p"]);
    let mut s = s;
    s.save().unwrap();
    assert_eq!(peek(root.path()).unwrap().unwrap().version, STORE_VERSION);
    // A store of a later format than this host reads is refused, naming it.
    fs::write(dir.join("state.json"), r#"{"version": 9}"#).unwrap();
    drop(s);
    let e = peek(root.path()).unwrap_err().to_string();
    assert!(e.contains("format version 9"), "{e}");
}

#[test]
fn a_store_naming_a_resource_twice_is_refused_with_its_path() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("state.json"),
        r#"{"version": 2, "owned": [{"id": "a", "shape": "file", "key": "/a"}, {"id": "a", "shape": "file", "key": "/b"}]}"#,
    )
    .unwrap();
    let e = peek(root.path()).unwrap_err().to_string();
    assert!(
        e.contains("state.json") && e.contains("\"a\" is recorded twice"),
        "{e}"
    );
}

#[test]
fn a_retired_store_leaves_nothing_to_reconcile_and_the_next_is_not_taken_for_a_lost_one() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    s.record("a", Op::Own(owned("a"))).unwrap();
    fs::create_dir_all(dir.join("originals")).unwrap();
    fs::write(dir.join(RELEASED), b"{}").unwrap();
    s.retire().unwrap();
    assert!(!dir.join("state.json").exists());
    assert!(journal_of(root.path()).is_none());
    assert!(peek(root.path()).unwrap().is_none(), "nothing to reconcile");
    // The next store here follows a release, not a loss; its first save ends the marker.
    let mut next = Store::open(root.path()).unwrap();
    assert!(!next.rebuilt);
    next.save().unwrap();
    assert!(!dir.join(RELEASED).exists());
    drop(next);
    // From then on a missing state beside the earlier files is a loss again.
    fs::remove_file(dir.join("state.json")).unwrap();
    assert!(Store::open(root.path()).unwrap().rebuilt);
}

/// A snapshot whose bytes no longer match its checksum is refused, by a look and by an open,
/// naming the file; so is one stripped of its checksum that still says a version that has one.
#[test]
fn a_snapshot_that_fails_its_checksum_is_refused_naming_the_file() {
    let root = tempfile::tempdir().unwrap();
    let path = store_dir(root.path()).join("state.json");
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    drop(s);
    let good = fs::read(&path).unwrap();
    let text = String::from_utf8(good.clone()).unwrap();
    // "n1" -> "n0": still JSON, still a store, another state.
    fs::write(&path, text.replace("\"n1\"", "\"n0\"")).unwrap();
    let e = peek(root.path()).unwrap_err().to_string();
    assert!(
        e.contains(&path.display().to_string()) && e.contains("fails its checksum"),
        "{e}"
    );
    let e = Store::open(root.path()).err().unwrap().to_string();
    assert!(e.contains("fails its checksum"), "{e}");
    let stripped: String = text
        .lines()
        .filter(|l| !l.contains("\"checksum\""))
        .collect::<Vec<_>>()
        .join("\n");
    fs::write(&path, stripped).unwrap();
    let e = peek(root.path()).unwrap_err().to_string();
    assert!(
        e.contains(&format!("format version {STORE_VERSION} but no checksum")),
        "{e}"
    );
    fs::write(&path, good).unwrap();
    assert_eq!(
        peek(root.path()).unwrap().unwrap().node.as_deref(),
        Some("n1")
    );
}

/// A store of the previous format (version 2, no checksums) with a journal of the previous
/// format is read once, and its open rewrites it whole with checksums.
#[test]
fn a_store_without_checksums_is_read_once_and_rewritten_with_them() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    fs::create_dir_all(&dir).unwrap();
    let v2 = b"{\n  \"version\": 2,\n  \"node\": \"n1\"\n}\n";
    fs::write(dir.join("state.json"), v2).unwrap();
    let header = format!(
        "{{\"journal\":1,\"over\":\"{}\"}}\n{}\n",
        digest(v2),
        serde_json::to_string(&Op::Own(owned("a"))).unwrap()
    );
    fs::write(dir.join(journal::FILE), header).unwrap();
    assert_eq!(ids(&peek(root.path()).unwrap().unwrap()), ["a"]);
    let s = Store::open(root.path()).unwrap();
    assert_eq!(ids(&s.state), ["a"]);
    drop(s);
    let snap = fs::read_to_string(dir.join("state.json")).unwrap();
    assert!(snap.starts_with("{\n  \"checksum\": \"sha256:"), "{snap}");
    assert!(journal_of(root.path()).is_none());
    // Without a journal, the first record rewrites the snapshot rather than journal over it.
    fs::write(dir.join("state.json"), v2).unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.record("b", Op::Own(owned("b"))).unwrap();
    assert!(journal_of(root.path()).is_none());
    let snap = fs::read_to_string(dir.join("state.json")).unwrap();
    assert!(snap.starts_with("{\n  \"checksum\": \"sha256:"), "{snap}");
    drop(s);
    assert_eq!(peek(root.path()).unwrap().unwrap().version, STORE_VERSION);
}

/// A store of format version 3 (checksums, no stamps) is read as it is, and its first write
/// rewrites it whole as version 4 rather than journal a record with a stamp over it, which a
/// version-3 host would refuse to read; the stamp then survives a replay.
#[test]
fn a_version_3_store_is_rewritten_whole_before_a_stamp_is_journaled() {
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    fs::create_dir_all(&dir).unwrap();
    let v3 = State {
        version: 3,
        node: Some("n1".into()),
        ..State::default()
    };
    let mut body = serde_json::to_vec_pretty(&v3).unwrap();
    body.push(b'\n');
    fs::write(dir.join("state.json"), checksum::seal(&body)).unwrap();
    assert_eq!(peek(root.path()).unwrap().unwrap().version, 3);
    let stamp = Stamp {
        dev: 1,
        ino: 2,
        size: 3,
        mtime: [4, 5],
        ctime: [6, 7],
    };
    let mut s = Store::open(root.path()).unwrap();
    s.record(
        "a",
        Op::Own(Owned {
            stamp: Some(stamp),
            ..owned("a")
        }),
    )
    .unwrap();
    assert!(
        journal_of(root.path()).is_none(),
        "rewritten, not journaled"
    );
    assert_eq!(peek(root.path()).unwrap().unwrap().version, STORE_VERSION);
    // Over a snapshot of this version, a stamped record is journaled and replayed.
    s.record(
        "b",
        Op::Own(Owned {
            stamp: Some(stamp),
            ..owned("b")
        }),
    )
    .unwrap();
    assert!(journal_of(root.path()).is_some());
    drop(s);
    let state = peek(root.path()).unwrap().unwrap();
    assert_eq!(ids(&state), ["a", "b"]);
    assert_eq!(state.owned("b").unwrap().stamp, Some(stamp));
}

/// A stamp is stored as one string and read back exactly; anything else in its place is refused.
#[test]
fn a_stamp_is_one_string_read_back_exactly() {
    let s = Stamp {
        dev: 2049,
        ino: 1_835_016,
        size: 4 << 30,
        mtime: [-5, 7],
        ctime: [1_764_871_200, 123_456_789],
    };
    let text = serde_json::to_string(&s).unwrap();
    assert_eq!(
        text,
        "\"2049:1835016:4294967296:-5.000000007:1764871200.123456789\""
    );
    assert_eq!(serde_json::from_str::<Stamp>(&text).unwrap(), s);
    for bad in [
        "\"1:2:3:4.5\"",
        "\"1:2:3:4:5.0\"",
        "\"1:2:3:4.1000000000:5.0\"",
        "{}",
    ] {
        assert!(serde_json::from_str::<Stamp>(bad).is_err(), "{bad}");
    }
}

/// The legacy tables' fingerprint beside the snapshot: read back with the snapshot it was
/// written with; not believed beside another snapshot, with a journal over it, or torn; never
/// in state.json (an older host refuses fields it does not know).
#[test]
fn the_legacy_fingerprint_goes_with_its_own_snapshot_only() {
    let fp = format!("sha256:{}", "ab".repeat(32));
    let root = tempfile::tempdir().unwrap();
    let dir = store_dir(root.path());
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.state.firewall_generation = Some(7);
    s.state.firewall_legacy = Some(fp.clone());
    s.save().unwrap();
    let text = fs::read_to_string(dir.join("state.json")).unwrap();
    assert!(!text.contains(&fp) && !text.contains("legacy"), "{text}");
    assert_eq!(
        peek(root.path()).unwrap().unwrap().firewall_legacy,
        Some(fp.clone())
    );
    drop(s);
    let mut s = Store::open(root.path()).unwrap();
    assert_eq!(s.state.firewall_legacy, Some(fp.clone()));

    // A journal over the snapshot: an apply had begun changing things.
    s.record("a", Op::Own(owned("a"))).unwrap();
    assert_eq!(peek(root.path()).unwrap().unwrap().firewall_legacy, None);
    s.save().unwrap();
    assert_eq!(
        peek(root.path()).unwrap().unwrap().firewall_legacy,
        Some(fp.clone())
    );

    // Beside another snapshot (written by a host that knew nothing of it): not believed.
    let kept = fs::read(dir.join(LEGACY)).unwrap();
    s.state.firewall_legacy = None;
    s.state.firewall_generation = Some(8);
    s.save().unwrap();
    assert!(!dir.join(LEGACY).exists(), "a save without one removes it");
    fs::write(dir.join(LEGACY), &kept).unwrap();
    assert_eq!(peek(root.path()).unwrap().unwrap().firewall_legacy, None);

    // Torn: the right digest, half a fingerprint.
    s.state.firewall_legacy = Some(fp.clone());
    s.save().unwrap();
    let whole = fs::read(dir.join(LEGACY)).unwrap();
    fs::write(dir.join(LEGACY), &whole[..whole.len() - 10]).unwrap();
    assert_eq!(peek(root.path()).unwrap().unwrap().firewall_legacy, None);
}

/// A look before the lock whose state was marked after it was read: the open under the lock
/// that takes it over keeps the mark, and one that reads the files again does not, so each test
/// below tells which of the two it did.
fn marked_look(root: &Path) -> Peeked {
    let mut peeked = peek_to_open(root).unwrap().expect("a store");
    peeked.loaded.state.node = Some("looked".into());
    peeked
}

#[test]
fn an_open_takes_the_look_over_when_the_files_are_the_bytes_it_read() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    s.record("a", Op::Own(owned("a"))).unwrap();
    let peeked = marked_look(root.path());
    drop(s);
    let (s, look) = Store::open_after(root.path(), peeked).unwrap();
    assert!(matches!(look, Look::TakenOver));
    assert_eq!(s.state.node.as_deref(), Some("looked"));
    assert_eq!(ids(&s.state), ["a"]);
    // As any open: the journal found is folded into the snapshot at once.
    assert!(journal_of(root.path()).is_none());
    assert_eq!(peek(root.path()).unwrap().unwrap(), s.state);
}

#[test]
fn an_open_reads_the_store_again_when_the_snapshot_changed_after_the_look() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    drop(s);
    let peeked = marked_look(root.path());
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n2".into());
    s.save().unwrap();
    drop(s);
    let (s, look) = Store::open_after(root.path(), peeked).unwrap();
    let Look::Changed(looked) = look else {
        panic!("a changed snapshot was taken over");
    };
    assert_eq!(looked.state().node.as_deref(), Some("looked"));
    assert_eq!(s.state.node.as_deref(), Some("n2"));
}

#[test]
fn an_open_reads_the_store_again_when_the_journal_changed_after_the_look() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    s.record("a", Op::Own(owned("a"))).unwrap();
    let snapshot = || fs::read(store_dir(root.path()).join("state.json")).unwrap();
    let before = snapshot();
    let peeked = marked_look(root.path());
    // Another record appended under the same lock: the snapshot is the one the look read.
    s.record("b", Op::Own(owned("b"))).unwrap();
    assert_eq!(snapshot(), before);
    drop(s);
    let (s, look) = Store::open_after(root.path(), peeked).unwrap();
    assert!(
        matches!(look, Look::Changed(_)),
        "a changed journal was taken over"
    );
    assert_eq!(s.state.node.as_deref(), Some("n1"));
    assert_eq!(ids(&s.state), ["a", "b"]);
}

#[test]
fn an_open_reads_the_store_again_when_a_journal_was_begun_after_the_look() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    let peeked = marked_look(root.path());
    s.record("a", Op::Own(owned("a"))).unwrap();
    drop(s);
    let (s, look) = Store::open_after(root.path(), peeked).unwrap();
    assert!(
        matches!(look, Look::Changed(_)),
        "a new journal was taken over"
    );
    assert_eq!(s.state.node.as_deref(), Some("n1"));
    assert_eq!(ids(&s.state), ["a"]);
}

/// A journal begun over a snapshot this process read, or wrote, names that snapshot: its digest,
/// made only then, is of the bytes on disk (a wrong one would leave the journal stale, its
/// records unread).
#[test]
fn a_journal_begun_over_a_snapshot_read_or_written_names_it() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    s.state.node = Some("n1".into());
    s.save().unwrap();
    s.record("a", Op::Own(owned("a"))).unwrap();
    assert_eq!(ids(&peek(root.path()).unwrap().unwrap()), ["a"]);
    drop(s);
    // Read with no journal beside it (folded by an open before), by an open and by a look it
    // takes over.
    for taken_over in [false, true] {
        drop(Store::open(root.path()).unwrap());
        assert!(journal_of(root.path()).is_none());
        let mut s = if taken_over {
            let peeked = peek_to_open(root.path()).unwrap().unwrap();
            let (s, look) = Store::open_after(root.path(), peeked).unwrap();
            assert!(matches!(look, Look::TakenOver));
            s
        } else {
            Store::open(root.path()).unwrap()
        };
        let id = format!("b{taken_over}");
        s.record(&id, Op::Own(owned(&id))).unwrap();
        let j = String::from_utf8(journal_of(root.path()).unwrap()).unwrap();
        let snapshot = fs::read(store_dir(root.path()).join("state.json")).unwrap();
        assert!(j.contains(&digest(&snapshot)), "{j}");
        assert!(ids(&peek(root.path()).unwrap().unwrap()).contains(&id.as_str()));
    }
}

/// The inode and bytes of state.json: a save renames a new file over it, so a store not written
/// keeps its inode.
fn snapshot_file(root: &Path) -> (u64, Vec<u8>) {
    use std::os::unix::fs::MetadataExt;
    let path = store_dir(root).join("state.json");
    (fs::metadata(&path).unwrap().ino(), fs::read(&path).unwrap())
}

/// An act that changed nothing writes nothing; any change, a journal to fold, a record put
/// in the place of another, a field set, is written as before.
#[test]
fn a_store_unchanged_since_it_was_opened_is_not_written_again() {
    let root = tempfile::tempdir().unwrap();
    let mut s = Store::open(root.path()).unwrap();
    // A store never written is written, whatever it is compared with.
    let opened = s.state.opened();
    assert!(s.save_unless(Some(&opened)).unwrap());
    s.state.node = Some("n1".into());
    s.record("a", Op::Own(owned("a"))).unwrap();
    s.record("b", Op::Own(owned("b"))).unwrap();
    s.save().unwrap();
    drop(s);

    // Opened again, nothing changed: not written, not even the same bytes renamed over it.
    let mut s = Store::open(root.path()).unwrap();
    let before = snapshot_file(root.path());
    let opened = s.state.opened();
    // A record put in the place of an equal one changes nothing.
    s.state.record_owned(owned("a"));
    assert!(!s.save_unless(Some(&opened)).unwrap());
    assert_eq!(snapshot_file(root.path()), before);
    // Without an `opened` to compare with, a save is a save.
    assert!(s.save_unless(None).unwrap());
    assert_ne!(snapshot_file(root.path()).0, before.0);
    drop(s);

    // Each of these is a change, and is written.
    type Change = fn(&mut Store);
    let changes: [(&str, Change); 6] = [
        ("a record another", |s| {
            let mut a = owned("a");
            a.digest = Some("sha256:other".into());
            s.state.record_owned(a);
        }),
        ("a record removed", |s| {
            s.state.forget_owned("b", Shape::File, "/etc/b")
        }),
        ("a record journaled", |s| {
            s.record("c", Op::Own(owned("c"))).unwrap();
        }),
        ("a field", |s| s.state.firewall_generation = Some(9)),
        ("the legacy fingerprint", |s| {
            s.state.firewall_legacy = Some(format!("sha256:{}", "cd".repeat(32)));
        }),
        ("a held record", |s| {
            s.state.record_held(Held {
                id: "h".into(),
                module: None,
                shape: Shape::File,
                key: "/etc/h".into(),
                digest: None,
                stamp: None,
            });
        }),
    ];
    for (what, change) in changes {
        let mut s = Store::open(root.path()).unwrap();
        let before = snapshot_file(root.path());
        let opened = s.state.opened();
        change(&mut s);
        assert!(s.save_unless(Some(&opened)).unwrap(), "{what}");
        assert_ne!(snapshot_file(root.path()), before, "{what}");
    }
}
