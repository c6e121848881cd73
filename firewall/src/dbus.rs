//! The system bus, for firewalld: a blocking zbus connection (`zbus::blocking`, on a private
//! single-thread tokio runtime zbus keeps for itself; the node already links tokio for its link),
//! every call within [`CALL_DEADLINE`], and firewalld's error replies turned into this crate's
//! [`Error::DbusReply`] naming the method. The wire format, the authentication and the signal matching
//! are zbus's (docs/ARCHITECTURE.md, "Dependencies", says why it replaced the crate's own client).
//!
//! The bus is found as every D-Bus client finds it: `DBUS_SYSTEM_BUS_ADDRESS` (its first
//! `unix:path=…` address), else `/run/dbus/system_bus_socket`; a thread may name its own
//! ([`with_system_bus`]).

use crate::error::{Error, Result};
use std::time::Duration;

pub use zbus::blocking::Connection;

/// Where the system bus listens when the environment names no other.
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// How long one call may wait for its reply (firewalld's reload answers in a few seconds).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

std::thread_local! {
    /// A system bus address this thread uses instead of the environment's (see
    /// [`with_system_bus`]).
    static SYSTEM_BUS_HERE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's system bus at `address` (a `unix:path=…` address), whatever the
/// environment says: a process that serves several machines' buses (the lab's tests) cannot
/// change its environment under its other threads.
pub fn with_system_bus<T>(address: &str, f: impl FnOnce() -> T) -> T {
    let before = SYSTEM_BUS_HERE.with(|a| a.replace(Some(address.to_string())));
    let out = f();
    SYSTEM_BUS_HERE.with(|a| *a.borrow_mut() = before);
    out
}

/// The socket this thread's system bus listens on: the thread's own address, else the
/// environment's, else [`SYSTEM_BUS`]; of a list of addresses, the first `unix:path=` one.
pub fn system_bus_path() -> String {
    SYSTEM_BUS_HERE
        .with(|a| a.borrow().clone())
        .or_else(|| std::env::var("DBUS_SYSTEM_BUS_ADDRESS").ok())
        .and_then(|a| unix_path(&a))
        .unwrap_or_else(|| SYSTEM_BUS.to_string())
}

/// The path of the first `unix:path=…` address of a D-Bus address list.
fn unix_path(addresses: &str) -> Option<String> {
    addresses.split(';').find_map(|one| {
        let rest = one.strip_prefix("unix:")?;
        rest.split(',')
            .find_map(|kv| kv.strip_prefix("path="))
            .map(String::from)
    })
}

fn bus_error(path: &str, reason: impl std::fmt::Display) -> Error {
    Error::Dbus {
        what: format!("the system bus at {path}"),
        reason: reason.to_string(),
    }
}

/// Connects to this thread's system bus, authenticated as this process's user, its calls
/// bounded by [`CALL_DEADLINE`].
pub fn system() -> Result<Connection> {
    let path = system_bus_path();
    zbus::blocking::connection::Builder::address(format!("unix:path={path}").as_str())
        .map(|b| b.method_timeout(CALL_DEADLINE))
        .and_then(|b| b.build())
        .map_err(|e| bus_error(&path, e))
}

/// A failed call as this crate says it: the method, and for an error reply the bus's error name
/// and message kept apart ([`Error::DbusReply`]), so `org.freedesktop.DBus.Error.InvalidArgs` or
/// firewalld's `INVALID_…` is matched on the name or the code, not searched for in prose.
pub fn call_error(interface: &str, member: &str, e: zbus::Error) -> Error {
    let what = format!("{interface}.{member}");
    let reason = match e {
        zbus::Error::MethodError(name, text, _) => {
            return Error::DbusReply {
                what,
                name: name.to_string(),
                message: text.unwrap_or_default(),
            }
        }
        zbus::Error::InputOutput(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            format!("no reply within {} s", CALL_DEADLINE.as_secs())
        }
        other => other.to_string(),
    };
    Error::Dbus { what, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `unix:path=` address of a list is the one dialled; other transports are
    /// passed over.
    #[test]
    fn first_unix_path_of_a_list() {
        assert_eq!(
            unix_path("tcp:host=x,port=1;unix:guid=ab,path=/run/bus;unix:path=/other").as_deref(),
            Some("/run/bus")
        );
        assert_eq!(unix_path("tcp:host=x,port=1"), None);
        assert_eq!(
            with_system_bus("unix:path=/tmp/lab-bus", system_bus_path),
            "/tmp/lab-bus"
        );
    }

    /// A bus that is not there is an error naming its socket, not a hang.
    #[test]
    fn absent_bus_names_its_socket() {
        let dir = std::env::temp_dir().join(format!("no-bus-{}", std::process::id()));
        let path = format!("{}/socket", dir.display());
        match with_system_bus(&format!("unix:path={path}"), system) {
            Err(Error::Dbus { what, .. }) => assert_eq!(what, format!("the system bus at {path}")),
            Err(other) => panic!("a bus error, not {other:?}"),
            Ok(_) => panic!("no bus listens at {path}"),
        }
    }
}
