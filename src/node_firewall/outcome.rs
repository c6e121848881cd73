//! What the node's firewall phases did, as values: the guard's two layers, the flip or the
//! return, the derived filter. Each is read by its fields (whether it failed, whether the guard's
//! table was written) and turned into words here only, by its `Display`; the report's JSON keeps
//! those words as its `guard`, `flip` and `filter` strings (docs/json.md).

use firewall::bpf::{BpfReport, Loaded};
use firewall::{GuardReport, GuardSpec, GuardTable, Retired};
use serde::{Serialize, Serializer};
use std::fmt;

/// The guard's layers when both hold, as the briefing and `firewall status` name them.
pub const LAYERS_BOTH: &str =
    "guard: table inet mesh_host + netfilter BPF (pinned): holds through any ruleset change";

/// The guard's layer where the kernel has no netfilter BPF for it, with its measured window.
pub const LAYERS_TABLE_ALONE: &str = "guard: table inet mesh_host alone: a foreign flush or \
     reload removes it until the resident host writes it back (measured on kernel 6.18: about \
     8.6 ms per reload, 432 of 3,043 probes through across 50 reloads)";

/// The guard written in both its layers: the spec put in force, how its table stood and whether
/// it was written, and how its netfilter BPF layer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardWritten {
    pub spec: GuardSpec,
    pub table: GuardReport,
    pub bpf: BpfLayer,
}

impl GuardWritten {
    /// Whether the guard's table (its chain or rules) had to be written.
    pub fn table_written(&self) -> bool {
        self.table.changed
    }

    /// Whether either layer had to be written.
    pub fn changed(&self) -> bool {
        self.table.changed || matches!(&self.bpf, BpfLayer::Loaded(r) if r.changed)
    }
}

/// How the guard's netfilter BPF layer stands after it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpfLayer {
    /// Loaded and pinned beside the table.
    Loaded(BpfReport),
    /// The kernel refused it (or has no netfilter BPF): the table holds alone; the error's words.
    NotLoaded(String),
}

impl fmt::Display for BpfLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfLayer::Loaded(r) => {
                write!(
                    f,
                    "{LAYERS_BOTH} (links {}",
                    match r.loaded {
                        Loaded::Created => "attached and pinned",
                        Loaded::Reclaimed => "reclaimed",
                        Loaded::Replaced => "replaced",
                        Loaded::Found => "found in the kernel unpinned and pinned again",
                    }
                )?;
                if !r.detached.is_empty() {
                    write!(
                        f,
                        "; {} more of this node's guard links detached",
                        r.detached.len()
                    )?;
                }
                write!(
                    f,
                    ", ports and interfaces {})",
                    if r.changed { "written" } else { "unchanged" }
                )
            }
            BpfLayer::NotLoaded(e) => {
                write!(f, "{LAYERS_TABLE_ALONE}; netfilter BPF not loaded: {e}")
            }
        }
    }
}

impl fmt::Display for GuardWritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = &self.spec;
        let ports: Vec<String> = spec
            .ports
            .iter()
            .map(|p| {
                if p.container_port == p.host_port {
                    format!("{} {}", p.what, p.host_port)
                } else {
                    format!(
                        "{} {} (container port {})",
                        p.what, p.host_port, p.container_port
                    )
                }
            })
            .collect();
        write!(
            f,
            "refusing {} on this node's own addresses except on {}",
            ports.join(" and "),
            spec.allowed.join(", ")
        )?;
        if let Some(p) = &spec.private {
            let ranges: Vec<String> = p.ranges.iter().map(|r| r.to_string()).collect();
            let from = if ranges.is_empty() {
                "no source (no private range)".to_string()
            } else {
                ranges.join(", ")
            };
            write!(f, " and on {} from {from}", p.interface)?;
        }
        if spec.runtimes.is_empty() {
            write!(f, ", and no runtime bridge reported")?;
        } else {
            write!(
                f,
                ", and at the container ports routed to {}",
                spec.runtimes.join(", ")
            )?;
        }
        let table = match self.table.table {
            GuardTable::Created => "created".to_string(),
            GuardTable::Present => "plain table".to_string(),
            GuardTable::Replaced(old) => format!("replaced {} with a plain table", old.describe()),
            GuardTable::HeldBy(port) => {
                format!("held by another process, netlink port {port}, and in force")
            }
        };
        write!(
            f,
            " ({table}; {}); {}",
            if self.table.changed {
                "written"
            } else {
                "unchanged"
            },
            self.bpf
        )
    }
}

/// One part of the phase before the resources as the report keeps it: what it did, or the
/// error that stopped it, in words (the report outlives the error, and its JSON says it so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<T> {
    Done(T),
    Failed(String),
}

impl<T> Part<T> {
    /// Whether this part failed (the briefing marks its line `failed`).
    pub fn failed(&self) -> bool {
        matches!(self, Part::Failed(_))
    }
}

