//! Recording fakes of the three seams for unit tests: each keeps a small machine in memory, records
//! every verb it is asked, and can be told to say "done" while doing nothing — the lie the
//! appliers' read-back exists to catch.

use super::{
    normalize_image, Container, ContainerRuntime, Error, NewContainer, PackageManager, RuntimeKind,
    ServiceManager, ServiceStatus,
};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

/// A container runtime holding containers by name.
#[derive(Default)]
pub struct FakeRuntime {
    pub containers: RefCell<BTreeMap<String, Container>>,
    /// Every verb asked, as `"run web"`, `"remove web"`, `"start web"`.
    pub calls: RefCell<Vec<String>>,
    /// When set, containers it creates exit at once (a command that fails in the container).
    pub exits: Cell<bool>,
    next: Cell<u32>,
}

impl FakeRuntime {
    fn next_id(&self, what: &str) -> String {
        self.next.set(self.next.get() + 1);
        format!("{what}{:060}", self.next.get())
    }

    /// Puts a container there that the host did not make (a predecessor's), running.
    pub fn found(&self, name: &str, image: &str) -> String {
        let id = self.next_id("f");
        self.containers.borrow_mut().insert(
            name.into(),
            Container {
                id: id.clone(),
                name: name.into(),
                image: image.into(),
                image_id: format!("sha256:{}", normalize_image(image)),
                command: vec!["/bin/sh".into()],
                env: BTreeMap::new(),
                ports: Vec::new(),
                restart: "no".into(),
                networks: vec!["bridge".into()],
                labels: BTreeMap::new(),
                running: true,
                status: "running".into(),
                exit_code: 0,
            },
        );
        id
    }

    /// Stops a container as `docker stop` by somebody else would.
    pub fn stop(&self, name: &str) {
        let mut all = self.containers.borrow_mut();
        let c = all.get_mut(name).expect("container to stop");
        c.running = false;
        c.status = "exited".into();
        c.exit_code = 137;
    }

    pub fn get(&self, name: &str) -> Option<Container> {
        self.containers.borrow().get(name).cloned()
    }

    fn call(&self, verb: &str, name: &str) {
        self.calls.borrow_mut().push(format!("{verb} {name}"));
    }
}

impl ContainerRuntime for FakeRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Docker
    }

    fn version(&self) -> Result<String, Error> {
        Ok("0.0-fake".into())
    }

    fn inspect(&self, name: &str) -> Result<Option<Container>, Error> {
        Ok(self.get(name))
    }

    fn bridges(&self) -> Result<Vec<String>, Error> {
        Ok(vec!["docker0".into()])
    }

    fn run(&self, new: &NewContainer) -> Result<(), Error> {
        self.call("run", &new.name);
        if self.containers.borrow().contains_key(&new.name) {
            return Err(Error::Failed(format!(
                "the container name {:?} is already in use",
                new.name
            )));
        }
        let id = self.next_id("c");
        let mut ports = new.ports.clone();
        super::cli_runtime::sort_ports(&mut ports);
        let mut networks = if new.networks.is_empty() {
            vec!["bridge".to_string()]
        } else {
            new.networks.clone()
        };
        networks.sort();
        let exits = self.exits.get();
        self.containers.borrow_mut().insert(
            new.name.clone(),
            Container {
                id,
                name: new.name.clone(),
                image: new.image.clone(),
                image_id: format!("sha256:{}", normalize_image(&new.image)),
                command: if new.command.is_empty() {
                    vec!["/bin/sh".into()]
                } else {
                    new.command.clone()
                },
                env: new.env.clone(),
                ports,
                restart: new.restart.clone().unwrap_or_else(|| "no".into()),
                networks,
                labels: new.labels.clone(),
                running: !exits,
                status: if exits { "exited" } else { "running" }.into(),
                exit_code: if exits { 1 } else { 0 },
            },
        );
        Ok(())
    }

    fn start(&self, name: &str) -> Result<(), Error> {
        self.call("start", name);
        let exits = self.exits.get();
        match self.containers.borrow_mut().get_mut(name) {
            Some(c) => {
                c.running = !exits;
                c.status = if exits { "exited" } else { "running" }.into();
                Ok(())
            }
            None => Err(Error::Failed(format!("no such container: {name}"))),
        }
    }

    fn remove(&self, name: &str) -> Result<(), Error> {
        self.call("remove", name);
        self.containers.borrow_mut().remove(name);
        Ok(())
    }
}

