//! Raw `bpf(2)` calls over libc: maps, program load, netfilter links, pins and test runs.
//!
//! Each `bpf_attr` variant is its own `#[repr(C)]` struct laid out as the kernel's UAPI says; the
//! kernel accepts a shorter attribute than it knows (the rest reads as zero), so each struct
//! stops at the last field used here.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::error::{Errno, Error, Result};

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_MAP_DELETE_ELEM: i32 = 3;
const BPF_MAP_GET_NEXT_KEY: i32 = 4;
const BPF_PROG_LOAD: i32 = 5;
const BPF_OBJ_PIN: i32 = 6;
const BPF_OBJ_GET: i32 = 7;
const BPF_PROG_TEST_RUN: i32 = 10;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_MAP_GET_FD_BY_ID: i32 = 14;
const BPF_LINK_CREATE: i32 = 28;
const BPF_LINK_GET_FD_BY_ID: i32 = 30;
const BPF_LINK_GET_NEXT_ID: i32 = 31;
const BPF_LINK_DETACH: i32 = 34;
/// `SO_NETNS_COOKIE` (Linux 5.14).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// `BPF_MAP_TYPE_HASH`.
pub const MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_LPM_TRIE`: longest-prefix match, which the kernel requires unpreallocated.
pub const MAP_TYPE_LPM_TRIE: u32 = 11;
const BPF_F_NO_PREALLOC: u32 = 1;
/// `BPF_PROG_TYPE_NETFILTER` (Linux 6.4).
pub const PROG_TYPE_NETFILTER: u32 = 32;
/// `BPF_NETFILTER`, the attach type of a netfilter link.
pub const ATTACH_NETFILTER: u32 = 45;
/// `BPF_LINK_TYPE_NETFILTER`.
pub const LINK_TYPE_NETFILTER: u32 = 10;
/// `BPF_F_NETFILTER_IP_DEFRAG` (Linux 6.6): fragments reach the program reassembled.
pub const F_NETFILTER_IP_DEFRAG: u32 = 1;

/// `BPF_OBJ_NAME_LEN`.
const NAME_LEN: usize = 16;

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; NAME_LEN],
}

#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; NAME_LEN],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct ObjPin {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
}

#[repr(C)]
#[derive(Default)]
struct InfoByFd {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateNf {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    pf: u32,
    hooknum: u32,
    priority: i32,
    nf_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkDetach {
    link_fd: u32,
}

/// What the kernel says of a link (`struct bpf_link_info`, netfilter part).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    pub link_type: u32,
    pub id: u32,
    pub prog_id: u32,
    _pad: u32,
    pub pf: u32,
    pub hooknum: u32,
    pub priority: i32,
    pub flags: u32,
}

/// What the kernel says of a program (the head of `struct bpf_prog_info`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ProgInfo {
    pub prog_type: u32,
    pub id: u32,
    pub tag: [u8; 8],
    pub jited_prog_len: u32,
    pub xlated_prog_len: u32,
    pub jited_prog_insns: u64,
    pub xlated_prog_insns: u64,
    pub load_time: u64,
    pub created_by_uid: u32,
    pub nr_map_ids: u32,
    pub map_ids: u64,
    pub name: [u8; NAME_LEN],
}

impl ProgInfo {
    /// The program's name as loaded (up to 15 bytes).
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// The head of `struct bpf_map_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MapInfo {
    pub map_type: u32,
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub name: [u8; NAME_LEN],
}

impl MapInfo {
    /// The map's name as created (up to 15 bytes).
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

fn bpf<T>(cmd: i32, attr: &mut T) -> std::result::Result<i64, Errno> {
    // SAFETY: `attr` is a live, properly sized `#[repr(C)]` prefix of `union bpf_attr`; every
    // pointer in it refers to memory that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if rc < 0 {
        Err(Errno::last())
    } else {
        Ok(rc)
    }
}

fn fd_of(rc: i64) -> OwnedFd {
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
}

