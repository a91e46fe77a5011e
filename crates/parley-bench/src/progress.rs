//! What a run shows while it runs: a line per phase on standard error, and progress bars.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::devices;
use crate::load::LoadCounters;

/// Refresh of the progress display.
const TICK: Duration = Duration::from_millis(250);

/// Announces the next phase of a run.
pub fn phase(msg: &str) {
    eprintln!("==> {msg}");
}

/// A bar of `len` steps counted in `unit`.
pub fn bar(len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    let template = format!("{{spinner}} [{{bar:32}}] {{pos}}/{{len}} {unit}  {{msg}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Runs `load` while a bar over `duration` shows acks, errors and the events the devices
/// received.
pub async fn with_progress<F: Future>(
    label: &str,
    duration: Duration,
    events: &devices::Counters,
    counters: &LoadCounters,
    load: F,
) -> F::Output {
    phase(label);
    let pb = bar(duration.as_secs().max(1), "s");
    let started = Instant::now();
    let ticker = async {
        loop {
            tokio::time::sleep(TICK).await;
            let elapsed = started.elapsed();
            pb.set_position(elapsed.as_secs().min(duration.as_secs().max(1)));
            let acked = counters.acked.load(Ordering::Relaxed);
            pb.set_message(format!(
                "acked {acked} ({:.0}/s), in flight {}, errors {}, events delivered {}",
                acked as f64 / elapsed.as_secs_f64().max(1e-3),
                counters.in_flight(),
                counters.errors.load(Ordering::Relaxed),
                events.events.load(Ordering::Relaxed),
            ));
        }
    };
    let out = tokio::select! {
        out = load => out,
        () = ticker => unreachable!("the ticker never ends"),
    };
    pb.finish_and_clear();
    out
}
