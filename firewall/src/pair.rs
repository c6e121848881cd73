//! Two pieces of work at once: one on a second, scoped thread, the other on the calling thread.
//!
//! The engine uses it where one side only reads what the other does not touch (the check's walks
//! before a write while the write's edits are made, the verdicts of the checked model while the
//! kernel commits the batch). A thread that cannot be made is no error: the work is done here,
//! one piece after the other, with the same results.

/// Runs `aside` on a second thread and `here` on this one, and returns both results. When no
/// thread can be made, `aside` runs here first. A panic on the second thread is raised here.
pub fn both<A: Send, B>(aside: impl FnOnce() -> A + Send, here: impl FnOnce() -> B) -> (A, B) {
    // The work aside waits in a slot: taken by the second thread, or here when none was made.
    let slot = std::sync::Mutex::new(Some(aside));
    let take = || {
        let work = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        work.map(|f| f())
    };
    std::thread::scope(
        |scope| match std::thread::Builder::new().spawn_scoped(scope, take) {
            Ok(handle) => {
                let b = here();
                let a = handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (a.expect("the second thread took the work"), b)
            }
            Err(_) => (take().expect("the work is still in its slot"), here()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_pieces_run_and_their_results_come_back_in_place() {
        let data: Vec<u64> = (1..=1000).collect();
        let (a, b) = both(|| data.iter().sum::<u64>(), || data.len());
        assert_eq!((a, b), (500_500, 1000));
    }

    #[test]
    fn the_second_piece_runs_on_another_thread() {
        let here = std::thread::current().id();
        let (aside, same) = both(
            || std::thread::current().id(),
            || std::thread::current().id(),
        );
        assert_eq!(same, here);
        assert_ne!(aside, here);
    }

    #[test]
    #[should_panic(expected = "aside failed")]
    fn a_panic_aside_is_raised_here() {
        both(|| panic!("aside failed"), || ());
    }
}
