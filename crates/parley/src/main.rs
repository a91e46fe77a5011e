//! The `parley` binary: parses the command line, sets up logging and hands over to `serve`,
//! `migrate`, `bench`, `verify` or `chaos`. Everything else lives in the library crates.

mod cli;
mod data_dir;
mod demo;
mod migrate;
mod serve;
mod shutdown;
mod user;
mod verify;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, LogFormat};

/// Log filter when `RUST_LOG` is not set.
const LOG_FILTER_DEFAULT: &str = "info";
/// Log filter of `parley bench` and `parley chaos` when `RUST_LOG` is not set: their
/// simulated devices would log every reconnect; the progress lines and the summary say what
/// happens.
const BENCH_LOG_FILTER_DEFAULT: &str = "warn";
/// Log filter of `parley verify` when `RUST_LOG` is not set: one line per check, without the
/// database's notices about the scratch schemas it drops.
const VERIFY_LOG_FILTER_DEFAULT: &str = "warn,parley_verify=info";

/// Logs go to standard output, as text or JSON lines. Colour codes only reach a terminal: in
/// a file or a pipe they would be noise in every line.
fn init_logs(format: LogFormat, filter: EnvFilter) {
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => logs
            .json()
            .with_ansi(false)
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Bench(_) | Command::Chaos(_) => BENCH_LOG_FILTER_DEFAULT,
        Command::Verify(_) => VERIFY_LOG_FILTER_DEFAULT,
        _ => LOG_FILTER_DEFAULT,
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    init_logs(cli.log_format, filter);
    let outcome = match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Migrate(args) => migrate::migrate(args).await,
        Command::User(command) => user::run(command).await,
        Command::Bench(args) => parley_bench::bench(*args).await,
        Command::Verify(args) => match verify::verify(args).await {
            // Failed checks are in the report; the exit code says there were some.
            Ok(verify::Verdict::Failed) => return ExitCode::FAILURE,
            Ok(verify::Verdict::NoFailure) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Chaos(args) => parley_chaos::chaos(*args).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain on one line; a startup mistake needs no backtrace.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
