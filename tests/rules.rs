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

// Secrets: empty secret fields, credentials recognised by their shape wherever a string is
// stored, and values that never reach any output format.

/// Validates a temp directory holding `files`.
fn validate_files(files: &[(&str, &str)]) -> deepcli::validate::Report {
    let tmp = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(tmp.path().join(name), text).unwrap();
    }
    validate_dir(tmp.path(), &options()).expect("temp dir loads")
}

/// `pointer severity` of every diagnostic of `rule`.
fn pointers(report: &deepcli::validate::Report, rule: &str) -> Vec<String> {
    report
        .diagnostics
        .iter()
        .filter(|d| d.rule.id == rule)
        .map(|d| {
            format!(
                "{} {}",
                d.location.as_ref().map_or("-", |l| l.pointer.as_str()),
                d.severity.as_str()
            )
        })
        .collect()
}

/// Every rendering of a report, one after the other.
fn every_format(report: &deepcli::validate::Report) -> String {
    use deepcli::report;
    [
        report::human(report),
        report::json(report),
        report::github(report),
        report::sarif(report),
    ]
    .concat()
}

/// Fake credentials of each shape deepcli recognises, in the forms the providers document
/// (`EXAMPLE` in them so that no scanner takes them for real ones).
const FAKES: &[(&str, &str)] = &[
    ("openai", "sk-proj-EXAMPLE0example0EXAMPLE0example0EXAMPLE"),
    (
        "openai-legacy",
        "sk-EXAMPLE0example0EXAMPLE0example0EXAMPLE00",
    ),
    (
        "anthropic",
        "sk-ant-api03-EXAMPLE0example0EXAMPLE0example0-EXAMPLE",
    ),
    (
        "slack-bot",
        "xoxb-123456789012-1234567890123-EXAMPLEexample0EXAMPLE",
    ),
    (
        "slack-user",
        "xoxp-123456789012-1234567890123-EXAMPLEexample0EXAMPLE",
    ),
    (
        "slack-app",
        "xapp-1-A0EXAMPLE00-1234567890123-EXAMPLE0example",
    ),
    ("github", "ghp_EXAMPLE0example0EXAMPLE0example0EXAM"),
    ("github-oauth", "gho_EXAMPLE0example0EXAMPLE0example0EXAM"),
    ("github-app", "ghs_EXAMPLE0example0EXAMPLE0example0EXAM"),
    (
        "github-pat",
        "github_pat_11EXAMPLE0example0EXAMPLE_EXAMPLE0example0EXAMPLE0example0EXAMPLE0example00",
    ),
    ("telegram", "123456789:AAEXAMPLE0example0EXAMPLE0example0X"),
    ("aws", "AKIAIOSFODNN7EXAMPLE"),
    (
        "url-password",
        "https://bot:hunter2-EXAMPLE-pw@hooks.example.com/in",
    ),
];

#[test]
fn an_empty_webhook_secret_is_a_validation_error() {
    for value in ["\"\"", "''", "\"   \"", "\"\\n\""] {
        let channels = format!(
            "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: \"${{TG_TOKEN}}\"\n        webhookSecret: {value}\n"
        );
        let report = validate_files(&[("channels.yaml", &channels)]);
        let at = "/channels/telegram/accounts/default/webhookSecret";
        assert_eq!(
            pointers(&report, "empty-secret"),
            [format!("{at} error")],
            "webhookSecret: {value}"
        );
        assert_eq!(
            pointers(&report, "inline-secret"),
            Vec::<String>::new(),
            "webhookSecret: {value} holds no secret to rotate"
        );
    }
}

#[test]
fn an_openai_key_in_runtime_env_is_flagged() {
    // The name says nothing; the value is an OpenAI key.
    let agents = format!(
        "agents:\n  list:\n    - id: main\n      runtime:\n        kind: process\n        command: [my-agent]\n        env:\n          MY_KEY: {}\n",
        FAKES[0].1
    );
    let report = validate_files(&[("agents.yaml", &agents)]);
    assert_eq!(
        pointers(&report, "inline-secret"),
        ["/agents/list/0/runtime/env/MY_KEY error"]
    );
}

