//! The README tells the truth (issue 32): its flag table ("## Configuration") against
//! `parley serve --help` of the built binary, and its HTTP API table ("## HTTP API") against
//! the OpenAPI document the server serves (`GET /openapi.json` answers `openapi::document()`).
//!
//! Every flag of `--help` needs a row and every row a flag, with the same environment variable
//! and the same default where either states one; every operation of the document needs a row
//! marked "available", and no row may claim an operation the server does not serve. A route
//! added to the server therefore fails this test until the README has its row; the message
//! names the row to add. The negative controls at the end feed doctored tables to the same
//! comparisons.

use std::collections::BTreeMap;
use std::process::Command;

/// The README, as committed beside this crate.
const README: &str = include_str!("../../../../README.md");
/// The heading and first header cell of the flag table of `parley serve`.
const FLAG_SECTION: &str = "## Configuration";
const FLAG_HEADER: &str = "flag";
/// The heading and first header cell of the HTTP API table.
const API_SECTION: &str = "## HTTP API";
const API_HEADER: &str = "method and path";
/// Statuses a row of the API table may have.
const AVAILABLE: &str = "available";
const NOT_YET: &str = "not yet";
/// Every status of the flag table starts with this: the server has no accepted-but-ignored
/// setting.
const IN_EFFECT: &str = "in effect";
/// Flags of `--help` that are not settings.
const NOT_SETTINGS: [&str; 2] = ["--help", "--version"];

/// One row of a markdown table, its cells trimmed, escaped pipes (`\|`) kept as `|`.
type Row = Vec<String>;

/// The rows (header and separator left out) of the first table after the line `heading` whose
/// first header cell is `first_header`; `None` when there is none.
fn table_after(markdown: &str, heading: &str, first_header: &str) -> Option<Vec<Row>> {
    let mut lines = markdown
        .lines()
        .skip_while(|line| line.trim_end() != heading)
        .skip(1)
        .skip_while(|line| {
            !(line.starts_with('|')
                && split_row(line).first().map(String::as_str) == Some(first_header))
        });
    lines.next()?;
    let rows = lines
        .take_while(|line| line.starts_with('|'))
        .map(split_row)
        .filter(|cells| !cells.iter().all(|c| c.chars().all(|ch| ch == '-')))
        .collect();
    Some(rows)
}

/// The cells of a table line `| a | b \| c |`.
fn split_row(line: &str) -> Row {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().expect("one cell").push('|');
                chars.next();
            }
            '|' => cells.push(String::new()),
            _ => cells.last_mut().expect("one cell").push(ch),
        }
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// The contents of the code spans (`` `x` ``) of a cell, in order.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// A setting as a source states it: the flag, its environment variable, its default.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setting {
    env: Option<String>,
    default: Option<String>,
}

/// The settings of the README's flag table, by flag, with each row's status; errors for rows
/// that cannot be read or repeat a flag.
fn readme_flags(markdown: &str) -> Result<BTreeMap<String, (Setting, String)>, Vec<String>> {
    let rows = table_after(markdown, FLAG_SECTION, FLAG_HEADER).ok_or_else(|| {
        vec![format!(
            "README.md has no table starting `| {FLAG_HEADER} |` under `{FLAG_SECTION}`"
        )]
    })?;
    let mut flags = BTreeMap::new();
    let mut errors = Vec::new();
    for row in rows {
        let flag = code_spans(&row[0]).into_iter().next();
        let Some(flag) = flag.filter(|f| f.starts_with("--")) else {
            errors.push(format!(
                "README flag table: row `{}` names no `--flag`",
                row.join(" | ")
            ));
            continue;
        };
        let cell = |i: usize| row.get(i).map(String::as_str).unwrap_or("");
        let setting = Setting {
            env: code_spans(cell(1)).into_iter().next(),
            default: code_spans(cell(2)).into_iter().next(),
        };
        let status = cell(4).to_owned();
        if flags.insert(flag.clone(), (setting, status)).is_some() {
            errors.push(format!("README flag table: `{flag}` has more than one row"));
        }
    }
    if errors.is_empty() {
        Ok(flags)
    } else {
        Err(errors)
    }
}

