//! The broker's names for one node and one token, shared by the node and the controller's side so
//! the permissions the controller grants and the names the node uses cannot drift apart.

/// The topic exchange a node publishes its reports, heartbeats and refusals to.
pub const REPORTS_EXCHANGE: &str = "mesh.reports";
/// The topic exchange an enrolling node publishes its request (public key, profile, inventory) to.
pub const ENROL_EXCHANGE: &str = "mesh.enrol";

/// The node's broker user.
pub fn node_user(node: &str) -> String {
    format!("node.{node}")
}

/// The node's own queue, which it alone may read.
pub fn node_queue(node: &str) -> String {
    format!("node.{node}")
}

/// The routing key of a node's report after an apply.
pub fn report_key(node: &str) -> String {
    format!("report.{node}")
}

/// The routing key of a node's heartbeat.
pub fn heartbeat_key(node: &str) -> String {
    format!("heartbeat.{node}")
}

/// The routing key of a node's refusal of something its queue delivered.
pub fn refusal_key(node: &str) -> String {
    format!("refusal.{node}")
}

/// The one-time user a token's secret is the password of.
pub fn enrol_user(token_id: &str) -> String {
    format!("enrol.{token_id}")
}

/// The queue holding a token's one reply (the node's identity and credentials).
pub fn enrol_queue(token_id: &str) -> String {
    format!("enrol.{token_id}")
}

/// The routing key of a token's enrolment request.
pub fn enrol_key(token_id: &str) -> String {
    format!("enrol.{token_id}")
}

/// A regular expression matching exactly `name` (RabbitMQ permissions are regular expressions).
pub fn exactly(name: &str) -> String {
    let mut out = String::from("^");
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() && c != '-' && c != '_' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('$');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_escapes_the_dots() {
        assert_eq!(exactly("node.a-1"), r"^node\.a-1$");
    }
}