/// A service manager holding units by name; a name it does not hold is not installed.
#[derive(Default)]
pub struct FakeServices {
    pub units: RefCell<BTreeMap<String, ServiceStatus>>,
    /// Every verb asked, as `"start nginx"`.
    pub calls: RefCell<Vec<String>>,
    /// When set, every verb exits 0 and changes nothing.
    pub inert: Cell<bool>,
}

impl FakeServices {
    /// Installs a unit in the given state.
    pub fn unit(&self, name: &str, running: bool, enabled: bool) {
        self.units.borrow_mut().insert(
            name.into(),
            ServiceStatus {
                installed: true,
                running,
                enabled,
                detail: format!("fake running={running} enabled={enabled}"),
            },
        );
    }

    pub fn get(&self, name: &str) -> Option<ServiceStatus> {
        self.units.borrow().get(name).cloned()
    }

    fn set(&self, verb: &str, name: &str, f: impl FnOnce(&mut ServiceStatus)) -> Result<(), Error> {
        self.calls.borrow_mut().push(format!("{verb} {name}"));
        if self.inert.get() {
            return Ok(());
        }
        match self.units.borrow_mut().get_mut(name) {
            Some(u) => {
                f(u);
                u.detail = format!("fake running={} enabled={}", u.running, u.enabled);
                Ok(())
            }
            None => Err(Error::Failed(format!("Unit {name}.service not found"))),
        }
    }
}

impl ServiceManager for FakeServices {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn status(&self, name: &str) -> Result<ServiceStatus, Error> {
        Ok(self.get(name).unwrap_or(ServiceStatus {
            installed: false,
            running: false,
            enabled: false,
            detail: "LoadState=not-found".into(),
        }))
    }

    fn start(&self, name: &str) -> Result<(), Error> {
        self.set("start", name, |u| u.running = true)
    }

    fn stop(&self, name: &str) -> Result<(), Error> {
        self.set("stop", name, |u| u.running = false)
    }

    fn enable(&self, name: &str) -> Result<(), Error> {
        self.set("enable", name, |u| u.enabled = true)
    }

    fn disable(&self, name: &str) -> Result<(), Error> {
        self.set("disable", name, |u| u.enabled = false)
    }
}

/// A package manager with a repository (name → the version it offers) and what is installed.
#[derive(Default)]
pub struct FakePackages {
    pub repository: RefCell<BTreeMap<String, Vec<String>>>,
    pub installed: RefCell<BTreeMap<String, String>>,
    /// Every install asked, as `"install sl"` or `"install sl=5.02"`.
    pub calls: RefCell<Vec<String>>,
    /// When set, install exits 0 and installs nothing.
    pub inert: Cell<bool>,
}

impl FakePackages {
    /// Offers versions of a package; the last is the newest.
    pub fn offer(&self, name: &str, versions: &[&str]) {
        self.repository.borrow_mut().insert(
            name.into(),
            versions.iter().map(|v| v.to_string()).collect(),
        );
    }
}

impl PackageManager for FakePackages {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn installed(&self, name: &str) -> Result<Option<String>, Error> {
        Ok(self.installed.borrow().get(name).cloned())
    }

