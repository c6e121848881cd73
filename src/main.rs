//! The mesh-host binary: parse the command line, set up logging, run.

use std::process::ExitCode;

// Allocation is a third of an apply's time with glibc's malloc at 10,000 openings (many small
// rules, models and records made and freed); mimalloc's is cheaper. docs/PERFORMANCE.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// `mi_option_t` in mimalloc.h (v3): `mi_option_destroy_on_exit`, which above 1 makes mimalloc's
// exit destructor return at once.
const MI_OPTION_DESTROY_ON_EXIT: std::ffi::c_int = 22;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Ends the process without mimalloc's collection at exit, which frees every page and hands
/// them back to the kernel one `madvise` at a time (4 ms of a 10,000-opening reconcile) for a
/// process whose memory the kernel takes back whole anyway.
fn without_collection_at_exit(code: ExitCode) -> ExitCode {
    // SAFETY: sets one of mimalloc's options, which it reads again at exit; no pointer passes.
    unsafe { mi_option_set(MI_OPTION_DESTROY_ON_EXIT, 2) };
    code
}

fn main() -> ExitCode {
    without_collection_at_exit(run())
}

/// mimalloc's switch for transparent huge pages, read from the environment as the process
/// starts (before `main`, when it reserves its first arena).
const ALLOW_THP: &str = "MIMALLOC_ALLOW_THP";

/// The resident host runs without transparent huge pages; every other command keeps them.
///
/// With huge pages each heap grows 2 MiB at a time: an act's typical time is 10–35 % lower (a
/// tenth of a reconcile of 10,000 openings was the kernel filling 4 KiB pages; docs/
/// dependencies.md has the tail a virtual machine adds), but `mesh-host run`, which lives for
/// months, held 13.7 MiB anonymous where it holds 2.7 MiB without. mimalloc decides
/// before `main` runs, from its environment, so the resident host starts itself again, the same
/// process (pid, arguments, descriptors), with `MIMALLOC_ALLOW_THP=0`; an environment that
/// already says either way is left as it is. Should the `exec` fail, the host runs on with them.
fn resident_without_huge_pages(cli: &mesh_host::commands::cli::Cli) {
    if !cli.is_resident() || std::env::var_os(ALLOW_THP).is_some() {
        return;
    }
    let Err(failed) = exec_self_with(ALLOW_THP, "0");
    tracing::warn!(
        "the resident host keeps transparent huge pages \
         (starting itself again without them failed: {failed})"
    );
}

/// Replaces this process with the binary's own file, the same arguments and the environment
/// with `key=value` added (`execve`: no child, so not through the run crate). By the binary's
/// path, not `/proc/self/exe`: the kernel names the process after the file it executes, and an
/// apply tells the resident host only a process named mesh-host. Returns only on failure.
fn exec_self_with(key: &str, value: &str) -> std::io::Result<std::convert::Infallible> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |b: &[u8]| CString::new(b).map_err(std::io::Error::other);
    let exe = std::env::current_exe()?;
    let args = std::env::args_os()
        .map(|a| c(a.as_bytes()))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut env = std::env::vars_os()
        .filter(|(k, _)| k.as_bytes() != key.as_bytes())
        .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<std::io::Result<Vec<_>>>()?;
    env.push(c(format!("{key}={value}").as_bytes())?);
    Ok(nix::unistd::execve(
        &c(exe.as_os_str().as_bytes())?,
        &args,
        &env,
    )?)
}

fn run() -> ExitCode {
    // The journal's form under systemd, plain lines elsewhere, colour only for a terminal.
    mesh_host::logging::init();
    // Long steps (an install, an image pull) are said on stderr while they run.
    mesh_host::progress::install();
    // A refused command line is a JSON document too under `--json`.
    let cli = mesh_host::commands::cli::parse_or_refuse();
    resident_without_huge_pages(&cli);
    let reads_only = cli.reads_only();
    mesh_host::commands::cli::closed_stdout_ends_quietly(reads_only);
    let json = cli.json();
    match mesh_host::run(cli) {
        Ok(code) => code,
        // The reader of a listing went away: all that was asked was done.
        Err(e) if reads_only && mesh_host::commands::cli::closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let text = mesh_host::error_text(&e);
            // Asked for JSON, a script reads even the failure as a document on stdout.
            if json {
                println!("{}", mesh_host::commands::cli::error_json(&text));
            }
            eprintln!("error: {text}");
            ExitCode::from(1)
        }
    }
}
