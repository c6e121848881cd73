//! The checks of single values that reach a command line, a path or a ruleset: ids, names,
//! paths, modes, accounts, units, packages, containers, images, arguments and networks.

use super::{is_own_name, own_path, OWN_PACKAGE};
use std::net::IpAddr;

/// Why one declared value is refused: the problem's text, beside the JSON path validation
/// gives it (the value itself is named in the text where it helps).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

pub(crate) fn no_control(s: &str) -> Result<(), Invalid> {
    if s.chars().any(|c| c.is_control()) {
        Err(Invalid("must not contain control characters".into()))
    } else {
        Ok(())
    }
}

pub(crate) fn charset(
    s: &str,
    what: &str,
    max: usize,
    ok: impl Fn(char) -> bool,
) -> Result<(), Invalid> {
    if s.is_empty() {
        return Err(Invalid(format!("{what} must not be empty")));
    }
    if s.len() > max {
        return Err(Invalid(format!("{what} is longer than {max} bytes")));
    }
    if let Some(c) = s.chars().find(|c| !ok(*c)) {
        return Err(Invalid(format!(
            "{what} {s:?} contains {c:?}, which is not allowed"
        )));
    }
    Ok(())
}

/// A resource id: stable, printable, and safe inside a firewall comment.
pub fn check_id(s: &str) -> Result<(), Invalid> {
    charset(s, "id", crate::firewall_terms::opening::MAX_ID_LEN, |c| {
        c.is_ascii_alphanumeric() || "._-/@:".contains(c)
    })
}

pub fn check_module_name(s: &str) -> Result<(), Invalid> {
    charset(s, "module name", 64, |c| {
        c.is_ascii_alphanumeric() || "._-".contains(c)
    })
}

pub(crate) fn check_node_name(s: &str) -> Result<(), Invalid> {
    charset(s, "node name", 63, |c| {
        c.is_ascii_alphanumeric() || "._-".contains(c)
    })
}

/// A Linux interface name: at most 15 bytes, no `/`, no whitespace, not `.` or `..`.
pub fn check_interface(s: &str) -> Result<(), Invalid> {
    charset(s, "interface name", 15, |c| {
        c.is_ascii_alphanumeric() || "._-".contains(c)
    })?;
    if s == "." || s == ".." {
        return Err(Invalid(format!("interface name {s:?} is not allowed")));
    }
    Ok(())
}

/// The kernel's longest path, its terminating NUL included (`PATH_MAX`).
pub const PATH_MAX: usize = 4096;
/// The kernel's longest path component (`NAME_MAX`).
pub const NAME_MAX: usize = 255;
/// The longest last component of a declared file: the host keeps a found one's original as
/// `TAG-NAME` (17 bytes more), which must fit in [`NAME_MAX`]. (Its temporary file's name,
/// `.mesh-host.<16 hex>.tmp`, is 31 bytes whatever the declared name.)
pub const FILE_NAME_MAX: usize = NAME_MAX - 17;

/// A declared file's path: a machine path ([`check_path`]) whose name leaves room for the names
/// the host writes it through.
pub fn check_file_path(p: &str) -> Result<(), Invalid> {
    check_path(p)?;
    let name = p.rsplit('/').next().unwrap_or(p);
    if name.len() > FILE_NAME_MAX {
        return Err(Invalid(format!(
            "file name is {} bytes long; a declared file's name is at most {FILE_NAME_MAX} bytes, \
             so its temporary name and its saved original's name fit in the kernel's NAME_MAX of \
             {NAME_MAX}",
            name.len()
        )));
    }
    Ok(())
}

/// An absolute, normalised machine path that is not one of the host's own.
pub fn check_path(p: &str) -> Result<(), Invalid> {
    if !p.starts_with('/') {
        return Err(Invalid(format!("must be absolute, found {p:?}")));
    }
    no_control(p)?;
    if p == "/" {
        return Err(Invalid("must not be the root directory".into()));
    }
    // The kernel's limits, which the apply would otherwise meet part-way (ENAMETOOLONG): a
    // path of PATH_MAX bytes with its NUL, a component of NAME_MAX. The root the path is
    // reached under counts too; `under_root` checks the whole machine path.
    if p.len() >= PATH_MAX {
        return Err(Invalid(format!(
            "is {} bytes long; a machine path is at most {} bytes (the kernel's PATH_MAX of \
             {PATH_MAX} with its terminating NUL)",
            p.len(),
            PATH_MAX - 1
        )));
    }
    for part in p.split('/').skip(1) {
        if part.len() > NAME_MAX {
            let shown: String = part.chars().take(24).collect();
            return Err(Invalid(format!(
                "component {shown:?}… is {} bytes long; a path component is at most \
                 {NAME_MAX} bytes (the kernel's NAME_MAX)",
                part.len()
            )));
        }
        match part {
            ".." => return Err(Invalid(format!("must not contain '..', found {p:?}"))),
            "." | "" => {
                return Err(Invalid(format!(
                    "must be normalised (no '.', '//' or trailing '/'), found {p:?}"
                )))
            }
            _ => {}
        }
    }
    if let Some(folder) = own_path(p) {
        return Err(Invalid(format!(
            "{p} is the host's own (named after it under {folder}); the installation owns the host, so no declaration may name it"
        )));
    }
    if let Ok(exe) = std::env::current_exe() {
        if exe.to_str() == Some(p) {
            return Err(Invalid(format!(
                "{p} is this host's own binary; no declaration may name it"
            )));
        }
    }
    Ok(())
}