fn name16(name: &str) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    for (o, b) in out.iter_mut().zip(name.bytes().take(NAME_LEN - 1)) {
        *o = b;
    }
    out
}

fn fail(op: &'static str, what: &str, errno: Errno) -> Error {
    Error::Bpf {
        op,
        what: what.to_string(),
        errno,
        log: None,
    }
}

/// Creates a hash map of `max` entries.
pub fn map_create(name: &str, key_size: u32, value_size: u32, max: u32) -> Result<OwnedFd> {
    map_create_of(MAP_TYPE_HASH, 0, name, key_size, value_size, max)
}

/// Creates a longest-prefix-match map of `max` entries (keys: a u32 prefix length, then data).
pub fn map_create_lpm(name: &str, key_size: u32, value_size: u32, max: u32) -> Result<OwnedFd> {
    map_create_of(
        MAP_TYPE_LPM_TRIE,
        BPF_F_NO_PREALLOC,
        name,
        key_size,
        value_size,
        max,
    )
}

fn map_create_of(
    map_type: u32,
    map_flags: u32,
    name: &str,
    key_size: u32,
    value_size: u32,
    max: u32,
) -> Result<OwnedFd> {
    let mut a = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries: max,
        map_flags,
        map_name: name16(name),
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut a)
        .map(fd_of)
        .map_err(|e| fail("map create", &format!("map {name}"), e))
}

/// Sets `key` to `value` in a map, creating or replacing it.
pub fn map_update(map: &OwnedFd, what: &str, key: &[u8], value: &[u8]) -> Result<()> {
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a)
        .map(drop)
        .map_err(|e| fail("map update", what, e))
}

/// Deletes `key` from a map; a key that is not there is no error.
pub fn map_delete(map: &OwnedFd, what: &str, key: &[u8]) -> Result<()> {
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_DELETE_ELEM, &mut a) {
        Ok(_) | Err(Errno(libc::ENOENT)) => Ok(()),
        Err(e) => Err(fail("map delete", what, e)),
    }
}

/// Whether `key` is in a map, and its value.
pub fn map_lookup(
    map: &OwnedFd,
    what: &str,
    key: &[u8],
    value_size: usize,
) -> Result<Option<Vec<u8>>> {
    let mut value = vec![0u8; value_size];
    let mut a = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut a) {
        Ok(_) => Ok(Some(value)),
        Err(Errno(libc::ENOENT)) => Ok(None),
        Err(e) => Err(fail("map lookup", what, e)),
    }
}

/// Every key of a map, in the kernel's order.
pub fn map_keys(map: &OwnedFd, what: &str, key_size: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let mut prev: Option<Vec<u8>> = None;
    loop {
        let mut next = vec![0u8; key_size];
        let mut a = MapElem {
            map_fd: map.as_raw_fd() as u32,
            key: prev.as_ref().map_or(0, |p| p.as_ptr() as u64),
            value: next.as_mut_ptr() as u64,
            ..Default::default()
        };
        match bpf(BPF_MAP_GET_NEXT_KEY, &mut a) {
            Ok(_) => {
                keys.push(next.clone());
                prev = Some(next);
            }
            Err(Errno(libc::ENOENT)) => return Ok(keys),
            Err(e) => return Err(fail("map list", what, e)),
        }
        if keys.len() > 1 << 16 {
            return Err(fail("map list", what, Errno(libc::E2BIG)));
        }
    }
}

/// Loads a netfilter program; on refusal the error carries the verifier's log.
pub fn prog_load_netfilter(name: &str, insns: &[u64]) -> Result<OwnedFd> {
    let license = CString::new("GPL").expect("no NUL");
    let mut log = vec![0u8; 1 << 20];
    let mut a = ProgLoad {
        prog_type: PROG_TYPE_NETFILTER,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name16(name),
        expected_attach_type: ATTACH_NETFILTER,
        ..Default::default()
    };
    bpf(BPF_PROG_LOAD, &mut a).map(fd_of).map_err(|errno| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        // The verifier's last lines say why; the whole trace can be long.
        let tail: Vec<&str> = text.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Error::Bpf {
            op: "program load",
            what: format!("netfilter program {name}"),
            errno,
            log: Some(tail.join("\n")),
        }
    })
}

