//! The `parley` binary: parses the command line, sets up logging and hands over to `serve`,
//! `migrate` or `bench`. Everything else lives in the library crates.

mod cli;
mod data_dir;
mod migrate;
mod serve;
mod shutdown;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// Log filter when `RUST_LOG` is not set.
const LOG_FILTER_DEFAULT: &str = "info";
/// Log filter of `parley bench` when `RUST_LOG` is not set: its hundreds of simulated devices
/// would log every reconnect; the progress bar and the summary say what happens.
const BENCH_LOG_FILTER_DEFAULT: &str = "warn";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match cli.command {
        Command::Bench(_) => BENCH_LOG_FILTER_DEFAULT,
        _ => LOG_FILTER_DEFAULT,
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let outcome = match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Migrate(args) => migrate::migrate(args).await,
        Command::Bench(args) => parley_bench::bench(*args).await,
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
