//! How a command ends: the exit codes `mesh-host --help` documents, as one enum, turned into the
//! process's code in one place (`From<Exit> for ExitCode`), and a command's refusal as a value.

use std::process::ExitCode;

/// A command's end, by the exit codes the help documents (`cli/args.rs`, `EXIT_CODES`,
/// `RUN_EXIT_CODES`, `BOOT_EXIT_CODES`; the man pages' EXIT STATUS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, as declared.
    Done,
    /// 1: an apply failed part-way, or the host could not work; `firewall explain`: not
    /// admitted; `boot`: failed closed.
    Failed,
    /// 2: the input was refused and nothing changed.
    Refused,
    /// 3: a safety rule refused the act and nothing changed.
    Unsafe,
    /// 4: a preview found changes pending.
    ChangesPending,
    /// 5: applied to the end, but the briefing says failed.
    NotInForce,
    /// 6: another resident host already runs on this store.
    AlreadyRunning,
    /// 7: the kernel disagrees with the evaluator (`--confirm`).
    Disagrees,
    /// 130: interrupted by SIGINT.
    Interrupted,
    /// 143: stopped by SIGTERM.
    Terminated,
}

impl Exit {
    /// Every end, in the order of their codes.
    pub const ALL: [Exit; 10] = [
        Exit::Done,
        Exit::Failed,
        Exit::Refused,
        Exit::Unsafe,
        Exit::ChangesPending,
        Exit::NotInForce,
        Exit::AlreadyRunning,
        Exit::Disagrees,
        Exit::Interrupted,
        Exit::Terminated,
    ];

    /// The process's exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::Refused => 2,
            Exit::Unsafe => 3,
            Exit::ChangesPending => crate::apply::plan::CHANGES_PENDING,
            Exit::NotInForce => crate::apply::NOT_IN_FORCE,
            Exit::AlreadyRunning => crate::pid_file::ALREADY_RUNNING,
            Exit::Disagrees => crate::apply::DISAGREES,
            Exit::Interrupted => 130,
            Exit::Terminated => 143,
        }
    }

    /// The end a documented code stands for (a report's, a plan's, a refusal's). A code the help
    /// does not document is a failure of the host (1), never a success.
    pub fn of(code: u8) -> Exit {
        let found = Exit::ALL.into_iter().find(|e| e.code() == code);
        debug_assert!(found.is_some(), "exit code {code} is not documented");
        found.unwrap_or(Exit::Failed)
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// A command's refusal, said by `cli::refusal` (its problems on stderr, a `refused` document
/// under `--json`): the end it makes, every problem, and what that left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub exit: Exit,
    pub problems: Vec<String>,
    pub summary: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_end_reads_back_from_its_code_and_the_codes_are_the_documented_ones() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 130, 143]);
        for e in Exit::ALL {
            assert_eq!(Exit::of(e.code()), e);
        }
    }
}
