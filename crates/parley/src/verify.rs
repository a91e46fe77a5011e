//! `parley verify`: runs the named checks of `parley_verify` against a running server, writes
//! `result.json` and `report.html` to `--out`, and cleans up with `--cleanup`.

use anyhow::Context;
use parley_verify::{RunOptions, Target};

use crate::cli::VerifyArgs;

/// Whether any check failed: the exit code.
pub enum Verdict {
    NoFailure,
    Failed,
}

pub async fn verify(args: VerifyArgs) -> anyhow::Result<Verdict> {
    let target = Target::connect(&args.url, &args.admin_token, args.database_url.clone())
        .await
        .with_context(|| format!("cannot start verifying {}", args.url))?;
    let known: Vec<&str> = parley_verify::registry().iter().map(|c| c.id).collect();
    if let Some(unknown) = args.only.iter().find(|id| !known.contains(&id.as_str())) {
        anyhow::bail!("--only {unknown}: no such check (docs/VERIFY.md lists them)");
    }
    println!(
        "verifying {} (store {}, bus {}); scratch ids start with {}",
        args.url, target.server["store"], target.server["bus"], target.run_tag
    );
    let options = RunOptions {
        only: args.only.clone(),
        check_timeout_ms: args.check_timeout_ms,
    };
    let result = parley_verify::run(target.clone(), &options).await;
    parley_verify::write_outputs(&args.out, &result, &target.run_tag)
        .context("cannot write the results")?;
    for check in result
        .checks
        .iter()
        .filter(|c| c.status == parley_verify::Status::Fail)
    {
        println!(
            "FAIL {}: {}",
            check.id,
            check.reason.as_deref().unwrap_or("")
        );
    }
    let c = &result.counts;
    println!(
        "{} checks: {} PASS, {} FAIL, {} NOT_RUN; {} and {}",
        c.total,
        c.pass,
        c.fail,
        c.not_run,
        args.out.join("result.json").display(),
        args.out.join("report.html").display()
    );
    if args.cleanup {
        let report = parley_verify::cleanup(&target)
            .await
            .context("cleanup failed")?;
        for (table, n) in &report.deleted {
            println!("cleanup: {n} rows deleted from {table}");
        }
        if report.revoked_devices > 0 {
            println!("cleanup: {} devices revoked", report.revoked_devices);
        }
        if let Some(left) = &report.left {
            println!("cleanup: {left}");
        }
    }
    Ok(if c.fail == 0 {
        Verdict::NoFailure
    } else {
        Verdict::Failed
    })
}
