//! The declaration: the ordered list of resources a node is told to hold, its mode and settings.
//!
//! The types here are what a validated document deserializes into. Validation itself (every
//! problem named at once, each with its JSON path) lives in [`validate`], which runs over the raw
//! JSON before these types are ever built, so a document that reaches them is already known good.

pub mod openings;
mod resource_de;
pub mod validate;

use crate::build::Build;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use validate::{parse, validate_value, Problem, Problems};

/// The only declaration format version this host speaks.
pub const FORMAT_VERSION: u32 = 1;

/// Whether a node keeps what it finds (adopted) or converges everything it is told (converged).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Adopted,
    Converged,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Adopted => "adopted",
            Mode::Converged => "converged",
        }
    }
}

/// Where a declaration came from. Actions are accepted from the first two only.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Carried with the binary (genesis).
    Bundle,
    /// A person at the machine (rescue).
    Local,
    /// The controller, over the link.
    Link,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Bundle => "bundle",
            Source::Local => "local",
            Source::Link => "link",
        }
    }
}

/// One document as the controller (or a person, or the bundle) sends it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Declaration {
    pub version: u32,
    pub node: String,
    pub mode: Mode,
    #[serde(default)]
    pub taken: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
    pub resources: Vec<Resource>,
    /// The controller's last word to this node: it releases it. A release names nothing (no
    /// resources, no module taken); the host removes what it owns, reports, drops its identity
    /// and is hosted again. A declaration that merely lists no resources is never a release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub release: bool,
    /// What the node owned, as the mesh kept it from the node's last apply report, handed back
    /// with the first declaration after a re-enrolment as the same node. Read by one apply only,
    /// and only when the node has no store: it removes what is no longer declared where the
    /// machine still shows what a record says, and nothing else. Never stored, so never
    /// serialized.
    #[serde(default, skip_serializing)]
    pub recovered: Vec<Owned>,
}

/// A resource the host made or took over: it converges, and it is removed (or forgotten, by the
/// asymmetry) when no longer declared. The store's record (`store::Owned`), defined here because
/// a declaration carries such records recovered from the mesh (`Declaration::recovered`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Owned {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub shape: Shape,
    pub key: String,
    /// A digest of what was written (content for files, the argv for actions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// True when the host took over something it found rather than creating it: such a thing
    /// is never removed, only forgotten, because the host never removes what it did not create.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found: bool,
    /// A file's identity and times when its digest was taken: while the file still shows exactly
    /// these, its digest is the record's and it is not read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<crate::beneath::Stamp>,
    /// The directories the host made on the way to it (they were missing), shallowest first:
    /// removed after it, deepest first and only while empty, so a removal leaves no parent the
    /// host created behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
}

impl Declaration {
    /// Whether this declaration touches the node's firewall: openings, or the guard of an
    /// adopted node.
    pub fn touches_firewall(&self) -> bool {
        self.resources
            .iter()
            .any(|r| matches!(r, Resource::Opening(_)))
            || (self.mode == Mode::Adopted && self.settings.is_some())
    }

    /// Whether a resource of this module converges on an adopted node. A resource with no
    /// module belongs to no module that could ever be taken, so what it finds stays held.
    pub fn is_taken(&self, module: Option<&str>) -> bool {
        match module {
            Some(m) => self.taken.iter().any(|t| t == m),
            None => false,
        }
    }
}

/// The node's settings: the foundation's ports, the private network, and the deadlines of the
/// host's child processes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub ports: Ports,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<PrivateNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlines: Option<run::Deadlines>,
    /// The largest found file whose original is saved whole (default 64 MiB); a larger one is
    /// recorded by its digest only, and the briefing says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub originals_limit_bytes: Option<u64>,
    /// The largest file the host reads whole to take its digest or compare it (default 1 GiB):
    /// a larger found, held or owned file that would have to be read fails its resource, named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_read_limit_bytes: Option<u64>,
    /// How long one whole read of such a file may take, in seconds (default 60): a read past it
    /// fails its resource, named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_read_s: Option<u32>,
}

/// The ports the foundation binds on this node (the catalogue's numbers are only defaults): the
/// firewall crate's one definition, shared with genesis and the openings engine.
pub type Ports = crate::firewall_terms::FoundationPorts;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrivateNetwork {
    pub interface: String,
    /// The private network's range, IPv4 or IPv6.
    pub range: String,
    /// Its IPv6 range when `range` is IPv4 (a network that has both). The guard lets a packet on
    /// `interface` through only from a source in `range` or `range_v6`: a family with no range
    /// here is refused on the private interface like anywhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range_v6: Option<String>,
}

impl PrivateNetwork {
    /// The ranges as networks, `range` then `range_v6`; one that does not parse is left out (a
    /// validated declaration has none).
    pub fn networks(&self) -> Vec<crate::firewall_terms::Network> {
        std::iter::once(&self.range)
            .chain(&self.range_v6)
            .filter_map(|r| validate::parse_cidr(r, false).ok())
            .map(|(addr, len)| crate::firewall_terms::Network { addr, len })
            .collect()
    }
}

