//! The foundation's ports: the inputs of genesis that outlive it as the node's settings. The
//! type itself is the firewall crate's ([`FoundationPorts`]), shared by the core's settings and
//! the openings engine; here are the defaults genesis uses and `--ports`.

pub use firewall::{FoundationPorts, Proto};

/// The private network's interface when genesis is not told another.
pub const DEFAULT_PRIVATE_INTERFACE: &str = "mesh0";

/// The private network's range when genesis is not told another.
pub const DEFAULT_PRIVATE_RANGE: &str = "10.77.0.0/24";

/// Applies `--ports store=5432,registry=5001,…` over `base`, naming every problem.
pub fn with_overrides(base: FoundationPorts, spec: &str) -> Result<FoundationPorts, Vec<String>> {
    let mut ports = base;
    let mut problems = Vec::new();
    let mut given: Vec<&str> = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, value)) = item.split_once('=') else {
            problems.push(format!("--ports: {item:?} is not NAME=PORT"));
            continue;
        };
        if given.contains(&name) {
            problems.push(format!("--ports: {name} is given twice"));
            continue;
        }
        given.push(name);
        let port = match value.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                problems.push(format!("--ports: {name}={value}: port must be 1-65535"));
                continue;
            }
        };
        match ports.slot(name) {
            Some(slot) => *slot = port,
            None => problems.push(format!(
                "--ports: unknown port {name:?}; the foundation's ports are store, bus, broker-management, registry, hub"
            )),
        }
    }
    let each = ports.each();
    // Every foundation port is distinct, whatever its protocol: the node's settings refuse two
    // of one number, so `--ports` does too, naming itself rather than the bundle.
    for (i, (a, pa, _)) in each.iter().enumerate() {
        for (b, pb, _) in &each[i + 1..] {
            if pa == pb {
                problems.push(format!("--ports: {a} and {b} are both port {pa}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(ports)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_is_given() {
        let p = with_overrides(FoundationPorts::default(), "registry=5001, store=15432").unwrap();
        assert_eq!(p.registry, 5001);
        assert_eq!(p.store, 15432);
        assert_eq!(p.bus, 5672);
    }

    #[test]
    fn ports_are_distinct_across_protocols() {
        let e = with_overrides(FoundationPorts::default(), "hub=5432").unwrap_err();
        assert_eq!(
            e,
            vec!["--ports: store and hub are both port 5432".to_string()]
        );
    }

    #[test]
    fn every_problem_is_named() {
        let e = with_overrides(
            FoundationPorts::default(),
            "registry=0,nope=1,bus,store=5672",
        )
        .unwrap_err();
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].contains("registry=0"));
        assert!(e[1].contains("unknown port \"nope\""));
        assert!(e[2].contains("\"bus\" is not NAME=PORT"));
        assert!(e[3].contains("store and bus are both port 5672"));
    }
}
