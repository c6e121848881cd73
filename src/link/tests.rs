//! The link's unit tests: private files, identities, released stores, the sink, links planted
//! at the enrolment's files.
use super::*;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::unix::fs::PermissionsExt;
use std::time::SystemTime;

/// Under a root other than `/`, the enrolment's files are written by name in the store's
/// checked directory: a link planted at `link.json`, `node.key` or their temporary names is
/// refused, naming it, and the file it points to outside is untouched.
#[test]
fn links_at_the_enrolments_files_are_never_followed() {
    for name in ["link.json", "node.key", ".link.json.tmp", ".node.key.tmp"] {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "kept\n").unwrap();
        let dir = store::store_dir(root.path());
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(name)).unwrap();
        let real = name.trim_start_matches('.').trim_end_matches(".tmp");
        let e = write_private(root.path(), real, b"new").expect_err(name);
        assert!(format!("{e:#}").contains(name), "{name}: {e:#}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "kept\n",
            "{name}"
        );
    }
}

#[test]
fn private_files_are_0600_and_replaced_whole() {
    let d = tempfile::tempdir().unwrap();
    let p = link_file(d.path());
    write_private(d.path(), "link.json", b"one").unwrap();
    write_private(d.path(), "link.json", b"two").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let left: Vec<_> = std::fs::read_dir(store::store_dir(d.path()))
        .unwrap()
        .collect();
    assert_eq!(left.len(), 1, "no temporary file is left behind");
}

fn identity_at(root: &Path, enrolled_at: u64) {
    std::fs::create_dir_all(store::store_dir(root)).unwrap();
    let key = link::generate_key().unwrap();
    let controller = STANDARD.encode(key.verifying_key().as_bytes());
    save(
        root,
        &Linked {
            node: "n1".into(),
            broker: link::Broker {
                addrs: vec!["127.0.0.1:1".into()],
                fingerprint: "00".repeat(32),
                vhost: "/".into(),
            },
            controller: controller.clone(),
            credentials: link::Credentials {
                user: "n1".into(),
                password: "p".into(),
            },
            token: "t".into(),
            enrolled_at,
            last_version: 7,
            last_contact: None,
            connection: None,
        },
    )
    .unwrap();
    write_private(root, "node.key", STANDARD.encode(key.to_bytes()).as_bytes()).unwrap();
    let marker = ReleasedIdentity {
        node: "n1".into(),
        controller,
        last_version: 7,
        released_at: 200,
    };
    std::fs::write(
        store::store_dir(root).join(store::RELEASED),
        serde_json::to_vec(&marker).unwrap(),
    )
    .unwrap();
}

#[test]
fn an_identity_a_release_left_behind_is_dropped_at_start_and_a_newer_one_is_kept() {
    let d = tempfile::tempdir().unwrap();
    identity_at(d.path(), 100);
    let started = Resident::start(d.path(), Duration::from_secs(1)).unwrap();
    assert!(started.is_none(), "released: no link");
    assert!(!key_file(d.path()).exists() && !link_file(d.path()).exists());

    // Enrolled again after the release: that identity is the node's and its link starts.
    let d = tempfile::tempdir().unwrap();
    identity_at(d.path(), 300);
    let started = Resident::start(d.path(), Duration::from_secs(1)).unwrap();
    let link = started.expect("a link");
    link.handle.stop();
    assert!(key_file(d.path()).exists() && link_file(d.path()).exists());
    assert_eq!(released(d.path()).unwrap().last_version, 7);
}

#[test]
fn a_node_that_never_enrolled_has_no_link() {
    let d = tempfile::tempdir().unwrap();
    assert!(load(d.path()).unwrap().is_none());
    assert!(Resident::start(d.path(), Duration::from_secs(1))
        .unwrap()
        .is_none());
}

#[test]
fn the_sink_queues_the_event_and_wakes_the_poll_loop() {
    let wakeup = Wakeup::new().expect("an eventfd");
    let (tx, rx) = mpsc::channel();
    let wake = Wake {
        tx: std::sync::Mutex::new(tx),
        wakeup,
    };
    link::Sink::event(&wake, link::Event::Contact(SystemTime::now()));
    let mut pfd = [PollFd::new(wake.wakeup.as_fd(), PollFlags::POLLIN)];
    let ready = poll(&mut pfd, PollTimeout::ZERO).expect("poll");
    assert_eq!(ready, 1, "the eventfd is readable");
    assert!(matches!(rx.try_recv(), Ok(link::Event::Contact(_))));
}