/// The settings of `parley serve --help` (clap's long help): each option's block starts with
/// its `--flag` and holds `[env: NAME=…]` and `[default: …]` lines.
fn help_flags(help: &str) -> BTreeMap<String, Setting> {
    let mut flags = BTreeMap::new();
    let mut current: Option<(String, Setting)> = None;
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let starts_option = (2..=6).contains(&indent)
            && (trimmed.starts_with("--") || trimmed.starts_with('-') && trimmed.contains(", --"));
        if starts_option {
            if let Some((flag, setting)) = current.take() {
                flags.insert(flag, setting);
            }
            let flag = trimmed
                .split_whitespace()
                .find(|word| word.starts_with("--"))
                .unwrap_or_default()
                .trim_end_matches(',')
                .to_owned();
            current = Some((
                flag,
                Setting {
                    env: None,
                    default: None,
                },
            ));
            continue;
        }
        let Some((_, setting)) = current.as_mut() else {
            continue;
        };
        if let Some(env) = bracketed(trimmed, "[env: ") {
            let name = env.split('=').next().unwrap_or_default();
            setting.env = Some(name.to_owned());
        } else if let Some(default) = bracketed(trimmed, "[default: ") {
            setting.default = Some(default.to_owned());
        }
    }
    if let Some((flag, setting)) = current {
        flags.insert(flag, setting);
    }
    flags.retain(|flag, _| !NOT_SETTINGS.contains(&flag.as_str()));
    flags
}

/// `x` of a line `<prefix>x]`.
fn bracketed<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.strip_prefix(prefix)?.strip_suffix(']')
}

/// What differs between the README's flag table and `--help`, one message per difference.
fn compare_flags(readme: &str, help: &str) -> Vec<String> {
    let table = match readme_flags(readme) {
        Ok(table) => table,
        Err(errors) => return errors,
    };
    let help = help_flags(help);
    let mut errors = Vec::new();
    for (flag, served) in &help {
        let Some((stated, status)) = table.get(flag) else {
            errors.push(format!(
                "README flag table ({FLAG_SECTION}) has no row for `{flag}`, which `parley serve \
                 --help` lists; add: | `{flag}` | {} | {} | … | {IN_EFFECT} |",
                served
                    .env
                    .as_deref()
                    .map_or("—".to_owned(), |e| format!("`{e}`")),
                served
                    .default
                    .as_deref()
                    .map_or("—".to_owned(), |d| format!("`{d}`")),
            ));
            continue;
        };
        if stated.env != served.env {
            errors.push(format!(
                "README flag table, row `{flag}`: environment {:?}, but `parley serve --help` \
                 says {:?}",
                stated.env, served.env
            ));
        }
        match (&stated.default, &served.default) {
            (Some(s), Some(h)) if s != h => errors.push(format!(
                "README flag table, row `{flag}`: default `{s}`, but `parley serve --help` says \
                 `{h}`"
            )),
            (Some(s), None) => errors.push(format!(
                "README flag table, row `{flag}`: default `{s}`, but `parley serve --help` \
                 states none (state the default in words, without a code span)"
            )),
            (None, Some(h)) => errors.push(format!(
                "README flag table, row `{flag}`: no default in a code span, but `parley serve \
                 --help` says `{h}`"
            )),
            _ => {}
        }
        if !status.starts_with(IN_EFFECT) {
            errors.push(format!(
                "README flag table, row `{flag}`: status {status:?}, but every setting of \
                 `parley serve` is in effect"
            ));
        }
    }
    for flag in table.keys().filter(|flag| !help.contains_key(*flag)) {
        errors.push(format!(
            "README flag table has a row for `{flag}`, which `parley serve --help` does not list"
        ));
    }
    errors
}

