//! Loading a corpus fixture into a lab node as its distribution or tool does: the placeholders of
//! its files replaced with the lab's names and addresses, then `nft -f`, an `*-restore`, `sh`,
//! a real fail2ban-server with a ban, or a real Docker engine with a container.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lab::addr::*;
use lab::{Docker, Firewalld, Machine, Probe, Process, Ufw};

use super::catalogue::{Fixture, Step};
use super::{BANNED_NET_V4, BANNED_NET_V6, BANNED_V4, BANNED_V6, PUBLISHED};

/// How long fail2ban may take to start and to write a ban on a loaded two-core machine.
const FAIL2BAN_WAIT: Duration = Duration::from_secs(60);
/// How long a just-started container may take to answer on its published port.
const CONTAINER_WAIT: Duration = Duration::from_secs(60);

/// What a loaded fixture keeps running (fail2ban, the Docker engine) until the fixture is done.
#[derive(Default)]
pub struct Loaded {
    pub docker: Option<Docker>,
    pub daemons: Vec<Process>,
    pub firewalld: Option<Firewalld>,
    pub ufw: Option<Ufw>,
}

impl Loaded {
    /// What the host under test runs behind, as a shell on such a machine sees it: ufw's mount
    /// namespace, firewalld's bus.
    pub fn wrap(&self) -> Vec<String> {
        let mut out = match &self.ufw {
            Some(ufw) => ufw.enter(&[]),
            None => Vec::new(),
        };
        out.push("env".to_owned());
        if let Some(fw) = &self.firewalld {
            out.push(fw.env());
        }
        if let Some(d) = &self.docker {
            out.push(format!("DOCKER_HOST={}", d.docker_host()));
        }
        out
    }
}

/// The folder of the corpus in this checkout.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/found/corpus")
}

/// `text` with the corpus's placeholders replaced by the lab's values (the README lists them).
pub fn substitute(text: &str, etc: &Path, log: &Path) -> String {
    text.replace("@PUBLIC_IF@", PUBLIC_IF)
        .replace("@PRIVATE_IF@", PRIVATE_IF)
        .replace("@BANNED_NET_V4@", BANNED_NET_V4)
        .replace("@BANNED_NET_V6@", BANNED_NET_V6)
        .replace("@BANNED_V4@", &BANNED_V4.to_string())
        .replace("@BANNED_V6@", &BANNED_V6.to_string())
        .replace("@ETC@", &etc.display().to_string())
        .replace("@LOG@", &log.display().to_string())
}

/// Reads a corpus file, placeholders replaced, and writes it below `dir`; returns that path.
fn laid_out(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let src = corpus_dir().join(name);
    let text = std::fs::read_to_string(&src)
        .map_err(|e| format!("reading the fixture {}: {e}", src.display()))?;
    let dst = dir.join(name);
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(
        &dst,
        substitute(&text, &etc_dir(dir), &dir.join("f2b/auth.log")),
    )
    .map_err(|e| format!("writing {}: {e}", dst.display()))?;
    Ok(dst)
}

/// The stand-in for `/etc` of the node: where Alpine's drop-ins are laid out.
fn etc_dir(dir: &Path) -> PathBuf {
    dir.join("etc")
}

fn ok(node: &Machine, argv: &[&str]) -> Result<String, String> {
    node.run_ok(argv)
        .map(|o| o.stdout)
        .map_err(|e| format!("in {}: {e}", node.name()))
}

