//! Account lookups: user and group names to ids, through the C library's databases.

use std::ffi::CString;

/// The uid of a user name or a numeric id.
pub fn uid(name: &str) -> Result<u32, String> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = CString::new(name).map_err(|_| format!("user {name:?} contains a NUL byte"))?;
    // SAFETY: getpwnam returns a pointer into static storage or null; we copy the id at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(format!("user {name:?} does not exist on this machine"));
    }
    // SAFETY: non-null pointer returned by getpwnam.
    Ok(unsafe { (*pw).pw_uid })
}

/// The gid of a group name or a numeric id.
pub fn gid(name: &str) -> Result<u32, String> {
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = CString::new(name).map_err(|_| format!("group {name:?} contains a NUL byte"))?;
    // SAFETY: getgrnam returns a pointer into static storage or null; we copy the id at once.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        return Err(format!("group {name:?} does not exist on this machine"));
    }
    // SAFETY: non-null pointer returned by getgrnam.
    Ok(unsafe { (*gr).gr_gid })
}