#[test]
fn a_credential_is_flagged_wherever_a_string_is_stored() {
    for (what, fake) in FAKES {
        // An identity, a command argument, a binding's comment, an account's name, an
        // agents.defaults env value, an allowFrom entry inside a longer text.
        let agents = format!(
            "agents:\n  defaults:\n    runtime: {{env: {{PLAIN: \"{fake}\"}}}}\n  list:\n    - id: main\n      identity: {{theme: \"{fake}\"}}\n      runtime: {{kind: process, command: [curl, \"-H\", \"X-Auth: {fake}\"]}}\n"
        );
        let channels = format!(
            "channels:\n  telegram:\n    accounts:\n      default:\n        name: \"{fake}\"\n        botToken: \"${{TG_TOKEN}}\"\n        allowFrom: [\"note {fake} end\"]\n"
        );
        let bindings = format!(
            "bindings:\n  - agentId: main\n    comment: \"{fake}\"\n    match: {{channel: telegram}}\n"
        );
        let report = validate_files(&[
            ("agents.yaml", &agents),
            ("channels.yaml", &channels),
            ("bindings.yaml", &bindings),
        ]);
        let mut found = pointers(&report, "inline-secret");
        found.sort();
        assert_eq!(
            found,
            [
                "/agents/defaults/runtime/env/PLAIN error",
                "/agents/list/0/identity/theme error",
                "/agents/list/0/runtime/command/2 error",
                "/bindings/0/comment error",
                "/channels/telegram/accounts/default/allowFrom/0 error",
                "/channels/telegram/accounts/default/name error",
            ],
            "{what}: {fake}"
        );
        let out = every_format(&report);
        assert!(!out.contains(fake), "{what} is printed:\n{out}");
    }
}

#[test]
fn a_password_in_reply_url_is_flagged_and_never_printed() {
    let channels = "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: \"${TG_TOKEN}\"\n        replyUrl: \"http://bot:hunter2-EXAMPLE-pw@127.0.0.1:9000/reply\"\n";
    let report = validate_files(&[("channels.yaml", channels)]);
    assert_eq!(
        pointers(&report, "inline-secret"),
        ["/channels/telegram/accounts/default/replyUrl error"]
    );
    let out = every_format(&report);
    assert!(!out.contains("hunter2"), "{out}");
}

#[test]
fn a_secret_echoed_by_a_schema_error_is_not_printed() {
    // replyUrl must be http://, and dmPolicy an enum: the schema's messages quote the value.
    let channels = "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: \"${TG_TOKEN}\"\n        replyUrl: \"https://bot:hunter2-EXAMPLE-pw@hooks.example.com/in\"\n        dmPolicy: \"ghp_EXAMPLE0example0EXAMPLE0example0EXAM\"\n";
    let report = validate_files(&[("channels.yaml", channels)]);
    assert!(
        !pointers(&report, "schema").is_empty(),
        "{:#?}",
        report.diagnostics
    );
    let out = every_format(&report);
    for secret in ["hunter2", "ghp_EXAMPLE0example0EXAMPLE0example0EXAM"] {
        assert!(!out.contains(secret), "`{secret}` is printed:\n{out}");
    }
}

#[test]
fn a_jwt_or_a_token_in_a_url_query_is_a_possible_secret() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJFWEFNUExFIn0.EXAMPLE0example0EXAMPLE0example0";
    let agents = format!(
        "agents:\n  list:\n    - id: main\n      identity: {{avatar: \"http://cdn.example.com/a.png?token=EXAMPLE0example0\"}}\n      runtime:\n        kind: process\n        command: [my-agent]\n        env:\n          SESSION: \"{jwt}\"\n          AUTH_HEADER: \"Bearer EXAMPLE0example0EXAMPLE0example\"\n"
    );
    let report = validate_files(&[("agents.yaml", &agents)]);
    let mut found = pointers(&report, "possible-secret");
    found.sort();
    assert_eq!(
        found,
        [
            "/agents/list/0/identity/avatar warning",
            "/agents/list/0/runtime/env/AUTH_HEADER warning",
            "/agents/list/0/runtime/env/SESSION warning",
        ]
    );
    let out = every_format(&report);
    for secret in [
        jwt,
        "EXAMPLE0example0EXAMPLE0example",
        "token=EXAMPLE0example0",
    ] {
        assert!(!out.contains(secret), "`{secret}` is printed:\n{out}");
    }
}

