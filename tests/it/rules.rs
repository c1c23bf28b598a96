//! Every rule has a failing and a passing fixture under `tests/fixtures/rules/<rule-id>/`, and a
//! section in docs/config.md; a schema error in one item does not cascade into other reports.
//!
//! `fail/expected.txt` lists, one per line, `<file>:<line>:<col> <rule-id>` for exactly the
//! diagnostics of that rule the directory must produce; `pass/` must produce none of that rule.

use std::path::{Path, PathBuf};

use deepcli::config::{self, FileKind, LoadOptions};
use deepcli::diagnostic::{Severity, rules};
use deepcli::validate::{self, validate_dir};

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

// ---- docs/config.md ----

/// `docs/config.md` with its fenced code blocks blanked out (their `# agents.yaml` lines are not
/// headings).
fn config_md_outside_code() -> Vec<String> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/config.md"))
            .expect("docs/config.md");
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return String::new();
            }
            if fenced {
                String::new()
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// The lines of config.md's `## Validation rules` section, up to the next `## ` heading.
fn rules_section() -> Vec<String> {
    let lines = config_md_outside_code();
    let start = lines
        .iter()
        .position(|l| l == "## Validation rules")
        .expect("docs/config.md has a `## Validation rules` section");
    lines[start + 1..]
        .iter()
        .take_while(|l| !l.starts_with("## "))
        .cloned()
        .collect()
}

/// A rule's section in config.md is a `### <rule-id>` heading (GitHub anchors it `#<rule-id>`,
/// which SARIF's `helpUri` and the human output's links point at) under `## Validation rules`,
/// whose first paragraph opens with its severity: `**Error.**` or `**Warning.**`. Every rule of
/// the catalogue has exactly one, in catalogue order, and no section names a rule that does not
/// exist.
#[test]
fn every_rule_has_its_section_in_config_md() {
    let section = rules_section();
    let mut documented: Vec<(String, Option<String>)> = Vec::new();
    for (i, line) in section.iter().enumerate() {
        let Some(id) = line.strip_prefix("### ") else {
            continue;
        };
        let first_paragraph = section[i + 1..]
            .iter()
            .find(|l| !l.trim().is_empty())
            .cloned();
        documented.push((id.trim().to_string(), first_paragraph));
    }
    let ids: Vec<&str> = documented.iter().map(|(id, _)| id.as_str()).collect();
    let catalogue: Vec<&str> = rules::ALL.iter().map(|r| r.id).collect();
    let missing: Vec<&&str> = catalogue.iter().filter(|id| !ids.contains(id)).collect();
    let unknown: Vec<&&str> = ids.iter().filter(|id| !catalogue.contains(id)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/config.md, `## Validation rules`: no `### <id>` section for {missing:?}; sections \
         for ids the catalogue (src/diagnostic.rs) does not have: {unknown:?}"
    );
    assert_eq!(ids, catalogue, "sections in catalogue order, each once");
    for ((id, first), rule) in documented.iter().zip(rules::ALL) {
        let severity = match rule.severity {
            Severity::Error => "**Error.**",
            Severity::Warning => "**Warning.**",
        };
        assert!(
            first.as_deref().is_some_and(|p| p.starts_with(severity)),
            "docs/config.md `### {id}` must open with {severity}, found {first:?}"
        );
    }
}

/// The table at the top of `## Validation rules` lists every rule once, in catalogue order,
/// linked to its section and with its default severity.
#[test]
fn the_rule_table_in_config_md_matches_the_catalogue() {
    let rows: Vec<(String, String)> = rules_section()
        .iter()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix('|')?.split('|').map(str::trim).collect();
            let link = cells.first()?.strip_prefix("[`")?;
            let (id, anchor) = link.split_once("`](#")?;
            assert_eq!(
                anchor.strip_suffix(')'),
                Some(id),
                "the table links `{id}` to another section: {line}"
            );
            Some((id.to_string(), cells.get(1)?.to_string()))
        })
        .collect();
    let catalogue: Vec<(String, String)> = rules::ALL
        .iter()
        .map(|r| (r.id.to_string(), r.severity.as_str().to_string()))
        .collect();
    assert_eq!(rows, catalogue);
}

