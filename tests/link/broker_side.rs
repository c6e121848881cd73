//! What the broker enforces, through the link's own client in this process: a node's credentials
//! read its own queue and publish its own routing keys and nothing else, and a revoked identity is
//! refused.

use super::bed;
use link::{Broker, Credentials};
use serde_json::json;
use std::time::Duration;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Enrols `node` in this process with the link's own client; returns its credentials.
fn enrol(ctl: &mut lab::Controller, rt: &tokio::runtime::Runtime, node: &str) -> Credentials {
    let issued = ctl.issue(node, Duration::from_secs(600)).unwrap();
    let key = link::generate_key().unwrap();
    use base64::Engine as _;
    let req = link::EnrolRequest {
        token: issued.token.id.clone(),
        node: node.into(),
        public_key: base64::engine::general_purpose::STANDARD
            .encode(key.verifying_key().as_bytes()),
        profile: json!({}),
        inventory: json!({}),
    };
    let id = rt
        .block_on(link::enrol(
            &issued.token,
            &req,
            &link::Resolver::default(),
            Duration::from_secs(30),
        ))
        .unwrap();
    ctl.take_enrolments(Duration::from_secs(20)).unwrap();
    Credentials {
        user: id.user,
        password: id.password,
    }
}

fn broker() -> Broker {
    let b = bed();
    Broker {
        addrs: vec![b.rabbit.addr()],
        fingerprint: b.rabbit.fingerprint.clone(),
        vhost: "/".into(),
    }
}

#[test]
fn node_a_cannot_read_node_b_queue_nor_publish_as_b() {
    let bed = bed();
    let mut ctl = lab::Controller::connect(&bed.rabbit).unwrap();
    let rt = rt();
    let a = enrol(&mut ctl, &rt, "iso-a");
    let _b = enrol(&mut ctl, &rt, "iso-b");
    ctl.declare("iso-b", 1, Duration::from_secs(60), json!({"for": "b"}))
        .unwrap();

    rt.block_on(async {
        let s = link::open(&broker(), &a, Duration::from_secs(30))
            .await
            .unwrap();
        // Its own queue: yes.
        s.consume("node.iso-a", 1)
            .await
            .expect("a reads its own queue");
        let err = match s.consume("node.iso-b", 1).await {
            Ok(_) => panic!("node a consumed node b's queue"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("ACCESS_REFUSED")
                || err.contains("403")
                || err.contains("consuming queue node.iso-b"),
            "{err}"
        );
        s.close().await;

        // Publishing under b's routing key: the broker closes the channel (topic permission).
        let s = link::open(&broker(), &a, Duration::from_secs(30))
            .await
            .unwrap();
        s.publish(
            link::names::REPORTS_EXCHANGE,
            "report.iso-b",
            "report",
            b"{}".to_vec(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !s.chan.is_open(),
            "the broker closed a's channel after it published as b"
        );
        s.close().await;

        // Declaring a queue of its own (configure) is refused too.
        let s = link::open(&broker(), &a, Duration::from_secs(30))
            .await
            .unwrap();
        let r = s
            .chan
            .queue_declare(amqprs::channel::QueueDeclareArguments::new(
                "node.iso-a-extra",
            ))
            .await;
        assert!(r.is_err(), "a declared a queue");
        s.close().await;
    });
    // b's declaration is still there, unread by a.
    let log = bed.rabbit.log();
    assert!(
        log.contains("access to queue 'node.iso-b' in vhost '/' refused for user 'node.iso-a'"),
        "the broker logged the refusal"
    );
    let out = bed
        .rabbit
        .ctl()
        .run(&["list_queues", "name", "messages"])
        .unwrap();
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("node.iso-b\t") || l.starts_with("node.iso-b "))
        .unwrap_or_else(|| panic!("no queue node.iso-b in {}", out.stdout));
    assert!(line.trim_end().ends_with('1'), "{line}");
}

#[test]
fn a_reissued_token_revokes_the_old_identity() {
    let bed = bed();
    let mut ctl = lab::Controller::connect(&bed.rabbit).unwrap();
    let rt = rt();
    let old = enrol(&mut ctl, &rt, "revoke-me");
    let s = rt
        .block_on(link::open(&broker(), &old, Duration::from_secs(30)))
        .expect("the first identity links");
    // Issuing a new token for the node revokes the old identity at once: its open connection is
    // closed by the broker …
    ctl.issue("revoke-me", Duration::from_secs(600)).unwrap();
    rt.block_on(async {
        let closed =
            tokio::time::timeout(Duration::from_secs(10), s.conn.listen_network_io_failure()).await;
        assert!(
            closed.is_ok(),
            "the revoked identity's connection stayed open"
        );
        // … and it cannot link again.
        match link::open(&broker(), &old, Duration::from_secs(30)).await {
            Err(link::Error::Refused { user, .. }) => assert_eq!(user, "node.revoke-me"),
            Err(e) => panic!("expected the credentials to be refused, got {e}"),
            Ok(_) => panic!("the revoked identity linked again"),
        }
        drop(s);
    });
}
