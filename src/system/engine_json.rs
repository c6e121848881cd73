//! The container engine's JSON as serde-derived structs: the API's container list (`GET
//! /containers/json`) and network list (Docker's `GET /networks`, Podman's libpod list), and the
//! CLI's `container inspect`, `network inspect` and `version --format '{{json .}}'`, Docker's and
//! Podman's spellings both. Only the fields the host reads are named (serde passes over the
//! rest); a field that is missing or `null` reads as empty, as both engines leave fields out or
//! null them by version. Recorded answers of Docker 20.10 and Podman 4.3 are read in the tests
//! (`tests/fixtures/engine/`).

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// A field whose `null` reads as its empty value, as a missing one does (with `default`).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// One container of `GET /containers/json`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Listed {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// Docker's names start with `/`.
    #[serde(deserialize_with = "nullable")]
    pub names: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub image: String,
    #[serde(rename = "ImageID", deserialize_with = "nullable")]
    pub image_id: String,
    /// The command as one line.
    #[serde(deserialize_with = "nullable")]
    pub command: String,
    /// `running`, `exited`, …
    #[serde(deserialize_with = "nullable")]
    pub state: String,
    #[serde(deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<ListedPort>,
}

/// One port of a listed container; a port exposed but not published has no `PublicPort`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ListedPort {
    #[serde(rename = "IP", deserialize_with = "nullable")]
    pub ip: String,
    #[serde(rename = "PrivatePort")]
    pub private_port: Option<u64>,
    #[serde(rename = "PublicPort")]
    pub public_port: Option<u64>,
    /// `tcp`, `udp` (or `sctp`, which the host does not publish).
    #[serde(rename = "Type", deserialize_with = "nullable")]
    pub proto: String,
}

/// One container of `container inspect` (the CLI prints an array of them).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Inspected {
    #[serde(deserialize_with = "nullable")]
    pub id: String,
    /// Docker's starts with `/`.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The image's id.
    #[serde(deserialize_with = "nullable")]
    pub image: String,
    /// Podman's qualified reference (`localhost/x:1`); Docker has none.
    #[serde(deserialize_with = "nullable")]
    pub image_name: String,
    #[serde(deserialize_with = "nullable")]
    pub state: InspectedState,
    #[serde(deserialize_with = "nullable")]
    pub config: InspectedConfig,
    #[serde(deserialize_with = "nullable")]
    pub host_config: HostConfig,
    #[serde(deserialize_with = "nullable")]
    pub network_settings: NetworkSettings,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct InspectedState {
    #[serde(deserialize_with = "nullable")]
    pub status: String,
    #[serde(deserialize_with = "nullable")]
    pub running: bool,
    #[serde(deserialize_with = "nullable")]
    pub exit_code: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct InspectedConfig {
    /// `KEY=value` lines.
    #[serde(deserialize_with = "nullable")]
    pub env: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub cmd: Vec<String>,
    /// The reference as typed (Docker) or qualified (Podman).
    #[serde(deserialize_with = "nullable")]
    pub image: String,
    #[serde(deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HostConfig {
    /// `PORT/PROTO` → where it is published (a port exposed alone has `null`).
    #[serde(deserialize_with = "nullable")]
    pub port_bindings: BTreeMap<String, Option<Vec<PortBinding>>>,
    #[serde(deserialize_with = "nullable")]
    pub restart_policy: RestartPolicy,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PortBinding {
    /// Empty for every address.
    #[serde(deserialize_with = "nullable")]
    pub host_ip: String,
    /// A port number as a string (empty: one the engine picks).
    #[serde(deserialize_with = "nullable")]
    pub host_port: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicy {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetworkSettings {
    /// The networks by name (what each says of the container is not read).
    #[serde(deserialize_with = "nullable")]
    pub networks: BTreeMap<String, serde::de::IgnoredAny>,
}

/// `version --format '{{json .}}'`: Docker's client and server, Podman's client (and its
/// server when a service answers).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Version {
    #[serde(deserialize_with = "nullable")]
    pub client: Versioned,
    #[serde(deserialize_with = "nullable")]
    pub server: Versioned,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Versioned {
    pub version: Option<String>,
    #[serde(deserialize_with = "nullable")]
    pub components: Vec<Component>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Component {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    pub version: Option<String>,
}

/// One network of a network list or `network inspect`: Docker's (`Driver`, `Options`, `Id`)
/// or Podman's (`driver`, `network_interface`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Network {
    #[serde(rename = "Id", deserialize_with = "nullable")]
    pub id: String,
    #[serde(rename = "Driver", deserialize_with = "nullable")]
    pub docker_driver: String,
    #[serde(rename = "Options", deserialize_with = "nullable")]
    pub options: BTreeMap<String, String>,
    #[serde(rename = "driver", deserialize_with = "nullable")]
    pub podman_driver: String,
    /// Podman's: the bridge, or a macvlan or ipvlan network's parent uplink.
    pub network_interface: Option<String>,
}

/// A recorded answer under `tests/fixtures/engine/`, for the unit tests of the engine's readers
/// (the API's JSON here, the CLI's in `cli_runtime.rs`).
#[cfg(test)]
pub(crate) fn recorded(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/engine")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `null` and missing fields read as empty, in every struct.
    #[test]
    fn null_and_missing_read_as_empty() {
        let c: Inspected = serde_json::from_str(
            r#"{"Id":"x","Config":{"Env":null,"Cmd":null,"Labels":null},
                "HostConfig":{"PortBindings":{"80/tcp":null}},"NetworkSettings":null}"#,
        )
        .unwrap();
        assert_eq!(c.id, "x");
        assert!(c.config.env.is_empty() && c.config.cmd.is_empty() && c.config.labels.is_empty());
        assert!(c.host_config.port_bindings["80/tcp"].is_none());
        assert!(c.network_settings.networks.is_empty());
        assert!(!c.state.running);
        let l: Listed = serde_json::from_str(r#"{"Ports":null,"Labels":null}"#).unwrap();
        assert!(l.ports.is_empty() && l.labels.is_empty() && l.names.is_empty());
    }

    /// Every recorded answer reads whole into its struct (a field renamed or retyped by an
    /// engine fails here first).
    #[test]
    fn recorded_answers_read() {
        let listed: Vec<Listed> =
            serde_json::from_slice(&recorded("docker-containers.json")).unwrap();
        assert!(listed.iter().any(|c| !c.ports.is_empty()), "{listed:?}");
        let listed: Vec<Listed> =
            serde_json::from_slice(&recorded("podman-containers.json")).unwrap();
        assert!(listed.iter().any(|c| !c.ports.is_empty()), "{listed:?}");
        for f in ["docker-inspect.json", "podman-inspect.json"] {
            let c: Vec<Inspected> = serde_json::from_slice(&recorded(f)).unwrap();
            assert_eq!(c.len(), 1, "{f}");
            assert!(!c[0].id.is_empty(), "{f}");
            assert!(!c[0].host_config.port_bindings.is_empty(), "{f}");
        }
        for f in ["docker-version.json", "podman-version.json"] {
            let v: Version = serde_json::from_slice(&recorded(f)).unwrap();
            assert!(v.client.version.is_some(), "{f}");
        }
        for f in [
            "docker-networks.json",
            "podman-networks.json",
            "docker-network-inspect.json",
            "podman-network-inspect.json",
        ] {
            let n: Vec<Network> = serde_json::from_slice(&recorded(f)).unwrap();
            assert!(!n.is_empty(), "{f}");
        }
    }
}