/// The guard as the report says it.
pub type GuardSaid = Part<GuardWritten>;

impl fmt::Display for GuardSaid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Done(g) => g.fmt(f),
            Part::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

impl<E: fmt::Display> From<&Result<GuardWritten, E>> for GuardSaid {
    fn from(r: &Result<GuardWritten, E>) -> Self {
        match r {
            Ok(g) => Part::Done(g.clone()),
            Err(e) => Part::Failed(e.to_string()),
        }
    }
}

/// Which change of the node's firewall kind a step made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Flip,
    Return,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Flip => "flip",
            Step::Return => "return",
        }
    }
}

/// What the flip did, with the found firewall saved and the derived filter loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flipped {
    /// The derived filter's openings, its ssh ports and the sources ssh is admitted from
    /// (`None`: anywhere; else the private interface and the operator's addresses).
    pub openings: usize,
    pub ssh: Vec<u16>,
    pub ssh_from: Option<(String, Vec<String>)>,
    /// The guard's table went in the same transaction.
    pub guard_removed: bool,
    /// How the guard's BPF layer went (or why it could not).
    pub bpf: BpfRemoved,
    /// What was retired, each as [`Retired::describe`] says it.
    pub retired: Vec<Retired>,
    /// What became of each boot unit of the found firewall.
    pub units: Vec<UnitFate>,
}

/// What the flip did with the guard's BPF layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpfRemoved {
    Removed,
    NonePinned,
    /// It could not be removed: the error's words.
    Failed(String),
}

/// What the flip or the return did with one boot unit of the found firewall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitFate {
    Disabled(String),
    Enabled(String),
    /// Not asked: the service manager is confined (a root other than `/`): why.
    Confined {
        unit: String,
        why: String,
    },
    Unknown(String),
    NotEnabled(String),
}

impl fmt::Display for UnitFate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitFate::Disabled(u) => write!(f, "{u} disabled (not stopped)"),
            UnitFate::Enabled(u) => write!(f, "{u} enabled"),
            UnitFate::Confined { unit, why } => write!(f, "{unit}: left as it is ({why})"),
            UnitFate::Unknown(u) => write!(
                f,
                "{u}: the service manager could not say whether it is enabled, so it is left as \
                 it is"
            ),
            UnitFate::NotEnabled(u) => write!(f, "{u} was not enabled at boot; left so"),
        }
    }
}

fn units(f: &mut fmt::Formatter<'_>, units: &[UnitFate]) -> fmt::Result {
    if units.is_empty() {
        return Ok(());
    }
    let words: Vec<String> = units.iter().map(ToString::to_string).collect();
    write!(f, "; {}", words.join(", "))
}

impl fmt::Display for Flipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ssh: Vec<String> = self.ssh.iter().map(u16::to_string).collect();
        let from = match &self.ssh_from {
            None => "anywhere".to_string(),
            Some((i, addrs)) if addrs.is_empty() => i.clone(),
            Some((i, addrs)) => format!("{i} and {}", addrs.join(", ")),
        };
        let retired: Vec<String> = self.retired.iter().map(Retired::describe).collect();
        write!(
            f,
            "derived filter loaded (drop by default; {} opening(s), ssh {} from {from}){}; {}; \
             found firewall retired, never flushed: {}",
            self.openings,
            ssh.join(","),
            if self.guard_removed {
                ", the guard removed in the same transaction"
            } else {
                ""
            },
            match &self.bpf {
                BpfRemoved::Removed => "the guard's netfilter BPF layer removed",
                BpfRemoved::NonePinned => "no netfilter BPF layer was pinned",
                BpfRemoved::Failed(e) => e,
            },
            if retired.is_empty() {
                "none was found".to_string()
            } else {
                retired.join("; ")
            },
        )?;
        units(f, &self.units)
    }
}

/// What the return did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returned {
    /// The store held no flip.
    NothingFlipped,
    /// The found firewall put back as saved, and its boot units.
    Restored {
        restored: Vec<Retired>,
        units: Vec<UnitFate>,
    },
}

impl fmt::Display for Returned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Returned::NothingFlipped => write!(f, "nothing was flipped"),
            Returned::Restored { restored, units: u } => {
                let words: Vec<String> = restored.iter().map(Retired::describe).collect();
                write!(
                    f,
                    "found firewall restored as saved: {}",
                    if words.is_empty() {
                        "none had been retired".to_string()
                    } else {
                        words.join("; ")
                    }
                )?;
                units(f, u)?;
                write!(f, "; derived filter unloaded")
            }
        }
    }
}

/// What the phase before the resources did to the node's firewall kind: the `flip` of the
/// report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlipSaid {
    /// A derived filter was left on an adopted node (a return a resident host raced): removed.
    StrayFilterRemoved,
    Flipped(Flipped),
    Returned(Returned),
    /// The flip or the return failed: the error's words.
    Failed {
        step: Step,
        error: String,
    },
}

