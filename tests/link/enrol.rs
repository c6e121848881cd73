//! `mesh-host enrol --token-file`: the identity kept with the key private, every bad token refused with
//! its reason and nothing stored, and a wrong fingerprint refused before the broker sees anything.

use super::{bed, root};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn store(root: &Path) -> std::path::PathBuf {
    root.join("var/lib/mesh-host")
}

#[test]
fn enrol_keeps_the_identity_and_a_key_that_never_leaves_the_node() {
    let bed = bed();
    let mut ctl = bed.controller();
    let (_d, r) = root();
    let issued = ctl.issue("enrol-ok", Duration::from_secs(600)).unwrap();
    let out = bed.enrol(&r, &issued.text);
    assert!(out.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("enrolled as node enrol-ok"),
        "{}",
        out.stdout
    );

    let link = store(&r).join("link.json");
    let key = store(&r).join("node.key");
    assert_eq!(mode(&link), 0o600, "link.json holds the broker password");
    assert_eq!(mode(&key), 0o600, "node.key is the node's private key");
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&link).unwrap()).unwrap();
    assert_eq!(kept["node"], "enrol-ok");
    assert_eq!(kept["broker"]["fingerprint"], bed.rabbit.fingerprint);
    assert_eq!(kept["broker"]["addrs"][0], bed.relay.addr());
    assert_eq!(kept["credentials"]["user"], "node.enrol-ok");
    assert_eq!(kept["credentials"]["password"], issued.password);
    assert_eq!(kept["controller"], issued.token.controller);

    // The controller received the node's public key (and the profile and inventory), which is
    // the public half of the key kept on the node; the private half appears nowhere in it.
    let got = ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    assert_eq!(got.len(), 1);
    let seed_b64 = std::fs::read_to_string(&key).unwrap();
    use base64::Engine as _;
    let seed: [u8; 32] = base64::engine::general_purpose::STANDARD
        .decode(seed_b64.trim())
        .unwrap()
        .try_into()
        .unwrap();
    let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    assert_eq!(
        got[0].public_key,
        base64::engine::general_purpose::STANDARD.encode(public.as_bytes())
    );
    assert!(got[0].profile.is_object(), "profile: {}", got[0].profile);
    assert!(
        got[0].inventory.is_object(),
        "inventory: {}",
        got[0].inventory
    );
    let sent = serde_json::to_string(&got[0]).unwrap();
    assert!(!sent.contains(seed_b64.trim()), "the private key was sent");
    assert!(!link_text_has(&link, seed_b64.trim()));
    // Its one-time user is gone: the token cannot be used again.
    assert!(!bed
        .rabbit
        .ctl()
        .run(&["list_users"])
        .unwrap()
        .stdout
        .contains(&format!("enrol.{}", issued.token.id)));
}

fn link_text_has(p: &Path, needle: &str) -> bool {
    std::fs::read_to_string(p).unwrap().contains(needle)
}

/// Runs enrol with a bad token: exit 2, every reason on stderr, nothing stored.
fn refused(token: &str, reason: &str) {
    let (_d, r) = root();
    let out = bed().enrol(&r, token);
    assert_eq!(
        out.status.code(),
        Some(2),
        "token {token:.40}: {}\n{}\nbroker log:\n{}",
        out.stdout,
        out.stderr,
        tail(&bed().rabbit.log())
    );
    assert!(
        out.stderr.contains(reason),
        "expected {reason:?} in:\n{}",
        out.stderr
    );
    assert!(out.stderr.contains("nothing was stored"), "{}", out.stderr);
    assert!(
        !store(&r).exists(),
        "a refused token stored something under {}",
        store(&r).display()
    );
}

#[test]
fn every_bad_token_is_refused_with_its_reason_and_nothing_is_stored() {
    let bed = bed();
    let mut ctl = bed.controller();
    refused("hello", "does not start with \"mesh1.\"");
    refused("mesh1.%%%", "not URL-safe base64");
    let issued = ctl.issue("enrol-bad", Duration::from_secs(600)).unwrap();
    refused(&issued.text[..issued.text.len() - 7], "token");

    let mut expired = issued.token.clone();
    expired.expires = link::now_secs() - 30;
    refused(&expired.encode(), "expires: it expired");

    let mut broken = issued.token.clone();
    broken.fingerprint = "zz".into();
    broken.controller = "AAAA".into();
    // Both problems are named at once.
    refused(&broken.encode(), "fingerprint:");
    refused(&broken.encode(), "controller:");

    // Used once: the second use finds the token's one reply gone …
    let (_d, first) = root();
    let out = bed.enrol(&first, &issued.text);
    assert!(out.success(), "{}", out.stderr);
    refused(&issued.text, "already used");
    // … and once the controller has read the request, the one-time user itself is gone.
    assert_eq!(
        ctl.take_enrolments(Duration::from_secs(20)).unwrap().len(),
        1
    );
    refused(&issued.text, "were refused");
}

#[test]
fn a_wrong_fingerprint_is_refused_before_the_broker_sees_an_authentication_attempt() {
    let bed = bed();
    let mut ctl = bed.controller();
    let issued = ctl.issue("enrol-pin", Duration::from_secs(600)).unwrap();
    let user = format!("enrol.{}", issued.token.id);
    let mut wrong = issued.token.clone();
    wrong.fingerprint = "0".repeat(64);
    let seen_before = bed.rabbit.log().len();

    let (_d, r) = root();
    let out = bed.enrol(&r, &wrong.encode());
    assert_eq!(out.status.code(), Some(3), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(&bed.rabbit.fingerprint) && out.stderr.contains(&"0".repeat(64)),
        "names both fingerprints: {}",
        out.stderr
    );
    assert!(!store(&r).exists(), "nothing stored");

    // The node saw the broker's own certificate (its fingerprint is named above), so the TLS
    // handshake reached the broker; and the broker logged nothing after it: no AMQP connection
    // accepted (logged once a handshake completes), no login of the user, refused or granted.
    std::thread::sleep(Duration::from_millis(300));
    let log = bed.rabbit.log();
    let quoted = format!("'{user}'");
    let seen: Vec<&str> = log[seen_before..]
        .lines()
        .filter(|l| l.contains(&quoted))
        .filter(|l| !l.contains("Created user") && !l.contains("Successfully set"))
        .collect();
    assert!(seen.is_empty(), "the broker saw the user: {seen:#?}");
    // The one-time secret was not spent: the right token still enrols.
    let out = bed.enrol(&r, &issued.text);
    assert!(out.success(), "{}", out.stderr);
    let login = format!("user '{user}' authenticated");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !bed.rabbit.log()[seen_before..].contains(&login) {
        assert!(
            std::time::Instant::now() < deadline,
            "with the right fingerprint the broker logs the login"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}
