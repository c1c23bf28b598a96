//! Every rule has a failing and a passing fixture under `tests/fixtures/rules/<rule-id>/`.
//!
//! `fail/expected.txt` lists, one per line, `<file>:<line>:<col> <rule-id>` for exactly the
//! diagnostics of that rule the directory must produce; `pass/` must produce none of that rule.

use std::path::{Path, PathBuf};

use deepcli::config::LoadOptions;
use deepcli::diagnostic::rules;
use deepcli::validate::validate_dir;

fn options() -> LoadOptions {
    LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rules")
}

/// `file:line:col rule` for every diagnostic of `rule` in `dir`.
fn found(dir: &Path, rule: &str) -> Vec<String> {
    let report = validate_dir(dir, &options()).expect("fixture dir loads");
    report
        .diagnostics
        .iter()
        .filter(|d| d.rule.id == rule)
        .map(|d| match &d.location {
            Some(l) => format!(
                "{}:{}:{} {}",
                l.file.file_name().unwrap().to_string_lossy(),
                l.span.start.line,
                l.span.start.column,
                d.rule.id
            ),
            None => format!("-:0:0 {}", d.rule.id),
        })
        .collect()
}

/// Rules whose fixtures cannot be files in the repo (tested in `tests/loader.rs`).
const TESTED_ELSEWHERE: &[&str] = &["file-too-large", "unreadable-file"];

#[test]
fn every_rule_has_fixtures() {
    let mut missing = Vec::new();
    for rule in rules::ALL {
        if TESTED_ELSEWHERE.contains(&rule.id) {
            continue;
        }
        for side in ["fail/expected.txt", "pass"] {
            if !fixtures().join(rule.id).join(side).exists() {
                missing.push(format!("{}/{side}", rule.id));
            }
        }
    }
    assert!(missing.is_empty(), "missing fixtures: {missing:#?}");
}

#[test]
fn failing_fixtures_report_their_rule_at_the_expected_places() {
    let mut failures = Vec::new();
    for rule in rules::ALL {
        let dir = fixtures().join(rule.id).join("fail");
        let Ok(expected) = std::fs::read_to_string(dir.join("expected.txt")) else {
            continue;
        };
        let expected: Vec<String> = expected
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        assert!(!expected.is_empty(), "{}: expected.txt is empty", rule.id);
        let got = found(&dir, rule.id);
        if got != expected {
            failures.push(format!(
                "{}:\n  expected {expected:?}\n  got      {got:?}",
                rule.id
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn passing_fixtures_do_not_report_their_rule() {
    let mut failures = Vec::new();
    for rule in rules::ALL {
        let dir = fixtures().join(rule.id).join("pass");
        if !dir.exists() {
            continue;
        }
        let got = found(&dir, rule.id);
        if !got.is_empty() {
            failures.push(format!("{}: {got:?}", rule.id));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