/// Loads every step of `fixture` into `node`, with its files laid out below `dir`.
pub fn load(fixture: &Fixture, node: &Machine, dir: &Path) -> Result<Loaded, String> {
    let mut loaded = Loaded::default();
    for step in fixture.steps {
        match *step {
            Step::Nft(file) => {
                let path = laid_out(dir, file)?;
                ok(node, &["nft", "-f", path.to_str().unwrap()])?;
            }
            Step::NftWithDropins { file, dropins } => {
                let target = etc_dir(dir).join("nftables.d");
                std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
                let entries = std::fs::read_dir(corpus_dir().join(dropins))
                    .map_err(|e| format!("reading {dropins}: {e}"))?;
                for entry in entries {
                    let name = entry.map_err(|e| e.to_string())?.file_name();
                    let name = name.to_str().unwrap();
                    let laid = laid_out(dir, &format!("{dropins}/{name}"))?;
                    std::fs::copy(&laid, target.join(name)).map_err(|e| e.to_string())?;
                }
                let path = laid_out(dir, file)?;
                ok(node, &["nft", "-f", path.to_str().unwrap()])?;
            }
            Step::Restore {
                program,
                file,
                noflush,
            } => {
                let path = laid_out(dir, file)?;
                let mut argv = vec![program, "--wait=10"];
                if noflush {
                    argv.push("--noflush");
                }
                argv.push(path.to_str().unwrap());
                ok(node, &argv)?;
            }
            Step::Script(file) => {
                let path = laid_out(dir, file)?;
                ok(node, &["sh", path.to_str().unwrap()])?;
            }
            Step::Fail2ban(file) => {
                loaded.daemons.push(fail2ban(node, dir, file)?);
            }
            Step::Docker(file) => {
                loaded.docker = Some(docker(node, dir, file)?);
            }
            Step::Firewalld(file) => {
                let etc = dir.join("firewalld");
                let zone = laid_out(dir, file)?;
                // The machine's /etc/firewalld copied, its default zone the fixture's.
                let copied = lab::run(Command::new("cp").args(["-a", "/etc/firewalld"]).arg(&etc))
                    .map_err(|e| e.to_string())?;
                if !copied.success() {
                    return Err(format!("copying /etc/firewalld: {}", copied.stderr));
                }
                std::fs::create_dir_all(etc.join("zones")).map_err(|e| e.to_string())?;
                std::fs::copy(&zone, etc.join("zones/public.xml")).map_err(|e| e.to_string())?;
                let fw = node
                    .start_firewalld_with(&dir.join("fwd"), &etc)
                    .map_err(|e| format!("firewalld in the node (firewalld, dbus): {e}"))?;
                loaded.firewalld = Some(fw);
            }
            Step::Ufw(file) => {
                let ufw = node
                    .prepare_ufw(&dir.join("ufw"))
                    .map_err(|e| format!("ufw in the node (ufw): {e}"))?;
                let path = laid_out(dir, file)?;
                let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
                for line in text.lines().map(str::trim) {
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let args: Vec<&str> = line.split_whitespace().collect();
                    ufw.cmd(&args).map_err(|e| format!("ufw {line}: {e}"))?;
                }
                loaded.ufw = Some(ufw);
            }
        }
    }
    // A loader that read nothing (an `*-restore` given no file reads its empty standard input and
    // succeeds) would leave a node without a firewall, and every cell would agree for nothing.
    let nft = ok(node, &["nft", "list", "ruleset"])?;
    let legacy = ok(node, &["iptables-legacy-save"])?;
    if nft.trim().is_empty() && !legacy.lines().any(|l| l.starts_with("-A ")) {
        return Err(format!(
            "after loading {} the node has no rules at all",
            fixture.name
        ));
    }
    Ok(loaded)
}