/// The (METHOD, path) operations of the README's API table with each one's status; a cell may
/// name several (`` `GET /healthz`, `GET /readyz` ``), and a query string is left out.
fn readme_operations(markdown: &str) -> Result<BTreeMap<(String, String), String>, Vec<String>> {
    let rows = table_after(markdown, API_SECTION, API_HEADER).ok_or_else(|| {
        vec![format!(
            "README.md has no table starting `| {API_HEADER} |` under `{API_SECTION}`"
        )]
    })?;
    let mut ops = BTreeMap::new();
    let mut errors = Vec::new();
    for row in rows {
        let status = row.last().cloned().unwrap_or_default();
        let spans = code_spans(&row[0]);
        if spans.is_empty() {
            errors.push(format!(
                "README API table: row `{}` names no `METHOD /path`",
                row.join(" | ")
            ));
        }
        for span in spans {
            let Some((method, path)) = span.split_once(' ') else {
                errors.push(format!("README API table: `{span}` is not `METHOD /path`"));
                continue;
            };
            let path = path.split('?').next().unwrap_or_default().to_owned();
            let op = (method.to_ascii_uppercase(), path);
            if ops.insert(op.clone(), status.clone()).is_some() {
                errors.push(format!(
                    "README API table: `{} {}` has more than one row",
                    op.0, op.1
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(ops)
    } else {
        Err(errors)
    }
}

/// The operations of an OpenAPI document as (METHOD, path), each with its summary.
fn document_operations(document: &serde_json::Value) -> BTreeMap<(String, String), String> {
    let mut ops = BTreeMap::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
            if let Some(op) = item.get(method) {
                let summary = op["summary"]
                    .as_str()
                    .or_else(|| op["description"].as_str())
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                ops.insert((method.to_ascii_uppercase(), path.clone()), summary);
            }
        }
    }
    ops
}

/// What differs between the README's API table and the document, one message per difference.
fn compare_api(readme: &str, document: &serde_json::Value) -> Vec<String> {
    let table = match readme_operations(readme) {
        Ok(table) => table,
        Err(errors) => return errors,
    };
    let served = document_operations(document);
    let mut errors = Vec::new();
    for ((method, path), summary) in &served {
        match table.get(&(method.clone(), path.clone())) {
            None => errors.push(format!(
                "README API table ({API_SECTION}) has no row for `{method} {path}`, which the \
                 OpenAPI document describes ({summary:?}); add: | `{method} {path}` | … | \
                 {AVAILABLE} |"
            )),
            Some(status) if status != AVAILABLE => errors.push(format!(
                "README API table, row `{method} {path}`: status {status:?}, but the server \
                 serves it (it is in the OpenAPI document); mark it {AVAILABLE:?}"
            )),
            Some(_) => {}
        }
    }
    for ((method, path), status) in &table {
        if served.contains_key(&(method.clone(), path.clone())) {
            continue;
        }
        if status == AVAILABLE {
            errors.push(format!(
                "README API table, row `{method} {path}`: marked {AVAILABLE:?}, but the OpenAPI \
                 document has no such operation"
            ));
        } else if status != NOT_YET {
            errors.push(format!(
                "README API table, row `{method} {path}`: status {status:?} is neither \
                 {AVAILABLE:?} nor {NOT_YET:?}"
            ));
        }
    }
    errors
}

/// `parley serve --help` of the built binary, with no `PARLEY_*` variable of the test's
/// environment showing through `[env: NAME=value]`.
fn serve_help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(["serve", "--help"])
        .env_clear()
        .output()
        .expect("parley serve --help runs");
    assert!(
        output.status.success(),
        "parley serve --help: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the help is UTF-8")
}

/// The document `GET /openapi.json` answers.
fn served_document() -> serde_json::Value {
    serde_json::to_value(parley_server::openapi::document()).expect("the document serialises")
}

fn assert_no_differences(what: &str, errors: &[String]) {
    assert!(
        errors.is_empty(),
        "{what} differ in {} place(s):\n  - {}",
        errors.len(),
        errors.join("\n  - ")
    );
}

#[test]
fn the_readme_flag_table_is_parley_serve_help() {
    let help = serve_help();
    // The parser reads this help: it must find the settings, or an empty comparison would pass.
    let flags = help_flags(&help);
    assert!(
        flags.len() >= 30 && flags["--listen"].default.as_deref() == Some("127.0.0.1:8080"),
        "the help parser found {flags:?}"
    );
    assert_no_differences(
        "README.md's flag table and `parley serve --help`",
        &compare_flags(README, &help),
    );
}

#[test]
fn the_readme_api_table_is_the_openapi_document() {
    let document = served_document();
    assert!(
        document_operations(&document).len() >= 25,
        "the document lists too few operations for the parser to be right"
    );
    assert_no_differences(
        "README.md's HTTP API table and the OpenAPI document",
        &compare_api(README, &document),
    );
}

// Negative controls: each doctored table must be reported, with the row it concerns.

/// The README with the line that contains `needle` (exactly one) replaced by `with`.
fn doctored(needle: &str, with: Option<&str>) -> String {
    let hits = README.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(hits, 1, "{needle:?} must be on exactly one README line");
    README
        .lines()
        .filter_map(|line| {
            if line.contains(needle) {
                with.map(str::to_owned)
            } else {
                Some(line.to_owned())
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_doctored_flag_table_is_reported() {
    let help = serve_help();
    // A flag of --help without its row.
    let missing = doctored("| `--pool-size` |", None);
    let errors = compare_flags(&missing, &help);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("no row for `--pool-size`")
            && errors[0].contains("`PARLEY_POOL_SIZE` | `16`"),
        "{errors:?}"
    );
    // A wrong default, a wrong environment variable, a status that is not in effect.
    let wrong = doctored(
        "| `--pool-size` |",
        Some("| `--pool-size` | `PARLEY_POOL` | `32` | most connections | not yet |"),
    );
    let errors = compare_flags(&wrong, &help);
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors
        .iter()
        .any(|e| e.contains("default `32`") && e.contains("`16`")));
    assert!(errors.iter().any(|e| e.contains("\"PARLEY_POOL\"")));
    assert!(errors.iter().any(|e| e.contains("status \"not yet\"")));
    // A default stated where --help has none.
    let stated = doctored(
        "| `--rate-limit-per-s` |",
        Some("| `--rate-limit-per-s` | `PARLEY_RATE_LIMIT_PER_S` | `0` | x | in effect |"),
    );
    let errors = compare_flags(&stated, &help);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("states none"), "{errors:?}");
    // A row for a flag the binary does not have.
    let extra = doctored(
        "| `--pool-size` |",
        Some(
            "| `--pool-size` | `PARLEY_POOL_SIZE` | `16` | x | in effect |\n\
             | `--shards` | `PARLEY_SHARDS` | `4` | x | in effect |",
        ),
    );
    let errors = compare_flags(&extra, &help);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("row for `--shards`"), "{errors:?}");
    // A flag added to the binary, as its help would list it.
    let grown = help.replace(
        "  -h, --help",
        "      --media-dir <MEDIA_DIR>\n          Media\n\n          [env: PARLEY_MEDIA_DIR=]\n          [default: ./media]\n\n  -h, --help",
    );
    let errors = compare_flags(README, &grown);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("no row for `--media-dir`")
            && errors[0].contains("| `--media-dir` | `PARLEY_MEDIA_DIR` | `./media` |"),
        "{errors:?}"
    );
}

