//! The container engine's own API over its unix socket, for the one question asked on every
//! preflight and inventory: which containers run, with their images and published ports. One
//! request (`GET /containers/json`, which Docker and Podman's compatible service both answer)
//! where the CLI takes a listing process and an inspecting one. Only reads; every change still
//! goes through the CLI, read back by inspect.

use super::{Container, RuntimeKind};
use crate::declaration::{Proto, PublishedPort};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How long the engine has to answer; past it the caller falls back to the CLI, whose calls
/// have deadlines of their own.
const ANSWER: Duration = Duration::from_secs(10);

/// The engine's socket, as its CLI would find it: `DOCKER_HOST` / `CONTAINER_HOST` when they name
/// a unix socket, else the runtime's default path. `None` for an engine reached otherwise (tcp,
/// ssh): then only the CLI knows the way.
pub fn socket(kind: RuntimeKind, var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    match var(kind.host_var()).filter(|v| !v.is_empty()) {
        Some(v) => v.strip_prefix("unix://").map(PathBuf::from),
        None => Some(PathBuf::from(match kind {
            RuntimeKind::Docker => "/var/run/docker.sock",
            RuntimeKind::Podman => "/run/podman/podman.sock",
        })),
    }
}

/// Why the engine's API did not answer with a container list.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("engine API at {}: {source}", socket.display())]
    Io {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("engine API at {}: no end of headers", socket.display())]
    NoHeaders { socket: PathBuf },
    #[error("engine API at {}: GET {path} answered {status:?}", socket.display())]
    Status {
        socket: PathBuf,
        path: String,
        status: String,
    },
    #[error("engine API at {}: a chunked answer to HTTP/1.0", socket.display())]
    Chunked { socket: PathBuf },
    #[error("engine API: not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("engine API: the container list is not a JSON array")]
    NotArray,
}

/// The running containers, from one `GET /containers/json`.
pub fn running(socket: &std::path::Path) -> Result<Vec<Container>, ApiError> {
    let body = get(socket, "/containers/json")?;
    parse_list(&body)
}

/// One HTTP/1.0 GET (the engine closes the connection after answering, so the body is what
/// follows the headers up to the end), refused unless the status is 200.
fn get(socket: &std::path::Path, path: &str) -> Result<Vec<u8>, ApiError> {
    let what = |source: std::io::Error| ApiError::Io {
        socket: socket.to_path_buf(),
        source,
    };
    let mut s = UnixStream::connect(socket).map_err(what)?;
    s.set_read_timeout(Some(ANSWER)).map_err(what)?;
    s.set_write_timeout(Some(ANSWER)).map_err(what)?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: engine\r\n\r\n").as_bytes())
        .map_err(what)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(what)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| ApiError::NoHeaders {
            socket: socket.to_path_buf(),
        })?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ApiError::Status {
            socket: socket.to_path_buf(),
            path: path.to_string(),
            status: status.to_string(),
        });
    }
    if head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    }) {
        return Err(ApiError::Chunked {
            socket: socket.to_path_buf(),
        });
    }
    Ok(answer[split + 4..].to_vec())
}

/// The listing's containers: name, image, published ports, labels and state (what the preflight
/// and `inventory` read; a container's full configuration is the CLI's `inspect`).
fn parse_list(body: &[u8]) -> Result<Vec<Container>, ApiError> {
    let all: Value = serde_json::from_slice(body).map_err(ApiError::NotJson)?;
    let items = all.as_array().ok_or(ApiError::NotArray)?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut out = Vec::new();
    for c in items {
        let name = c["Names"]
            .as_array()
            .and_then(|n| n.first())
            .map(|n| text(n).trim_start_matches('/').to_string())
            .unwrap_or_default();
        let mut ports: Vec<PublishedPort> = c["Ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let host_port = u16::try_from(p["PublicPort"].as_u64()?).ok()?;
                let container_port = u16::try_from(p["PrivatePort"].as_u64()?).ok()?;
                let proto = match p["Type"].as_str()? {
                    "tcp" => Proto::Tcp,
                    "udp" => Proto::Udp,
                    _ => return None,
                };
                let addr = text(&p["IP"]);
                Some(PublishedPort {
                    host_address: (!addr.is_empty()).then_some(addr),
                    host_port,
                    container_port,
                    proto,
                })
            })
            .collect();
        ports.sort_by(|a, b| {
            (a.host_port, a.container_port, &a.host_address).cmp(&(
                b.host_port,
                b.container_port,
                &b.host_address,
            ))
        });
        ports.dedup();
        let labels: BTreeMap<String, String> = c["Labels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), text(v)))
            .collect();
        let state = text(&c["State"]);
        out.push(Container {
            id: text(&c["Id"]),
            name,
            image: text(&c["Image"]),
            image_id: text(&c["ImageID"]),
            command: text(&c["Command"])
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            env: BTreeMap::new(),
            ports,
            restart: String::new(),
            networks: Vec::new(),
            labels,
            running: state == "running",
            status: state,
            exit_code: 0,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_gives_names_images_and_published_ports() {
        let body = br#"[{"Id":"abc","Names":["/web"],"Image":"lab/busybox:1","ImageID":"sha256:1",
            "Command":"/bin/httpd -f","State":"running","Labels":{"mesh-host.id":"web/c"},
            "Ports":[{"IP":"0.0.0.0","PrivatePort":80,"PublicPort":8082,"Type":"tcp"},
                     {"IP":"::","PrivatePort":80,"PublicPort":8082,"Type":"tcp"},
                     {"PrivatePort":53,"Type":"udp"}]}]"#;
        let c = &parse_list(body).unwrap()[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_str(), c.running),
            ("web", "lab/busybox:1", true)
        );
        assert_eq!(c.ports.len(), 2, "{:?}", c.ports);
        assert_eq!(c.ports[0].host_port, 8082);
        assert_eq!(c.labels["mesh-host.id"], "web/c");
        assert!(parse_list(b"{}").is_err());
    }

    #[test]
    fn the_socket_is_found_as_the_cli_finds_it() {
        let none = |_: &str| None;
        assert_eq!(
            socket(RuntimeKind::Docker, none),
            Some(PathBuf::from("/var/run/docker.sock"))
        );
        let set = |_: &str| Some("unix:///tmp/d.sock".to_string());
        assert_eq!(
            socket(RuntimeKind::Docker, set),
            Some(PathBuf::from("/tmp/d.sock"))
        );
        let tcp = |_: &str| Some("tcp://10.0.0.1:2375".to_string());
        assert_eq!(socket(RuntimeKind::Podman, tcp), None);
    }
}