impl FlipSaid {
    pub fn failed(&self) -> bool {
        matches!(self, FlipSaid::Failed { .. })
    }
}

impl fmt::Display for FlipSaid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlipSaid::StrayFilterRemoved => {
                write!(
                    f,
                    "a derived filter was loaded on this adopted node; removed"
                )
            }
            FlipSaid::Flipped(x) => write!(f, "flip: {x}"),
            FlipSaid::Returned(x) => write!(f, "return: {x}"),
            FlipSaid::Failed { step, error } => write!(f, "{} failed: {error}", step.as_str()),
        }
    }
}

/// How the derived filter stands on a flipped node: the `filter` of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterSaid {
    /// Loaded by the flip itself.
    LoadedByFlip { openings: usize },
    /// The ruleset is at the generation the last apply left: not listed.
    AsLeft { generation: super::Generation },
    /// Ensured: whether it had to be written.
    Ensured { openings: usize, written: bool },
    /// It could not be loaded: the error's words.
    Failed(String),
}

impl FilterSaid {
    pub fn failed(&self) -> bool {
        matches!(self, FilterSaid::Failed(_))
    }
}

impl fmt::Display for FilterSaid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterSaid::LoadedByFlip { openings } => write!(
                f,
                "drop by default, admitting {openings} opening(s) (loaded by the flip)"
            ),
            FilterSaid::AsLeft { generation } => write!(
                f,
                "in force as the last apply left it ({generation} unchanged)"
            ),
            FilterSaid::Ensured { openings, written } => write!(
                f,
                "drop by default, admitting {openings} opening(s) ({})",
                if *written { "written" } else { "unchanged" }
            ),
            FilterSaid::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// The report's JSON keeps each part as its words (docs/json.md: `guard`, `flip`, `filter`).
macro_rules! as_words {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    )*};
}
as_words!(GuardSaid, FlipSaid, FilterSaid);

#[cfg(test)]
mod tests {
    use super::*;

    fn written(bpf: BpfLayer, changed: bool) -> GuardWritten {
        let mut spec = GuardSpec::for_node(15432, 15672, Some("wg0"))
            .container_ports(5432, 15672)
            .private_ranges(&[firewall::Network {
                addr: "10.0.0.0".parse().unwrap(),
                len: 24,
            }]);
        spec.add_runtime_bridge("docker0");
        GuardWritten {
            spec,
            table: GuardReport {
                table: GuardTable::Created,
                changed,
            },
            bpf,
        }
    }

    #[test]
    fn the_guard_is_read_by_its_fields_and_said_in_one_line() {
        let bpf = BpfLayer::Loaded(BpfReport {
            loaded: Loaded::Reclaimed,
            changed: false,
            link_ids: vec![1, 2, 3, 4],
            detached: vec![9],
        });
        let g = written(bpf, true);
        assert!(g.table_written() && g.changed());
        assert_eq!(
            g.to_string(),
            format!(
                "refusing store 15432 (container port 5432) and broker-management 15672 on this \
                 node's own addresses except on lo, docker0 and on wg0 from 10.0.0.0/24, and at \
                 the container ports routed to docker0 (created; written); {LAYERS_BOTH} (links \
                 reclaimed; 1 more of this node's guard links detached, ports and interfaces \
                 unchanged)"
            )
        );
        let alone = written(BpfLayer::NotLoaded("bpf refused".into()), false);
        assert!(!alone.table_written() && !alone.changed());
        assert!(alone.to_string().ends_with(&format!(
            "(created; unchanged); {LAYERS_TABLE_ALONE}; netfilter BPF not loaded: bpf refused"
        )));
        let failed: GuardSaid = Part::Failed("loading the guard: EPERM".into());
        assert!(failed.failed());
        assert_eq!(failed.to_string(), "failed: loading the guard: EPERM");
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            serde_json::json!("failed: loading the guard: EPERM")
        );
    }

    #[test]
    fn a_failed_flip_or_filter_says_so_by_its_variant() {
        let flip = FlipSaid::Failed {
            step: Step::Return,
            error: "restoring the found firewall: EPERM".into(),
        };
        assert!(flip.failed() && !FlipSaid::StrayFilterRemoved.failed());
        assert_eq!(
            flip.to_string(),
            "return failed: restoring the found firewall: EPERM"
        );
        let returned = FlipSaid::Returned(Returned::Restored {
            restored: Vec::new(),
            units: vec![UnitFate::Enabled("nftables.service".into())],
        });
        assert_eq!(
            returned.to_string(),
            "return: found firewall restored as saved: none had been retired; nftables.service \
             enabled; derived filter unloaded"
        );
        let filter = FilterSaid::Ensured {
            openings: 2,
            written: false,
        };
        assert!(!filter.failed() && FilterSaid::Failed("x".into()).failed());
        assert_eq!(
            serde_json::to_value(&filter).unwrap(),
            serde_json::json!("drop by default, admitting 2 opening(s) (unchanged)")
        );
    }
}