/// Attaches a netfilter program at one hook of one family.
pub fn link_create_netfilter(
    prog: &OwnedFd,
    pf: u32,
    hooknum: u32,
    priority: i32,
    flags: u32,
) -> Result<OwnedFd> {
    let mut a = LinkCreateNf {
        prog_fd: prog.as_raw_fd() as u32,
        attach_type: ATTACH_NETFILTER,
        pf,
        hooknum,
        priority,
        nf_flags: flags,
        ..Default::default()
    };
    bpf(BPF_LINK_CREATE, &mut a).map(fd_of).map_err(|e| {
        fail(
            "link create",
            &format!("netfilter link pf {pf} hook {hooknum} priority {priority}"),
            e,
        )
    })
}

/// Detaches a link from its hook (the link object lives on while pinned or held).
pub fn link_detach(link: &OwnedFd, what: &str) -> Result<()> {
    let mut a = LinkDetach {
        link_fd: link.as_raw_fd() as u32,
    };
    bpf(BPF_LINK_DETACH, &mut a)
        .map(drop)
        .map_err(|e| fail("link detach", what, e))
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("pin", &path.display().to_string(), Errno(libc::EINVAL)))
}

/// Pins an object at a path in a bpffs.
pub fn obj_pin(fd: &OwnedFd, path: &Path) -> Result<()> {
    let p = c_path(path)?;
    let mut a = ObjPin {
        pathname: p.as_ptr() as u64,
        bpf_fd: fd.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf(BPF_OBJ_PIN, &mut a)
        .map(drop)
        .map_err(|e| fail("pin", &path.display().to_string(), e))
}

/// Opens a pinned object; `None` when nothing is pinned there.
pub fn obj_get(path: &Path) -> Result<Option<OwnedFd>> {
    let p = c_path(path)?;
    let mut a = ObjPin {
        pathname: p.as_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_OBJ_GET, &mut a) {
        Ok(fd) => Ok(Some(fd_of(fd))),
        Err(Errno(libc::ENOENT)) => Ok(None),
        Err(e) => Err(fail("open pin", &path.display().to_string(), e)),
    }
}

fn info<T: Default>(fd: &OwnedFd, what: &str) -> Result<T> {
    let mut out = T::default();
    let mut a = InfoByFd {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: &mut out as *mut T as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map_err(|e| fail("info", what, e))?;
    Ok(out)
}

/// What the kernel says of a link.
pub fn link_info(fd: &OwnedFd, what: &str) -> Result<LinkInfo> {
    info(fd, what)
}

/// What the kernel says of a program.
pub fn prog_info(fd: &OwnedFd, what: &str) -> Result<ProgInfo> {
    info(fd, what)
}

/// What the kernel says of a map.
pub fn map_info(fd: &OwnedFd, what: &str) -> Result<MapInfo> {
    info(fd, what)
}

/// Runs a program once on a packet (`BPF_PROG_TEST_RUN`) with a context; returns its verdict.
pub fn prog_test_run(prog: &OwnedFd, data: &[u8], ctx: &[u8]) -> Result<u32> {
    let mut a = TestRun {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: data.len() as u32,
        data_in: data.as_ptr() as u64,
        repeat: 1,
        ctx_size_in: ctx.len() as u32,
        ctx_in: if ctx.is_empty() {
            0
        } else {
            ctx.as_ptr() as u64
        },
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut a).map_err(|e| fail("test run", "netfilter program", e))?;
    Ok(a.retval)
}

#[repr(C)]
#[derive(Default)]
struct GetId {
    start_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// The id of the next link after `start` in the kernel's (all namespaces'), `None` past the
/// last (`BPF_LINK_GET_NEXT_ID`).
pub fn link_next_id(start: u32) -> Result<Option<u32>> {
    next_id(BPF_LINK_GET_NEXT_ID, start, "links")
}

fn next_id(cmd: i32, start: u32, what: &str) -> Result<Option<u32>> {
    let mut a = GetId {
        start_id: start,
        ..Default::default()
    };
    match bpf(cmd, &mut a) {
        Ok(_) => Ok(Some(a.next_id)),
        Err(Errno(libc::ENOENT)) => Ok(None),
        Err(e) => Err(fail("next id", what, e)),
    }
}

/// How long an object the kernel is still making is waited for (see [`fd_by_id`]).
pub const LINK_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Opens an object by its kernel id; `None` when it is gone (between the listing and the
/// opening).
///
/// A link has its id from the moment its maker primes it, but the kernel answers `EAGAIN` for
/// it until the attach has settled it (or failed, and freed the id): any process's attach in
/// any namespace, a guard probe refused at a held priority among them, shows up so in the
/// walk. Such an object is asked again until it settles or goes, for up to [`LINK_SETTLE`]; one
/// still unsettled then is named in the error, never guessed at. (Programs and maps get their
/// ids only once made, and never answer so.)
fn fd_by_id(cmd: i32, id: u32, what: &str) -> Result<Option<OwnedFd>> {
    let deadline = std::time::Instant::now() + LINK_SETTLE;
    loop {
        let mut a = GetId {
            start_id: id,
            ..Default::default()
        };
        match bpf(cmd, &mut a) {
            Ok(fd) => return Ok(Some(fd_of(fd))),
            Err(Errno(libc::ENOENT)) => return Ok(None),
            Err(Errno(libc::EAGAIN)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Err(e) => return Err(fail("open by id", &format!("{what} {id}"), e)),
        }
    }
}

/// Opens a link by its kernel id (`BPF_LINK_GET_FD_BY_ID`); `None` when it is gone; one still
/// being attached is waited for ([`fd_by_id`]).
pub fn link_by_id(id: u32) -> Result<Option<OwnedFd>> {
    fd_by_id(BPF_LINK_GET_FD_BY_ID, id, "link")
}

/// Opens a program by its kernel id (`BPF_PROG_GET_FD_BY_ID`); `None` when it is gone.
pub fn prog_by_id(id: u32) -> Result<Option<OwnedFd>> {
    fd_by_id(BPF_PROG_GET_FD_BY_ID, id, "program")
}

/// Opens a map by its kernel id (`BPF_MAP_GET_FD_BY_ID`); `None` when it is gone.
pub fn map_by_id(id: u32) -> Result<Option<OwnedFd>> {
    fd_by_id(BPF_MAP_GET_FD_BY_ID, id, "map")
}

/// The ids of the maps a program uses (`bpf_prog_info.map_ids`).
pub fn prog_map_ids(fd: &OwnedFd, what: &str) -> Result<Vec<u32>> {
    let mut ids = vec![0u32; 16];
    let mut out = ProgInfo {
        nr_map_ids: ids.len() as u32,
        map_ids: ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut a = InfoByFd {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<ProgInfo>() as u32,
        info: &mut out as *mut ProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map_err(|e| fail("info", what, e))?;
    ids.truncate((out.nr_map_ids as usize).min(16));
    Ok(ids)
}

/// The calling thread's network namespace's cookie (`SO_NETNS_COOKIE`), which the kernel never
/// gives two namespaces.
pub fn netns_cookie() -> Result<u64> {
    // SAFETY: socket returns a new descriptor or -1; it is owned at once.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(fail("socket", "the namespace's cookie", Errno::last()));
    }
    let s = fd_of(s as i64);
    let mut cookie = 0u64;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            &mut cookie as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(fail("getsockopt", "SO_NETNS_COOKIE", Errno::last()));
    }
    Ok(cookie)
}