/// An octal permission string such as `0644` or `755`.
pub fn parse_mode(s: &str) -> Result<u32, Invalid> {
    if s.is_empty() || s.len() > 4 || !s.chars().all(|c| ('0'..='7').contains(&c)) {
        return Err(Invalid(format!(
            "mode must be an octal string such as \"0644\", found {s:?}"
        )));
    }
    u32::from_str_radix(s, 8).map_err(|e| Invalid(format!("mode {s:?}: {e}")))
}

/// The largest id an owner or group may be given by number: 4294967295 is `(uid_t)-1`, which
/// chown(2) reads as "leave it as it is", so a file declared with it would keep whatever owner
/// it had while the host reported it written as declared.
pub(crate) const MAX_ID: u32 = u32::MAX - 1;

pub(crate) fn check_account(s: &str) -> Result<(), Invalid> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) {
        return match s.parse::<u32>() {
            Ok(id) if id <= MAX_ID => Ok(()),
            _ => Err(Invalid(format!(
                "account id {s} is out of range: an owner or group given by number is at most \
                 {MAX_ID} (4294967295 is chown's \"leave it as it is\")"
            ))),
        };
    }
    charset(s, "account name", 32, |c| {
        c.is_ascii_alphanumeric() || "_-.".contains(c)
    })?;
    if s.starts_with('-') {
        return Err(Invalid(format!(
            "account name {s:?} must not start with '-'"
        )));
    }
    Ok(())
}

pub(crate) fn check_unit_name(s: &str) -> Result<(), Invalid> {
    charset(s, "service name", 128, |c| {
        c.is_ascii_alphanumeric() || "@._:-".contains(c)
    })?;
    if s.starts_with('-') {
        return Err(Invalid(format!(
            "service name {s:?} must not start with '-'"
        )));
    }
    if is_own_name(s) {
        return Err(Invalid(format!(
            "{s} is the host's own unit; the installation owns the host, and a host that manages \
             its own unit can stop itself half way through an apply"
        )));
    }
    Ok(())
}

pub(crate) fn check_package_name(s: &str) -> Result<(), Invalid> {
    charset(s, "package name", 128, |c| {
        c.is_ascii_alphanumeric() || "+._-@".contains(c)
    })?;
    if s.starts_with('-') {
        return Err(Invalid(format!(
            "package name {s:?} must not start with '-'"
        )));
    }
    if is_own_name(s) && s != OWN_PACKAGE {
        return Err(Invalid(format!(
            "{s} is named after the host; the only package of the host's a declaration may name \
             is {OWN_PACKAGE}, to upgrade it"
        )));
    }
    Ok(())
}

pub(crate) fn check_package_version(s: &str) -> Result<(), Invalid> {
    charset(s, "package version", 128, |c| {
        c.is_ascii_alphanumeric() || "+._-:~".contains(c)
    })?;
    if s.starts_with('-') {
        return Err(Invalid(format!(
            "package version {s:?} must not start with '-'"
        )));
    }
    Ok(())
}

pub(crate) fn check_container_name(s: &str) -> Result<(), Invalid> {
    charset(s, "container name", 128, |c| {
        c.is_ascii_alphanumeric() || "_.-".contains(c)
    })?;
    if !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(Invalid(format!(
            "container name {s:?} must start with a letter or digit"
        )));
    }
    Ok(())
}

pub(crate) fn check_image(s: &str) -> Result<(), Invalid> {
    charset(s, "image", 256, |c| {
        c.is_ascii_alphanumeric() || "_.-/:@".contains(c)
    })?;
    if s.starts_with('-') {
        return Err(Invalid(format!("image {s:?} must not start with '-'")));
    }
    Ok(())
}

pub(crate) fn check_env_name(s: &str) -> Result<(), Invalid> {
    charset(s, "environment variable name", 128, |c| {
        c.is_ascii_alphanumeric() || c == '_'
    })?;
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(Invalid(format!(
            "environment variable name {s:?} must not start with a digit"
        )));
    }
    Ok(())
}

/// One argv element: any text but NUL, which no command line can carry.
pub(crate) fn check_arg(s: &str) -> Result<(), Invalid> {
    if s.contains('\0') {
        Err(Invalid("must not contain a NUL byte".into()))
    } else {
        Ok(())
    }
}

/// Parses `ADDR/LEN` (or a bare address when `bare_ok`), refusing host bits beyond the prefix.
pub fn parse_cidr(s: &str, bare_ok: bool) -> Result<(IpAddr, u8), Invalid> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None if bare_ok => (s, None),
        None => return Err(Invalid(format!("{s:?} is not a CIDR (ADDRESS/PREFIX)"))),
    };
    let ip: IpAddr = addr.parse().map_err(|_| {
        Invalid(format!(
            "{s:?} is not a CIDR: {addr:?} is not an IP address"
        ))
    })?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len: u8 = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= max && !l.starts_with('+') => n,
            _ => {
                return Err(Invalid(format!(
                    "{s:?} is not a CIDR: prefix {l:?} is not 0-{max}"
                )))
            }
        },
    };
    let host_bits_set = match ip {
        IpAddr::V4(a) => len < 32 && (u32::from(a) & (u32::MAX >> len)) != 0,
        IpAddr::V6(a) => len < 128 && (u128::from(a) & (u128::MAX >> len)) != 0,
    };
    if host_bits_set {
        return Err(Invalid(format!(
            "{s:?} is not a network: it has host bits set beyond /{len}"
        )));
    }
    Ok((ip, len))
}