    fn install(&self, name: &str, version: Option<&str>) -> Result<(), Error> {
        self.calls.borrow_mut().push(match version {
            Some(v) => format!("install {name}={v}"),
            None => format!("install {name}"),
        });
        let repo = self.repository.borrow();
        let offered = repo
            .get(name)
            .ok_or_else(|| Error::Failed(format!("E: Unable to locate package {name}")))?;
        let pick = match version {
            Some(v) if offered.iter().any(|o| o == v) => v.to_string(),
            Some(v) => {
                return Err(Error::Failed(format!(
                    "E: Version '{v}' for '{name}' was not found"
                )))
            }
            None => offered.last().cloned().unwrap_or_default(),
        };
        if !self.inert.get() {
            self.installed.borrow_mut().insert(name.into(), pick);
        }
        Ok(())
    }
}

/// A temporary node root with its store open, for driving appliers against the fakes.
pub struct Bed {
    pub dir: tempfile::TempDir,
    pub store: crate::store::Store,
    pub runner: run::RecordingRunner,
    /// The node's firewall, a recording fake.
    pub firewall: crate::node_firewall::fake::Recording,
}

impl Default for Bed {
    fn default() -> Self {
        Bed::new()
    }
}

impl Bed {
    pub fn new() -> Bed {
        let dir = tempfile::tempdir().expect("temporary root");
        let store = crate::store::Store::open(dir.path()).expect("store opens");
        Bed {
            dir,
            store,
            runner: run::RecordingRunner::default(),
            firewall: crate::node_firewall::fake::Recording::default(),
        }
    }

    /// The applier context for one declaration.
    pub(crate) fn cx<'a>(
        &'a mut self,
        decl: &'a crate::declaration::Declaration,
    ) -> crate::apply::Cx<'a> {
        crate::apply::Cx {
            root: self.dir.path(),
            beneath: crate::beneath::Root::open(self.dir.path()).expect("root opens"),
            runner: &self.runner,
            store: &mut self.store,
            decl,
            fw: &mut self.firewall,
            openings: None,
            not_admitted: Vec::new(),
            firewall_unchanged: None,
            openings_recorded: false,
            removal: None,
            removal_said: Default::default(),
        }
    }
}

/// A validated declaration of `resources` (JSON) on node `n1`.
pub fn declaration(
    mode: &str,
    taken: &[&str],
    resources: serde_json::Value,
) -> crate::declaration::Declaration {
    let v = serde_json::json!({
        "version": 1, "node": "n1", "mode": mode, "taken": taken, "resources": resources
    });
    crate::declaration::validate_value(&v, crate::declaration::Source::Local)
        .unwrap_or_else(|p| panic!("refused:\n{p}"))
}

/// The real runner with a directory of stub programs first on PATH, for testing a backend end to
/// end against stand-ins of the system's own programs. The stubs find their state through `STUB`,
/// the directory's path; each test's scripts spell out how they behave.
pub struct StubRunner {
    pub dir: tempfile::TempDir,
    path: String,
}

impl Default for StubRunner {
    fn default() -> Self {
        StubRunner::new()
    }
}

impl StubRunner {
    pub fn new() -> StubRunner {
        let dir = tempfile::tempdir().expect("stub directory");
        std::fs::create_dir_all(dir.path().join("bin")).expect("stub bin");
        let path = format!(
            "{}:{}",
            dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        StubRunner { dir, path }
    }

    /// Writes an executable stub program.
    pub fn program(&self, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.dir.path().join("bin").join(name);
        std::fs::write(&p, script).expect("stub program");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// Writes a state file of the stubs (parents created).
    pub fn file(&self, rel: &str, content: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("stub state");
        std::fs::write(p, content).expect("stub state");
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.dir.path().join(rel).exists()
    }

    /// The calls the stubs logged to `$STUB/calls`, one per line; the log is emptied.
    pub fn calls(&self) -> Vec<String> {
        let p = self.dir.path().join("calls");
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let _ = std::fs::remove_file(&p);
        text.lines().map(String::from).collect()
    }
}

impl run::Runner for StubRunner {
    fn call(&self, call: &run::Call<'_>) -> std::io::Result<run::Output> {
        let stub = self.dir.path().display().to_string();
        let mut all = call.env.to_vec();
        all.push(("PATH", &self.path));
        all.push(("STUB", &stub));
        run::SystemRunner.call(&call.env(&all))
    }
}
