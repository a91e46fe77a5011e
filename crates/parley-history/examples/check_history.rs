//! Checks a history file and prints its report as JSON:
//! `cargo run -p parley-history --example check_history -- history.jsonl` (standard input
//! without a path). Exits with 1 when the history shows an anomaly, 2 when it cannot be read.

use std::fs::File;
use std::io::{self, BufReader};
use std::process::ExitCode;

use parley_history::{check, read_history, HistoryError, Record};

fn read(path: Option<String>) -> Result<Vec<Record>, HistoryError> {
    match path {
        Some(path) => read_history(BufReader::new(File::open(path)?)),
        None => read_history(io::stdin().lock()),
    }
}

fn main() -> ExitCode {
    let records = match read(std::env::args().nth(1)) {
        Ok(records) => records,
        Err(e) => {
            eprintln!("check_history: {e}");
            return ExitCode::from(2);
        }
    };
    let report = check(&records);
    match serde_json::to_string_pretty(&report) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("check_history: {e}");
            return ExitCode::from(2);
        }
    }
    if report.total() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