/// One resource. Every variant carries its stable `id` and optional `module`. Written with its
/// `type` first and read by it ([`resource_de`]).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Resource {
    File(FileSpec),
    Directory(DirectorySpec),
    Service(ServiceSpec),
    Package(PackageSpec),
    Container(ContainerSpec),
    Action(ActionSpec),
    Opening(OpeningSpec),
}

/// The shape of a resource, as named in declarations, the store and reports.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    File,
    Directory,
    Service,
    Package,
    Container,
    Action,
    Opening,
}

impl Shape {
    pub const ALL: [Shape; 7] = [
        Shape::File,
        Shape::Directory,
        Shape::Service,
        Shape::Package,
        Shape::Container,
        Shape::Action,
        Shape::Opening,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Shape::File => "file",
            Shape::Directory => "directory",
            Shape::Service => "service",
            Shape::Package => "package",
            Shape::Container => "container",
            Shape::Action => "action",
            Shape::Opening => "opening",
        }
    }

    pub fn from_name(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

// What a build refuses is a question about shapes, so it is answered here, beside them: the
// build itself (`build.rs`) knows nothing of declarations.
impl Build {
    /// Why this build refuses a shape, if it does: it has no way to implement it. The refusal is
    /// the one an unknown type gets, with this reason.
    pub fn refusal(&self, shape: Shape) -> Option<String> {
        let (missing, what) = match shape {
            Shape::Service if self.service_manager.is_none() => ("service manager", "service"),
            Shape::Package if self.package_manager.is_none() => ("package manager", "package"),
            Shape::Container if !self.containers => ("container runtime", "container"),
            _ => return None,
        };
        Some(format!(
            "this mesh-host is built for system {:?}, which has no {missing} it may drive, so it \
             cannot apply a {what}; a host that cannot implement a shape refuses it",
            self.system
        ))
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Resource {
    pub fn id(&self) -> &str {
        match self {
            Resource::File(r) => &r.id,
            Resource::Directory(r) => &r.id,
            Resource::Service(r) => &r.id,
            Resource::Package(r) => &r.id,
            Resource::Container(r) => &r.id,
            Resource::Action(r) => &r.id,
            Resource::Opening(r) => &r.id,
        }
    }

    pub fn module(&self) -> Option<&str> {
        match self {
            Resource::File(r) => r.module.as_deref(),
            Resource::Directory(r) => r.module.as_deref(),
            Resource::Service(r) => r.module.as_deref(),
            Resource::Package(r) => r.module.as_deref(),
            Resource::Container(r) => r.module.as_deref(),
            Resource::Action(r) => r.module.as_deref(),
            Resource::Opening(r) => r.module.as_deref(),
        }
    }

    pub fn shape(&self) -> Shape {
        match self {
            Resource::File(_) => Shape::File,
            Resource::Directory(_) => Shape::Directory,
            Resource::Service(_) => Shape::Service,
            Resource::Package(_) => Shape::Package,
            Resource::Container(_) => Shape::Container,
            Resource::Action(_) => Shape::Action,
            Resource::Opening(_) => Shape::Opening,
        }
    }

    /// What the resource is on the machine, unique per shape: a path, a name, or the id for
    /// shapes that have no machine key of their own.
    pub fn key(&self) -> String {
        match self {
            Resource::File(r) => r.path.clone(),
            Resource::Directory(r) => r.path.clone(),
            Resource::Service(r) => r.name.clone(),
            Resource::Package(r) => r.name.clone(),
            Resource::Container(r) => r.name.clone(),
            Resource::Action(r) => r.id.clone(),
            Resource::Opening(r) => r.id.clone(),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub create_once: bool,
}

impl FileSpec {
    /// The bytes the file should hold. Validation has already checked the base64.
    pub fn bytes(&self) -> Vec<u8> {
        use base64::Engine;
        match (&self.content, &self.content_base64) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default(),
            (None, None) => Vec::new(),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirectorySpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    Running,
    Stopped,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub name: String,
    pub state: ServiceState,
    pub enabled: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PackageSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A transport protocol: the firewall crate's one definition.
pub use crate::firewall_terms::Proto;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PublishedPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_address: Option<String>,
    pub host_port: u16,
    pub container_port: u16,
    pub proto: Proto,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub name: String,
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PublishedPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The command that does the work, as an argv array.
    pub run: Vec<String>,
    /// The command that says whether the work is done (exit 0): the action's idempotency check.
    pub verify: Vec<String>,
}

/// Where an opening admits traffic from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(untagged)]
pub enum From {
    /// `"anywhere"` or `"private"`.
    Named(FromName),
    /// Source networks, either family.
    Cidrs(Vec<String>),
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FromName {
    Anywhere,
    Private,
}

/// The path a packet takes to the port: received by the machine, or forwarded to a container.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    Incoming,
    Forwarded,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OpeningSpec {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    pub port: u16,
    pub proto: Proto,
    pub from: From,
    pub path: PathKind,
}

fn is_false(b: &bool) -> bool {
    !*b
}
