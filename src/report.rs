//! Rendering a validation [`Report`] for people and machines: `human`, `json`, `github`
//! (workflow commands that annotate a pull request) and `sarif` (code scanning).
//!
//! Renderers return strings and never print. The human form carries ANSI styles; the CLI writes
//! it through a stream that strips them when the output is not a terminal or `NO_COLOR` is set.

use std::fmt::Write as _;
use std::path::Path;

use anstyle::{AnsiColor, Style};
use serde_json::json;

use crate::config::Sources;
use crate::diagnostic::{self, Diagnostic, Location, Severity};
use crate::plural::plural;
use crate::shown::shown;
use crate::validate::Report;

/// The `formatVersion` of the JSON document; bump the major on breaking changes. Version 2
/// renamed `format_version` to `formatVersion` (every key deepcli writes is camelCase).
pub const JSON_FORMAT_VERSION: &str = "2";

const BOLD: Style = Style::new().bold();
const ERROR: Style = AnsiColor::Red.on_default().bold();
const WARNING: Style = AnsiColor::Yellow.on_default().bold();
const GUTTER: Style = AnsiColor::Blue.on_default().bold();
const HINT: Style = AnsiColor::Cyan.on_default().bold();

/// `2 errors, 1 warning in 3 files`.
pub fn summary(report: &Report) -> String {
    format!(
        "{}, {} in {}",
        plural(report.errors(), "error", "errors"),
        plural(report.warnings(), "warning", "warnings"),
        plural(report.config.sources.files.len(), "file", "files")
    )
}

/// `file:line:col: severity[rule]: message`, the source line with an underline, hints, and a
/// summary line.
pub fn human(report: &Report) -> String {
    let mut out = String::new();
    // Secret values are masked on every line they appear on, not only under their own
    // diagnostic: another finding on the same line must not echo them.
    let secrets: Vec<&Location> = report
        .diagnostics
        .iter()
        .filter(|d| d.redact)
        .filter_map(|d| d.location.as_ref())
        .collect();
    for d in &report.diagnostics {
        render_human(&mut out, d, &report.config.sources, &secrets);
        out.push('\n');
    }
    let style = if report.errors() > 0 {
        ERROR
    } else if report.warnings() > 0 {
        WARNING
    } else {
        BOLD
    };
    let _ = writeln!(out, "{style}{}{style:#}", summary(report));
    out
}

/// `file:line:col: error[rule]: message` on one line, without styles (logs, status).
pub fn one_line(d: &Diagnostic) -> String {
    let place = d
        .location
        .as_ref()
        .map_or_else(String::new, |l| format!("{}: ", position(l)));
    format!(
        "{place}{}[{}]: {}",
        d.severity.as_str(),
        d.rule.id,
        shown(&d.message)
    )
}

fn render_human(out: &mut String, d: &Diagnostic, sources: &Sources, secrets: &[&Location]) {
    let style = match d.severity {
        Severity::Error => ERROR,
        Severity::Warning => WARNING,
    };
    let place = d
        .location
        .as_ref()
        .map_or_else(String::new, |l| format!("{}: ", position(l)));
    let _ = writeln!(
        out,
        "{BOLD}{place}{BOLD:#}{style}{}[{}]{style:#}{BOLD}: {}{BOLD:#}",
        d.severity.as_str(),
        d.rule.id,
        shown(&d.message)
    );
    if let Some(location) = &d.location {
        snippet(out, location, sources, secrets);
    }
    for related in &d.related {
        let _ = writeln!(
            out,
            "  {GUTTER}={GUTTER:#} {}: {}",
            position(&related.location),
            shown(&related.message)
        );
    }
    if let Some(hint) = &d.hint {
        let _ = writeln!(out, "  {HINT}hint:{HINT:#} {}", shown(hint));
    }
}

/// The 0-based character range a location covers on its first line.
fn columns(l: &Location, line: &str) -> (usize, usize) {
    let col = l.span.start.column.max(1) as usize - 1;
    let end = if l.span.end.line == l.span.start.line && l.span.end.column > l.span.start.column {
        l.span.end.column as usize - 1
    } else {
        line.chars().count()
    };
    (col, end.max(col + 1))
}

/// The 0-based character range a secret covers on line `number` (`text`): a scalar may run
/// over several lines, and each of them may be shown under another finding.
fn masked_columns(secret: &Location, number: u32, text: &str) -> Option<(usize, usize)> {
    let (start, end) = (secret.span.start, secret.span.end);
    if number == start.line {
        return Some(columns(secret, text));
    }
    if number < start.line || number > end.line {
        return None;
    }
    let to = if number == end.line {
        end.column.saturating_sub(1) as usize
    } else {
        text.chars().count()
    };
    (to > 0).then_some((0, to))
}

fn position(l: &Location) -> String {
    format!(
        "{}:{}:{}",
        l.file.display(),
        l.span.start.line.max(1),
        l.span.start.column.max(1)
    )
}

