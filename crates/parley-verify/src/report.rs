//! `report.html`: one self-contained page, a table of every check with the failures first,
//! each row with what was sent and received.

use std::fmt::Write;

use crate::result::{RunResult, Status};

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn rank(status: Status) -> u8 {
    match status {
        Status::Fail => 0,
        Status::NotRun => 2,
        Status::Pass => 1,
    }
}

const STYLE: &str =
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:100%}\
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}\
.FAIL{background:#fdd}.PASS{background:#dfd}.NOT_RUN{background:#eee}\
pre{white-space:pre-wrap;margin:0;font-size:85%}";

/// The whole page.
pub fn render_html(result: &RunResult, run_tag: &str) -> String {
    let mut checks: Vec<_> = result.checks.iter().collect();
    checks.sort_by_key(|c| (rank(c.status), c.id.clone()));
    let c = &result.counts;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>parley verify</title>\
         <style>{STYLE}</style></head><body>\n<h1>parley verify</h1>\n<p>Started {}; scratch \
         prefix <code>{}</code>. Server version {}, store {}, bus {}.</p>\n<p>{} checks: {} \
         PASS, {} FAIL, {} NOT_RUN.</p>\n<details><summary>Limits the server reported</summary>\
         <pre>{}</pre></details>\n<table><tr><th>status</th><th>id</th><th>claim</th>\
         <th>expected</th><th>observed / reason</th><th>ms</th></tr>\n",
        escape(&result.started_at),
        escape(run_tag),
        escape(&result.server.version.to_string()),
        escape(&result.server.store.to_string()),
        escape(&result.server.bus.to_string()),
        c.total,
        c.pass,
        c.fail,
        c.not_run,
        escape(&serde_json::to_string_pretty(&result.server.limits).unwrap_or_default()),
    );
    for check in checks {
        let status = check.status.as_str();
        let mut said = escape(&check.observed);
        if let Some(reason) = &check.reason {
            if reason != &check.observed {
                if !said.is_empty() {
                    said.push_str("<br>");
                }
                said.push_str(&escape(reason));
            }
        }
        if !check.transcript.is_empty() {
            let lines: Vec<String> = check.transcript.iter().map(|l| escape(l)).collect();
            let _ = write!(
                said,
                "<details{}><summary>sent and received</summary><pre>{}</pre></details>",
                if check.status == Status::Fail {
                    " open"
                } else {
                    ""
                },
                lines.join("\n")
            );
        }
        let _ = writeln!(
            h,
            "<tr class=\"{status}\"><td>{status}</td><td><code>{}</code></td><td>{}</td>\
             <td>{}</td><td>{said}</td><td>{}</td></tr>",
            escape(&check.id),
            escape(&check.claim),
            escape(&check.expected),
            check.duration_ms
        );
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{CheckResult, ServerReport};
    use serde_json::json;

    fn check(id: &str, status: Status, observed: &str) -> CheckResult {
        CheckResult {
            id: id.into(),
            chapter: "04".into(),
            claim: "c".into(),
            expected: "e".into(),
            observed: observed.into(),
            status,
            reason: None,
            duration_ms: 1,
            transcript: vec!["<script>alert(1)</script>".into()],
        }
    }

    #[test]
    fn failures_come_first_and_text_is_escaped() {
        let checks = vec![
            check("04-a", Status::Pass, "fine"),
            check("04-b", Status::NotRun, ""),
            check("04-c", Status::Fail, "got <b>\"x\" & 'y'</b>"),
        ];
        let result = RunResult {
            server: ServerReport {
                version: json!("0.1.0"),
                store: json!("sqlite"),
                bus: json!("local"),
                limits: json!({}),
            },
            started_at: "now".into(),
            counts: RunResult::count(&checks),
            checks,
        };
        let page = render_html(&result, "verify-1");
        let (a, b, c) = (
            page.find("04-a").unwrap(),
            page.find("04-b").unwrap(),
            page.find("04-c").unwrap(),
        );
        assert!(c < a && a < b, "order: fail, pass, not run");
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;"));
        assert!(page.contains("got &lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;"));
    }
}
