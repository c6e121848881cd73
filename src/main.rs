//! The mesh-host binary: parse the command line, set up logging, run.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal; journald and files get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = mesh_host::Cli::parse();
    match mesh_host::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", mesh_host::error_text(&e));
            ExitCode::from(1)
        }
    }
}