/// The source line under a location with a `^^^` underline of the node's first line, secrets
/// on that line masked with `*`.
fn snippet(out: &mut String, location: &Location, sources: &Sources, secrets: &[&Location]) {
    let Some(file) = sources.by_path(&location.file) else {
        return;
    };
    let start = location.span.start;
    let Some(line) = file.line(start.line) else {
        return;
    };
    let masked: Vec<(usize, usize)> = secrets
        .iter()
        .filter(|s| s.file == location.file)
        .filter_map(|s| masked_columns(s, start.line, line))
        .collect();
    // Tabs become one space and other control characters `�`, so that the underline lines up
    // character for character and the line cannot move the cursor.
    let text: String = line
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            _ if masked.iter().any(|(from, to)| (*from..*to).contains(&i)) => '*',
            '\t' => ' ',
            c if crate::shown::is_control(c) => '\u{fffd}',
            c => c,
        })
        .collect();
    let (col, end) = columns(location, line);
    let width = (end - col).clamp(1, 120);
    let number = start.line.to_string();
    let pad = " ".repeat(number.len());
    let _ = writeln!(out, "{GUTTER}{pad} |{GUTTER:#}");
    let _ = writeln!(out, "{GUTTER}{number} |{GUTTER:#} {text}");
    let _ = writeln!(
        out,
        "{GUTTER}{pad} |{GUTTER:#} {}{GUTTER}{}{GUTTER:#}",
        " ".repeat(col),
        "^".repeat(width)
    );
}

/// The versioned JSON document.
pub fn json(report: &Report) -> String {
    let diagnostics: Vec<_> = report.diagnostics.iter().map(json_diagnostic).collect();
    let doc = json!({
        "formatVersion": JSON_FORMAT_VERSION,
        "valid": report.is_valid(),
        "errors": report.errors(),
        "warnings": report.warnings(),
        "diagnostics": diagnostics,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

fn json_diagnostic(d: &Diagnostic) -> serde_json::Value {
    let l = d.location.as_ref();
    json!({
        "rule": d.rule.id,
        "severity": d.severity,
        "message": d.message,
        "hint": d.hint,
        "file": l.map(|l| path_text(&l.file)),
        "line": l.map(|l| l.span.start.line.max(1)),
        "column": l.map(|l| l.span.start.column.max(1)),
        "pointer": l.map(|l| l.pointer.clone()),
        "related": d.related.iter().map(|r| json!({
            "file": path_text(&r.location.file),
            "line": r.location.span.start.line.max(1),
            "column": r.location.span.start.column.max(1),
            "message": r.message,
        })).collect::<Vec<_>>(),
    })
}

/// GitHub Actions workflow commands: one `::error`/`::warning` line per diagnostic.
pub fn github(report: &Report) -> String {
    let mut out = String::new();
    for d in &report.diagnostics {
        let mut message = d.message.clone();
        if let Some(hint) = &d.hint {
            message.push_str("\nhint: ");
            message.push_str(hint);
        }
        for r in &d.related {
            let l = &r.location;
            let _ = write!(
                message,
                "\n{}:{}:{}: {}",
                path_text(&l.file),
                l.span.start.line.max(1),
                l.span.start.column.max(1),
                r.message
            );
        }
        let mut props = Vec::new();
        if let Some(l) = &d.location {
            props.push(format!("file={}", escape_property(&path_text(&l.file))));
            props.push(format!("line={}", l.span.start.line.max(1)));
            props.push(format!("col={}", l.span.start.column.max(1)));
        }
        props.push(format!("title={}", escape_property(d.rule.id)));
        let _ = writeln!(
            out,
            "::{} {}::{}",
            d.severity.as_str(),
            props.join(","),
            escape_data(&message)
        );
    }
    out
}

fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// SARIF 2.1.0, one rule entry per rule id deepcli knows.
pub fn sarif(report: &Report) -> String {
    let rules: Vec<_> = diagnostic::rules::ALL
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.id,
                "shortDescription": {"text": r.summary},
                "defaultConfiguration": {"level": sarif_level(r.severity)},
                "helpUri": format!("https://github.com/deepcli/deepcli/blob/main/docs/config.md#{}", r.id),
            })
        })
        .collect();
    let results: Vec<_> = report
        .diagnostics
        .iter()
        .map(|d| {
            let index = diagnostic::rules::ALL
                .iter()
                .position(|r| r.id == d.rule.id)
                .unwrap_or(0);
            let mut text = d.message.clone();
            if let Some(hint) = &d.hint {
                let _ = write!(text, "\nhint: {hint}");
            }
            let mut result = json!({
                "ruleId": d.rule.id,
                "ruleIndex": index,
                "level": sarif_level(d.severity),
                "message": {"text": text},
            });
            // Code scanning rejects results without a location: a finding about the whole
            // directory points at the directory.
            if d.location.is_none() {
                result["locations"] = json!([{
                    "physicalLocation": {"artifactLocation": {"uri": path_text(&report.config.dir)}},
                }]);
            }
            if let Some(l) = &d.location {
                result["locations"] = json!([sarif_location(l)]);
                result["partialFingerprints"] = json!({
                    "deepcliPointer/v1": format!("{}#{}", path_text(&l.file), l.pointer),
                });
            }
            if !d.related.is_empty() {
                result["relatedLocations"] = d
                    .related
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let mut loc = sarif_location(&r.location);
                        loc["id"] = json!(i + 1);
                        loc["message"] = json!({"text": r.message});
                        loc
                    })
                    .collect();
            }
            result
        })
        .collect();
    let doc = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "deepcli",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/deepcli/deepcli",
                "rules": rules,
            }},
            "results": results,
        }],
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

fn sarif_level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

fn sarif_location(l: &Location) -> serde_json::Value {
    let start = l.span.start;
    let end = if l.span.end.line >= start.line.max(1) && l.span.end > start {
        l.span.end
    } else {
        start
    };
    json!({
        "physicalLocation": {
            "artifactLocation": {"uri": path_text(&l.file)},
            "region": {
                "startLine": start.line.max(1),
                "startColumn": start.column.max(1),
                "endLine": end.line.max(1),
                "endColumn": end.column.max(1),
            },
        },
    })
}

/// Paths with forward slashes, as GitHub and SARIF expect, and without a leading `./`.
fn path_text(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    text.strip_prefix("./").map(str::to_string).unwrap_or(text)
}
