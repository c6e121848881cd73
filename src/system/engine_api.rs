//! The container engine's own API over its unix socket, for the questions asked on every
//! preflight, inventory and apply: which containers run, with their images and published ports
//! (`GET /containers/json`, which Docker and Podman's compatible service both answer), and which
//! bridges the engine's networks use (`GET /networks`, Podman's `libpod/networks/json`); and,
//! for the resident host, a stream of the engine's network events. One request where the CLI
//! takes a listing process and an inspecting one. Only reads; every change still goes through the
//! CLI, read back by inspect.

use super::engine_json::Listed;
use super::{Container, RuntimeKind};
use crate::declaration::{Proto, PublishedPort};
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
    let listed: Vec<Listed> = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() && !body.trim_ascii_start().starts_with(b"[") {
            ApiError::NotArray
        } else {
            ApiError::NotJson(e)
        }
    })?;
    Ok(listed.into_iter().map(listed_container).collect())
}

/// A listed container as the host speaks of it.
fn listed_container(c: Listed) -> Container {
    let name = c
        .names
        .first()
        .map(|n| n.trim_start_matches('/').to_string())
        .unwrap_or_default();
    let mut ports: Vec<PublishedPort> = c
        .ports
        .iter()
        .filter_map(|p| {
            let host_port = u16::try_from(p.public_port?).ok()?;
            let container_port = u16::try_from(p.private_port?).ok()?;
            let proto = match p.proto.as_str() {
                "tcp" => Proto::Tcp,
                "udp" => Proto::Udp,
                _ => return None,
            };
            Some(PublishedPort {
                host_address: (!p.ip.is_empty()).then(|| p.ip.clone()),
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
    Container {
        id: c.id,
        name,
        image: c.image,
        image_id: c.image_id,
        command: c.command.split_whitespace().map(str::to_string).collect(),
        env: BTreeMap::new(),
        ports,
        restart: String::new(),
        networks: Vec::new(),
        labels: c.labels,
        running: c.state == "running",
        status: c.state,
        exit_code: 0,
    }
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
        assert!(matches!(parse_list(b"{}"), Err(ApiError::NotArray)));
        assert!(matches!(parse_list(b"[{"), Err(ApiError::NotJson(_))));
    }

    /// Recorded answers of Docker 20.10 and of Podman 4.3's compatible service (a container
    /// publishing 80/tcp on every address, 81/tcp on 127.0.0.1 and 82/udp, and one publishing
    /// nothing on a network of its own).
    #[test]
    fn recorded_listings_are_read() {
        for (file, base) in [("docker", 18080), ("podman", 28080)] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/fixtures/engine/{file}-containers.json"));
            let all = parse_list(&std::fs::read(&path).unwrap()).unwrap();
            let web = all.iter().find(|c| c.name == "web").expect(file);
            assert!(web.running, "{file}");
            assert_eq!(web.labels["mesh-host.id"], "web/c", "{file}");
            assert_eq!(web.command, ["/bin/httpd", "-f", "-p", "80"], "{file}");
            let published: Vec<(u16, u16, Proto, Option<&str>)> = web
                .ports
                .iter()
                .map(|p| {
                    (
                        p.host_port,
                        p.container_port,
                        p.proto,
                        p.host_address.as_deref(),
                    )
                })
                .collect();
            // Docker names every address 0.0.0.0 (and ::); Podman leaves it out.
            assert!(
                published
                    .iter()
                    .any(|p| (p.0, p.1, p.2) == (base, 80, Proto::Tcp)
                        && matches!(p.3, None | Some("0.0.0.0"))),
                "{file}: {published:?}"
            );
            assert!(
                published.contains(&(base + 1, 81, Proto::Tcp, Some("127.0.0.1"))),
                "{file}: {published:?}"
            );
            assert!(
                published
                    .iter()
                    .any(|p| p.0 == base + 2 && p.2 == Proto::Udp),
                "{file}: {published:?}"
            );
            let quiet = all.iter().find(|c| c.name == "quiet").expect(file);
            assert!(quiet.ports.is_empty(), "{file}: {:?}", quiet.ports);
        }
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
