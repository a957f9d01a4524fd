//! The `strawberry-spoke` binary: parses the command line and reports errors.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = strawberry_spoke::cli::Cli::parse();
    match strawberry_spoke::cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("strawberry-spoke: {}", describe(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each cause only where the message before it does not
/// already say it (most of ours quote their source: `{error:#}` would repeat it).
fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