#[test]
fn a_doctored_api_table_is_reported() {
    let document = served_document();
    // The issue's own case: a served operation marked "not yet".
    let not_yet = doctored(
        "| `GET /openapi.json` |",
        Some("| `GET /openapi.json` | OpenAPI document | not yet |"),
    );
    let errors = compare_api(&not_yet, &document);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("row `GET /openapi.json`: status \"not yet\""),
        "{errors:?}"
    );
    // A served operation without a row: the message names the row to add.
    let missing = doctored("| `GET /v1/me` |", None);
    let errors = compare_api(&missing, &document);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("no row for `GET /v1/me`")
            && errors[0].contains("add: | `GET /v1/me` |"),
        "{errors:?}"
    );
    // One of two operations of a row left out.
    let half = README.replace("| `GET /healthz`, `GET /readyz` |", "| `GET /healthz` |");
    let errors = compare_api(&half, &document);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("no row for `GET /readyz`"), "{errors:?}");
    // A row the server does not serve, marked available; the same marked "not yet" is fine.
    let row = "| `GET /v1/me` |";
    let line = README
        .lines()
        .find(|l| l.starts_with(row))
        .expect("the row of /v1/me");
    let extra = doctored(
        row,
        Some(&format!(
            "{line}\n| `POST /v1/unserved` | nothing | {AVAILABLE} |"
        )),
    );
    let errors = compare_api(&extra, &document);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("row `POST /v1/unserved`: marked \"available\""),
        "{errors:?}"
    );
    let planned = extra.replace("| nothing | available |", "| nothing | not yet |");
    assert_eq!(compare_api(&planned, &document), Vec::<String>::new());
    // An operation added to the server, as another route of the document.
    let mut grown = document.clone();
    grown["paths"]["/v1/conversations/{conv_id}/events/{seq}/reactions"] = serde_json::json!({
        "post": {"summary": "React to a message.", "responses": {}}
    });
    let errors = compare_api(README, &grown);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("no row for `POST /v1/conversations/{conv_id}/events/{seq}/reactions`"),
        "{errors:?}"
    );
}

#[test]
fn table_cells_keep_escaped_pipes_and_code_spans() {
    assert_eq!(
        split_row(r#"| `GET /x` | `"a"\|"b"` | available |"#),
        ["`GET /x`", r#"`"a"|"b"`"#, "available"]
    );
    assert_eq!(
        code_spans("`GET /healthz`, `GET /readyz`"),
        ["GET /healthz", "GET /readyz"]
    );
    assert!(table_after(README, "## No such section", FLAG_HEADER).is_none());
}
