//! A fleet beyond one broker: a real two-member RabbitMQ cluster on this machine, the token naming
//! both members, and a node that fails over to the second when the first goes away.

use super::{declare_and_wait, linked, Bed};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

#[test]
fn a_node_fails_over_to_the_second_member_of_a_cluster() {
    let mut members = lab::Rabbit::cluster(2).expect("a two-member RabbitMQ cluster");
    let second = members.pop().unwrap();
    let first = members.pop().unwrap();
    let status = second.ctl().run(&["cluster_status"]).unwrap().stdout;
    assert!(status.contains(first.node_name()), "{status}");
    // The node reaches each member through a relay; the token names the first, then the second.
    let bed = Bed::around(second);
    let to_first = lab::Relay::start(&bed.node, first.addr().parse().unwrap()).unwrap();
    // The controller works through the second member, so the node's queue lives there (a
    // classic queue lives where it was declared; quorum queues would be replicated).
    let mut ctl =
        lab::Controller::connect_to(&bed.rabbit, vec![to_first.addr(), bed.relay.addr()]).unwrap();
    let node = "cluster-node";
    let (_d, r) = super::enrolled(&bed, &mut ctl, node);
    let host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    assert!(
        host.wait_log(&format!("broker={}", to_first.addr()), 1, WAIT),
        "linked through the first member (users are the cluster's):\n{}",
        host.log()
    );
    // The first member stops: its connections close, its port refuses.
    first.stop().unwrap();
    assert!(
        host.wait_log(&format!("broker={}", bed.relay.addr()), 1, WAIT),
        "linked through the second member:\n{}",
        host.log()
    );
    // The declaration is applied and reported through the second member.
    declare_and_wait(&mut ctl, node, 1, "cluster\n", WAIT);
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "cluster\n"
    );
    drop(host);
    drop(first);
}

#[test]
fn quorum_queues_outlive_the_member_that_led_them() {
    let mut members = lab::Rabbit::cluster(3).expect("a three-member RabbitMQ cluster");
    let third = members.pop().unwrap();
    let second = members.pop().unwrap();
    let first = members.pop().unwrap();
    let bed = Bed::around(second);
    let to_first = lab::Relay::start(&bed.node, first.addr().parse().unwrap()).unwrap();
    let to_third = lab::Relay::start(&bed.node, third.addr().parse().unwrap()).unwrap();
    // The controller declares everything on the first member, so it leads every queue: the
    // node's, the enrolment's and the controller's own.
    let mut ctl = lab::Controller::connect_quorum(
        &first,
        vec![to_first.addr(), bed.relay.addr(), to_third.addr()],
    )
    .unwrap();
    let node = "quorum-node";
    let (_d, r) = super::enrolled(&bed, &mut ctl, node);
    let queues = first
        .ctl()
        .run(&["list_queues", "name", "type", "leader"])
        .unwrap()
        .stdout;
    let line = queues
        .lines()
        .find(|l| l.starts_with(&format!("node.{node}")))
        .unwrap_or_else(|| panic!("{queues}"));
    assert!(
        line.contains("quorum") && line.contains(first.node_name()),
        "the node's queue is a quorum queue led by the first member: {line}"
    );
    let host = bed.resident(&r);
    linked(&mut ctl, node, WAIT);
    // The first member stops: it led the node's queue and held the node's link.
    first.stop().unwrap();
    ctl.reconnect(&bed.rabbit).unwrap();
    assert!(
        host.wait_log(&format!("broker={}", bed.relay.addr()), 1, WAIT),
        "linked through the second member:\n{}",
        host.log()
    );
    // The declaration reaches the node through the queue's new leader.
    declare_and_wait(&mut ctl, node, 1, "quorum\n", WAIT);
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "quorum\n"
    );
    drop(host);
    drop(first);
    drop(third);
}
