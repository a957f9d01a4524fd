//! The `strawberry-spoke` binary: parses the command line and reports errors.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = strawberry_spoke::cli::Cli::parse();
    match strawberry_spoke::cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("strawberry-spoke: {error:#}");
            ExitCode::FAILURE
        }
    }
}
