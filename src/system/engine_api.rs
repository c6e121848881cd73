//! The container engine's own API over its unix socket, for the questions asked on every
//! preflight, inventory and apply: which containers run, with their images and published ports
//! (`GET /containers/json`, which Docker and Podman's compatible service both answer), and which
//! bridges the engine's networks use (`GET /networks`, Podman's `libpod/networks/json`); and,
//! for the resident host, a stream of the engine's network events. One request where the CLI
//! takes a listing process and an inspecting one. Only reads; every change still goes through the
//! CLI, read back by inspect.

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
    #[error("engine API at {}: the network list: {detail}", socket.display())]
    Networks { socket: PathBuf, detail: String },
}

/// The interface names of the engine's bridge networks, from one request: Docker's `GET
/// /networks` (a network's `com.docker.network.bridge.name`, else `br-` and its id's first 12
/// characters, as Docker names it), Podman's `GET /v4.0.0/libpod/networks/json` (its
/// `network_interface`; Podman's Docker-compatible list leaves the bridge's name out).
pub fn bridges(kind: RuntimeKind, socket: &std::path::Path) -> Result<Vec<String>, ApiError> {
    let body = get(socket, networks_path(kind))?;
    super::cli_runtime::parse_bridges(&body).map_err(|e| ApiError::Networks {
        socket: socket.to_path_buf(),
        detail: e.0,
    })
}

/// Where an engine lists its networks with their bridges' names.
fn networks_path(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Docker => "/networks",
        RuntimeKind::Podman => "/v4.0.0/libpod/networks/json",
    }
}

/// The engine's network events as they happen (`GET /events` filtered to networks: Docker's
/// create, connect, disconnect and destroy, Podman's likewise), one blocking connection: each
/// [`NetworkEvents::wait`] returns once the engine has said something more.
pub struct NetworkEvents {
    stream: UnixStream,
    socket: PathBuf,
}

/// `filters={"type":["network"]}`, URL-encoded.
const NETWORK_EVENTS: &str = "/events?filters=%7B%22type%22%3A%5B%22network%22%5D%7D";

impl NetworkEvents {
    /// Connects and asks for the stream; returns once the engine answered 200.
    pub fn open(socket: &std::path::Path) -> Result<NetworkEvents, ApiError> {
        let what = |source: std::io::Error| ApiError::Io {
            socket: socket.to_path_buf(),
            source,
        };
        let mut stream = UnixStream::connect(socket).map_err(what)?;
        stream.set_write_timeout(Some(ANSWER)).map_err(what)?;
        stream.set_read_timeout(Some(ANSWER)).map_err(what)?;
        stream
            .write_all(format!("GET {NETWORK_EVENTS} HTTP/1.0\r\nHost: engine\r\n\r\n").as_bytes())
            .map_err(what)?;
        // The headers, a byte at a time: nothing of the first event is read past them.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() > 16 * 1024 || stream.read(&mut byte).map_err(what)? == 0 {
                return Err(ApiError::NoHeaders {
                    socket: socket.to_path_buf(),
                });
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        let status = head.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) != Some("200") {
            return Err(ApiError::Status {
                socket: socket.to_path_buf(),
                path: NETWORK_EVENTS.to_string(),
                status: status.to_string(),
            });
        }
        // From now on the engine speaks only when something happens.
        stream.set_read_timeout(None).map_err(what)?;
        Ok(NetworkEvents {
            stream,
            socket: socket.to_path_buf(),
        })
    }

    /// Blocks until the engine sends more of the stream (one or more events); an error when
    /// the engine closed it or the connection failed.
    pub fn wait(&mut self) -> Result<(), ApiError> {
        let mut buf = [0u8; 4096];
        match self.stream.read(&mut buf) {
            Ok(0) => Err(ApiError::Io {
                socket: self.socket.clone(),
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }),
            Ok(_) => Ok(()),
            Err(source) => Err(ApiError::Io {
                socket: self.socket.clone(),
                source,
            }),
        }
    }
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
    fn each_engine_is_asked_where_its_list_names_the_bridges() {
        assert_eq!(networks_path(RuntimeKind::Docker), "/networks");
        assert!(networks_path(RuntimeKind::Podman).ends_with("/libpod/networks/json"));
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