// ---- one typo, one report ----

/// A hub where one agent, one channel and one binding fail the schema (the lines marked
/// `# lost`), and everything else refers to what they might have declared. The agent's id is
/// itself the typo, so not even its id survives.
const AGENTS_LOSING_ONE: &str = "\
agents:
  list:
    - id: main
      subagents: {allowAgents: [helper-bot]}
    - id: ops
    - {id: Helper Bot, model: m/x}   # lost
tools:
  agentToAgent: {enabled: true, allow: [main, helper-bot]}
";
const CHANNELS_LOSING_ONE: &str = "\
channels:
  telegram:
    accounts:
      default: {botToken: {source: env, id: TG}}
      work: {botToken: not-a-reference}
  discord: {enabled: \"yes\"}   # lost
";
const BINDINGS_LOSING_ONE: &str = "\
bindings:
  - agentId: helper-bot
    match: {channel: telegram}
  - agentId: main
    match: {channel: discord, guildId: g1}
  - agentId: main
    match: {channel: telegram, accountId: ghost}
  - agentId: main
    match: {channel: telegram, peer: {kind: group, id: \"g\"}}
  - agentId: ops
    match: {channel: telegram, peer: {kind: group, id: \"g\"}}
  - {agentId: ops, match: {channel: telegram, accountId: 42}}   # lost
";

/// `file:line:col rule` of every diagnostic of the three texts, in report order.
fn findings(agents: &str, channels: &str, bindings: &str) -> Vec<String> {
    let texts = vec![
        (
            FileKind::Agents,
            PathBuf::from("agents.yaml"),
            agents.to_string(),
        ),
        (
            FileKind::Channels,
            PathBuf::from("channels.yaml"),
            channels.to_string(),
        ),
        (
            FileKind::Bindings,
            PathBuf::from("bindings.yaml"),
            bindings.to_string(),
        ),
    ];
    let report = validate::finish(config::load_texts(Path::new("."), texts, &options()));
    report
        .diagnostics
        .iter()
        .map(|d| {
            let l = d
                .location
                .as_ref()
                .expect("a finding in a file has a location");
            format!(
                "{}:{}:{} {}",
                l.file.display(),
                l.span.start.line,
                l.span.start.column,
                d.rule.id
            )
        })
        .collect()
}

fn without_lost_lines(text: &str) -> String {
    text.lines()
        .filter(|l| !l.ends_with("# lost"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// ARCHITECTURE.md: a rule that resolves references into a collection stays silent when that
/// collection lost items to schema errors. Here agents, channels and bindings each lost one:
/// the binding to `helper-bot`, both allow lists naming it, the binding on `discord`, the one
/// on account `ghost` and the uncovered `work` account are not reported, since the lost items
/// may be what they mean; the schema errors themselves and the findings that need no lost item
/// (an inline secret, a binding conflict) still are.
#[test]
fn a_collection_that_lost_items_to_schema_errors_does_not_cascade() {
    assert_eq!(
        findings(AGENTS_LOSING_ONE, CHANNELS_LOSING_ONE, BINDINGS_LOSING_ONE),
        [
            "agents.yaml:6:12 schema",
            "bindings.yaml:11:12 binding-conflict",
            "bindings.yaml:12:58 schema",
            "channels.yaml:5:24 inline-secret",
            "channels.yaml:6:22 schema",
        ]
    );
}

/// The control: the same files without the lost items, so no collection is incomplete. Every
/// reference the test above expects to stay silent is now reported, so that silence is the
/// completeness check's doing and not the fixture's.
#[test]
fn the_same_references_are_reported_when_nothing_was_lost() {
    assert_eq!(
        findings(
            &without_lost_lines(AGENTS_LOSING_ONE),
            &without_lost_lines(CHANNELS_LOSING_ONE),
            &without_lost_lines(BINDINGS_LOSING_ONE)
        ),
        [
            "agents.yaml:4:33 unknown-agent",
            "agents.yaml:7:47 unknown-agent",
            "bindings.yaml:2:14 unknown-agent",
            "bindings.yaml:5:22 unknown-channel",
            "bindings.yaml:7:43 unknown-account",
            "bindings.yaml:11:12 binding-conflict",
            "channels.yaml:5:7 uncovered-account",
            "channels.yaml:5:24 inline-secret",
        ]
    );
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

// Sandbox binds: what a bind reaches depends on the config directory and on the agent's own
// directories, which the fixtures cannot vary.

/// The findings of `rule` in agents.yaml `text`, loaded as if from the config directory `dir`.
fn in_config_dir(dir: &str, text: &str, rule: &str) -> Vec<String> {
    let texts = vec![(
        FileKind::Agents,
        Path::new(dir).join("agents.yaml"),
        text.to_string(),
    )];
    let report = validate::finish(config::load_texts(Path::new(dir), texts, &options()));
    pointers(&report, rule)
}

/// isolation.md: the config directory is never writable by a runtime (an agent that could edit
/// it would apply its own changes), but reading it is allowed: only `rw` binds that reach it
/// are refused.
#[test]
fn a_rw_bind_may_not_reach_the_config_directory() {
    let agents = "\
agents:
  list:
    - id: main
      runtime: {kind: acp, command: [codex-acp]}
      sandbox:
        binds:
          - {path: /etc/deepcli, mode: ro}
          - {path: /etc, mode: rw}
          - {path: /etc/deepcli/prompts/.., mode: rw}
          - {path: /etc/deepcli/prompts, mode: rw}
          - {path: /etc/deepcli-other, mode: rw}
";
    assert_eq!(
        in_config_dir("/etc/deepcli", agents, "sandbox-bind"),
        [
            "/agents/list/0/sandbox/binds/1/path error",
            "/agents/list/0/sandbox/binds/2/path error",
            "/agents/list/0/sandbox/binds/3/path error",
        ]
    );
}

/// A bind inside the agent's own workspace is allowed even where that workspace lies in the
/// state directory (the sandbox grants it anyway), but not when the workspace holds the state
/// directory: there a bind inside the state directory uncovers what the sandbox hides. A parent
/// of the agent's own workspace is refused when it holds the state directory.
#[test]
fn a_bind_inside_the_agents_own_workspace_is_refused_only_where_it_reaches_the_state() {
    let agents = "\
agents:
  defaults:
    runtime: {kind: acp, command: [codex-acp]}
  list:
    - id: main
      sandbox:
        binds:
          - {path: /srv/deepcli-state/workspaces/main/cache, mode: rw}
          - path: /srv/deepcli-state/workspaces
    - id: wide
      workspace: /srv
      sandbox:
        binds:
          - path: /srv/projects
          - path: /srv/deepcli-state/trash
";
    assert_eq!(
        in_config_dir("/etc/deepcli", agents, "sandbox-bind"),
        [
            "/agents/list/0/sandbox/binds/1/path error",
            "/agents/list/1/sandbox/binds/1/path error",
        ]
    );
}

/// `agents.defaults.sandbox` is reported as not enforced only when no agent runs a runtime it
/// could hold; once one does, the agents that run nothing are not named (their own `sandbox`
/// would be).
#[test]
fn a_default_sandbox_is_not_enforced_only_when_nothing_runs() {
    let nothing_runs = "\
agents:
  defaults:
    sandbox: {network: none}
  list:
    - id: main
    - id: remote
      runtime: {kind: a2a, url: \"https://peer.example.com/a2a\"}
";
    assert_eq!(
        in_config_dir("/etc/deepcli", nothing_runs, "not-enforced"),
        ["/agents/defaults/sandbox warning"]
    );
    let one_runs = format!(
        "{nothing_runs}    - id: coder\n      runtime: {{kind: acp, command: [codex-acp]}}\n"
    );
    assert_eq!(
        in_config_dir("/etc/deepcli", &one_runs, "not-enforced"),
        Vec::<String>::new()
    );
}