/// Runs Debian's fail2ban-server inside the node with a private copy of `/etc/fail2ban` (its own
/// socket, pid file, database and log under `dir/f2b`, never the machine's), the fixture's jail,
/// and bans the banned source in both families with `fail2ban-client`; returns once the ban is
/// in the node's firewall.
fn fail2ban(node: &Machine, dir: &Path, jail: &str) -> Result<Process, String> {
    for (program, package) in [
        ("fail2ban-server", "fail2ban"),
        ("fail2ban-client", "fail2ban"),
    ] {
        if !Path::new("/usr/bin").join(program).exists() {
            return Err(format!(
                "{program} is not installed: apt-get install {package} (the corpus never skips it)"
            ));
        }
    }
    let f2b = dir.join("f2b");
    let etc = f2b.join("etc");
    std::fs::create_dir_all(&f2b).map_err(|e| e.to_string())?;
    let copied = lab::run(Command::new("cp").args(["-a", "/etc/fail2ban"]).arg(&etc))
        .map_err(|e| e.to_string())?;
    if !copied.success() {
        return Err(format!("copying /etc/fail2ban: {}", copied.stderr));
    }
    // Debian's jail.d enables its sshd jail on the journal; the fixture's jail is the only one.
    for entry in std::fs::read_dir(etc.join("jail.d")).map_err(|e| e.to_string())? {
        std::fs::remove_file(entry.map_err(|e| e.to_string())?.path())
            .map_err(|e| e.to_string())?;
    }
    std::fs::write(f2b.join("auth.log"), "").map_err(|e| e.to_string())?;
    let sock = f2b.join("f2b.sock");
    let pid = f2b.join("f2b.pid");
    std::fs::write(
        etc.join("fail2ban.local"),
        format!(
            "[Definition]\nlogtarget = {}\nsocket = {}\npidfile = {}\ndbfile = {}\nallowipv6 = yes\n",
            f2b.join("fail2ban.log").display(),
            sock.display(),
            pid.display(),
            f2b.join("fail2ban.sqlite3").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let jail_file = laid_out(dir, jail)?;
    std::fs::copy(&jail_file, etc.join("jail.local")).map_err(|e| e.to_string())?;

    let (etc_s, sock_s, pid_s) = (
        etc.to_str().unwrap(),
        sock.to_str().unwrap(),
        pid.to_str().unwrap(),
    );
    let mut server = node
        .spawn(&[
            "fail2ban-server",
            "-f",
            "-x",
            "-c",
            etc_s,
            "-s",
            sock_s,
            "-p",
            pid_s,
        ])
        .map_err(|e| format!("starting fail2ban-server in {}: {e}", node.name()))?;
    let client = |args: &[&str]| {
        let mut argv = vec!["fail2ban-client", "-c", etc_s, "-s", sock_s];
        argv.extend_from_slice(args);
        node.run_timeout(&argv, Duration::from_secs(30))
    };
    let deadline = Instant::now() + FAIL2BAN_WAIT;
    loop {
        if client(&["ping"]).is_ok_and(|o| o.success()) {
            break;
        }
        if !server.is_running() || Instant::now() > deadline {
            return Err(format!(
                "fail2ban-server did not answer in {}: {}\n{}",
                node.name(),
                server.log(),
                std::fs::read_to_string(f2b.join("fail2ban.log")).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (v4, v6) = (BANNED_V4.to_string(), BANNED_V6.to_string());
    let banned = client(&["set", "lab-web", "banip", &v4, &v6]).map_err(|e| e.to_string())?;
    if !banned.success() {
        return Err(format!(
            "fail2ban-client set lab-web banip: {}{}",
            banned.stdout, banned.stderr
        ));
    }
    // The ban is written by the jail's action thread: wait until both addresses are in the rules.
    loop {
        let nft = ok(node, &["nft", "list", "ruleset"])?;
        if nft.contains(&v4) && nft.contains(&v6) {
            return Ok(server);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "fail2ban banned {v4} and {v6} but its rules never showed them:\n{nft}\n{}",
                std::fs::read_to_string(f2b.join("fail2ban.log")).unwrap_or_default()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts Debian's dockerd in the node and runs the fixture's container (busybox httpd on its
/// port 80, published as the fixture's options say); returns once the published port answers
/// from outside.
fn docker(node: &Machine, dir: &Path, file: &str) -> Result<Docker, String> {
    let text = std::fs::read_to_string(corpus_dir().join(file)).map_err(|e| e.to_string())?;
    let options: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let docker = node
        .start_docker(&dir.join("docker"))
        .map_err(|e| format!("a Docker engine in the node (docker.io, busybox-static): {e}"))?;
    docker
        .run_container(
            "web",
            &options,
            &["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
        )
        .map_err(|e| format!("the fixture's container: {e}"))?;
    Ok(docker)
}

/// Waits until the container answers on its published port, asked from the node itself (a
/// connection the node makes is translated at output and never crosses the found firewall's
/// input or forward chains, which may well refuse it from outside before any opening).
pub fn wait_published(node: &Machine) -> Result<(), String> {
    let deadline = Instant::now() + CONTAINER_WAIT;
    loop {
        let got = node
            .probe_tcp(NODE_PUBLIC_V4.into(), PUBLISHED, Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        if got == Probe::Reached {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the container's published port {PUBLISHED} was {got} from the node itself after \
                 {CONTAINER_WAIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
