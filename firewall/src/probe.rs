//! What this kernel's nf_tables can do with table flags (owner, persist), found by trying it in a
//! network namespace of its own, so the machine's own ruleset is never touched.

use crate::error::{Errno, Error, Result};
use crate::netlink::{Batch, Family, NfSocket, TableFlags};

/// Whether the kernel accepts the `owner` and `persist` table flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFlagSupport {
    pub owner: bool,
    pub persist: bool,
}

fn try_flags(sock: &mut NfSocket, name: &str, flags: TableFlags) -> Result<bool> {
    let mut b = Batch::new();
    b.add_table(Family::Inet, name, flags)?;
    match sock.send(&b) {
        Ok(()) => Ok(true),
        Err(Error::Refused {
            errno: Errno(e), ..
        }) if matches!(
            nix::errno::Errno::from_raw(e),
            nix::errno::Errno::EOPNOTSUPP | nix::errno::Errno::EINVAL
        ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Tries the flags on a thread that first moves into a fresh network namespace (which vanishes
/// with the thread). Needs CAP_SYS_ADMIN, as the host has.
pub fn table_flags() -> Result<TableFlagSupport> {
    std::thread::spawn(|| -> Result<TableFlagSupport> {
        // unshare moves only this thread, which ends right after the probe.
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| Error::Socket {
            op: "unshare(CLONE_NEWNET) for the table-flag probe",
            errno: Errno(e as i32),
        })?;
        let mut sock = NfSocket::open()?;
        let persist = try_flags(
            &mut sock,
            "probe_persist",
            TableFlags::OWNER | TableFlags::PERSIST,
        )?;
        let owner = persist || try_flags(&mut sock, "probe_owner", TableFlags::OWNER)?;
        Ok(TableFlagSupport { owner, persist })
    })
    .join()
    .unwrap_or_else(|_| {
        Err(Error::Unsupported {
            reason: "the table-flag probe thread panicked".into(),
        })
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_kernel_has_owner_and_persist() {
        // The project's machines run kernel 6.18, which has both (persist since 6.9).
        let got = super::table_flags().expect("probe runs as root");
        assert!(got.owner && got.persist, "{got:?}");
    }
}