#[test]
fn ordinary_strings_are_not_taken_for_credentials() {
    let agents = "agents:\n  list:\n    - id: main\n      name: sk-learn task-force ghp_short xoxb AKIA\n      model: anthropic/claude-sonnet-4\n      identity: {theme: \"ask-anything-about-everything-ever-written\", avatar: \"http://cdn.example.com/a.png?size=64&key=\"}\n      groupChat: {mentionPatterns: [\"@main\", \"user:name@example.com\"]}\n      runtime:\n        kind: process\n        command: [my-agent, \"--url=http://adapter:8080/reply\", \"postgres://db.internal/app\", \"http://user@host/x\", \"http://host/a:b@c\"]\n        env:\n          RUST_LOG: info\n          HASH: sha256:5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n          ID: 123e4567-e89b-12d3-a456-426614174000\n          EMPTY_TOKEN: \"\"\n          DSN: \"http://user:${DB_PASSWORD}@db/app\"\n          REF: \"${OPENAI_API_KEY}\"\nsession:\n  identityLinks: {alice: [\"telegram:111111111\", \"discord:222222222222222222\"]}\n";
    let channels = "channels:\n  telegram:\n    accounts:\n      default:\n        botToken: {source: env, id: TELEGRAM_BOT_TOKEN}\n        webhookSecret: \"${WEBHOOK_SECRET}\"\n        replyUrl: \"http://127.0.0.1:9000/reply\"\n        allowFrom: [\"111111111\", \"-1001234567890\"]\n";
    let bindings = "bindings:\n  - agentId: main\n    comment: routes telegram group -1001234567890 to main\n    match: {channel: telegram, peer: {kind: group, id: \"-1001234567890\"}}\n";
    let report = validate_files(&[
        ("agents.yaml", agents),
        ("channels.yaml", channels),
        ("bindings.yaml", bindings),
    ]);
    for rule in ["inline-secret", "possible-secret", "empty-secret"] {
        assert_eq!(pointers(&report, rule), Vec::<String>::new(), "{rule}");
    }
    // The shipped examples are clean.
    for example in ["quickstart", "multi-account-slack"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(example);
        let report = validate_dir(&dir, &options()).unwrap();
        assert!(
            report.diagnostics.is_empty(),
            "{example}: {:#?}",
            report.diagnostics
        );
    }
}

#[test]
fn a_multi_line_secret_is_masked_on_every_line_shown() {
    // The schema error on `emoji` shows line 4, which holds the end of the token's scalar;
    // the error on `name` shows the line after a block scalar, which holds no secret.
    let agents = "agents:\n  list:\n    - {id: main, identity: {theme: \"ghp_EXAMPLE0example0EXAMPLE0example0EXAM\n        continued-tail-SECRETPART\", emoji: 5}}\n    - id: other\n      identity:\n        theme: |\n          -----BEGIN PRIVATE KEY-----\n          MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n          -----END PRIVATE KEY-----\n        name: 7\n";
    let report = validate_files(&[("agents.yaml", agents)]);
    assert_eq!(
        pointers(&report, "inline-secret"),
        [
            "/agents/list/0/identity/theme error",
            "/agents/list/1/identity/theme error"
        ]
    );
    let out = every_format(&report);
    for secret in [
        "SECRETPART",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        "ghp_EXAMPLE",
    ] {
        assert!(!out.contains(secret), "`{secret}` is printed:\n{out}");
    }
    assert!(out.contains(", emoji: 5}}"), "{out}");
    assert!(out.contains("name: 7"), "{out}");
}
