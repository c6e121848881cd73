//! The wake-up a thread of the resident host (firewalld's reloads, the link) gives its poll
//! loop: an eventfd the thread rings and the loop watches, then reads back to zero.

use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, BorrowedFd};

/// A non-blocking eventfd, closed on exec.
#[derive(Debug)]
pub(crate) struct Wakeup(EventFd);

impl Wakeup {
    pub(crate) fn new() -> std::io::Result<Wakeup> {
        let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        Ok(Wakeup(fd))
    }

    /// Wakes the poll loop watching this eventfd. A write only fails when the counter would
    /// overflow, and then the loop is already woken.
    pub(crate) fn ring(&self) {
        let _ = self.0.write(1);
    }

    /// Whether it was rung since it was last asked (and resets it).
    pub(crate) fn heard(&self) -> bool {
        self.0.read().is_ok_and(|count| count > 0)
    }
}

impl AsFd for Wakeup {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_is_heard_once() {
        let w = Wakeup::new().expect("an eventfd");
        assert!(!w.heard(), "nothing rang yet");
        w.ring();
        w.ring();
        assert!(w.heard(), "two rings are one wake-up");
        assert!(!w.heard(), "and it is spent");
    }
}
