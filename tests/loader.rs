//! Loading bad input: every failure is a diagnostic with a position, nothing panics.

use std::path::PathBuf;

use deepcli::config::yaml::{self, Pos};
use deepcli::config::{self, FileKind, LoadError, LoadOptions};
use deepcli::validate::{self, validate_dir};
use proptest::prelude::*;

fn options() -> LoadOptions {
    LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    }
}

fn rule_ids(dir: &std::path::Path) -> Vec<&'static str> {
    validate_dir(dir, &options())
        .unwrap()
        .diagnostics
        .iter()
        .map(|d| d.rule.id)
        .collect()
}

#[test]
fn a_file_over_16_mib_is_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("bindings.yaml")).unwrap();
    file.set_len(config::MAX_FILE_BYTES + 1).unwrap();
    assert_eq!(rule_ids(dir.path()), ["file-too-large"]);
}

#[test]
fn an_unreadable_file_is_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents.yaml")).unwrap();
    std::fs::write(dir.path().join("bindings.yaml"), "bindings: []\n").unwrap();
    assert_eq!(rule_ids(dir.path()), ["unreadable-file"]);
}

#[test]
fn a_missing_directory_is_a_load_error() {
    let err = validate_dir(std::path::Path::new("/nonexistent/deepcli"), &options()).unwrap_err();
    assert!(matches!(err, LoadError::NotFound(_)));
}

#[test]
fn an_empty_file_declares_nothing_and_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agents.yaml"), "").unwrap();
    std::fs::write(dir.path().join("bindings.yaml"), "# only a comment\n").unwrap();
    let report = validate_dir(dir.path(), &options()).unwrap();
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
    assert_eq!(report.config.default_agent, "main");
    assert_eq!(report.config.agents.len(), 1, "the implicit main agent");
}

#[test]
fn non_utf8_points_at_the_first_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.yaml"),
        b"agents:\n  list:\n    - id: m\xffin\n",
    )
    .unwrap();
    let report = validate_dir(dir.path(), &options()).unwrap();
    let d = &report.diagnostics[0];
    assert_eq!(d.rule.id, "non-utf8");
    let at = d.location.as_ref().unwrap().span.start;
    assert_eq!((at.line, at.column), (3, 12));
}

#[test]
fn a_utf8_bom_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bindings.yaml"), "\u{feff}bindings: []\n").unwrap();
    assert!(rule_ids(dir.path()).is_empty());
}

#[test]
fn defaults_paths_and_the_implicit_main_are_resolved() {
    let texts = vec![(
        FileKind::Agents,
        PathBuf::from("agents.yaml"),
        "agents:\n  defaults: {model: m/default}\n  list:\n    - id: a\n      workspace: ~/w/a\n    - id: b\n      agentDir: rel/b/agent\n      model: m/own\n"
            .to_string(),
    )];
    let loaded = config::load_texts(std::path::Path::new("."), texts, &options());
    let report = validate::finish(loaded);
    assert!(report.diagnostics.is_empty(), "{:?}", report.diagnostics);
    let c = &report.config;
    assert_eq!(
        c.default_agent, "a",
        "no agent marked default: the first listed"
    );
    let ids: Vec<_> = c.agents.iter().map(|a| a.id()).collect();
    assert_eq!(ids, ["a", "b", "main"]);
    let a = &c.agents[0];
    assert_eq!(a.workspace, PathBuf::from("/home/operator/w/a"));
    assert_eq!(
        a.agent_dir,
        PathBuf::from("/srv/deepcli-state/agents/a/agent")
    );
    assert_eq!(
        a.sessions_dir,
        PathBuf::from("/srv/deepcli-state/agents/a/sessions")
    );
    assert_eq!(format!("{:?}", a.spec.model), "Some(Id(\"m/default\"))");
    let b = &c.agents[1];
    assert_eq!(b.agent_dir, PathBuf::from("/srv/deepcli-state/rel/b/agent"));
    assert_eq!(format!("{:?}", b.spec.model), "Some(Id(\"m/own\"))");
    assert_eq!(
        b.workspace,
        PathBuf::from("/srv/deepcli-state/workspaces/b")
    );
}

#[test]
fn a_schema_error_in_one_binding_keeps_the_others() {
    let texts = vec![(
        FileKind::Bindings,
        PathBuf::from("bindings.yaml"),
        "bindings:\n  - agentId: main\n    match: {channel: cli, accountId: 42}\n  - agentId: ghost\n    match: {channel: cli}\n".to_string(),
    )];
    let report = validate::finish(config::load_texts(
        std::path::Path::new("."),
        texts,
        &options(),
    ));
    let ids: Vec<_> = report.diagnostics.iter().map(|d| d.rule.id).collect();
    assert_eq!(ids, ["schema", "unknown-agent"]);
    assert_eq!(report.config.bindings.len(), 1);
    assert_eq!(
        report.config.bindings[0].index, 1,
        "indices stay those of the file"
    );
}

/// Runs the whole pipeline on arbitrary texts; the property is "no panic, and every
/// diagnostic has a position inside the file".
fn check_texts(agents: &str, channels: &str, bindings: &str) {
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
    let report = validate::finish(config::load_texts(
        std::path::Path::new("."),
        texts,
        &options(),
    ));
    let text_of = |l: &deepcli::diagnostic::Location| match l.file.to_str() {
        Some("agents.yaml") => agents,
        Some("channels.yaml") => channels,
        Some("bindings.yaml") => bindings,
        other => panic!("a diagnostic about {other:?}, which was not loaded"),
    };
    for d in &report.diagnostics {
        let l = d
            .location
            .as_ref()
            .expect("diagnostics on files have a location");
        let related = d.related.iter().map(|r| &r.location);
        for l in std::iter::once(l).chain(related) {
            let text = text_of(l);
            for pos in [l.span.start, l.span.end] {
                assert_inside(text, pos, d);
            }
        }
    }
    let _ = deepcli::report::human(&report);
}

/// A position is inside `text`: a line it has, and a column of that line or just after its
/// last character (where a missing value or the end of the file is reported). Lines end where
/// YAML ends them, at `\n`, `\r\n` or a lone `\r`; columns count characters. (Positions
/// carry no byte offsets.)
fn assert_inside(text: &str, pos: Pos, d: &deepcli::diagnostic::Diagnostic) {
    let lines: Vec<&str> = text
        .split("\r\n")
        .flat_map(|l| l.split(['\n', '\r']))
        .collect();
    let line = (pos.line as usize)
        .checked_sub(1)
        .and_then(|i| lines.get(i))
        .unwrap_or_else(|| {
            panic!(
                "line {} is outside the file ({} lines): {d:?}\n{text:?}",
                pos.line,
                lines.len()
            )
        });
    let columns = line.chars().count() + 1;
    assert!(
        (1..=columns).contains(&(pos.column as usize)),
        "column {} is outside line {} ({} characters): {d:?}\n{text:?}",
        pos.column,
        pos.line,
        columns - 1
    );
}

/// Regression (found by the fuzzers once they checked positions against the file): at the end
/// of a file without a final line break the YAML scanner stands one line past the end, and
/// errors and the ends of nodes were reported there (`a: b\nc` at 3:1 in a file of two lines,
/// the root of `- x` ending at 2:1).
#[test]
fn an_error_at_the_end_of_a_file_without_a_final_newline_is_inside_it() {
    for (text, at) in [
        ("{a", (1, 3)),
        ("%!", (1, 3)),
        ("a: b\nc", (2, 2)),
        ("a: b\r\nc", (2, 2)),
        ("agents:\n  list: [a,", (2, 12)),
    ] {
        let e = yaml::parse(text).unwrap_err();
        assert_eq!(
            (e.span.start.line, e.span.start.column),
            at,
            "{text:?}: {e:?}"
        );
    }
    // The nodes that end at the end of such a file: the root and its last descendants.
    for (text, end) in [
        ("- x", (1, 4)),
        ("a:\n  - x", (2, 6)),
        ("a: |\n  x", (2, 4)),
    ] {
        let root = yaml::parse(text).unwrap().unwrap();
        let mut ends = vec![root.span.end];
        let mut node = &root;
        while let Some(last) = match &node.value {
            yaml::Value::Seq(items) => items.last(),
            yaml::Value::Map(entries) => entries.last().map(|e| &e.value),
            _ => None,
        } {
            ends.push(last.span.end);
            node = last;
        }
        let ends: Vec<(u32, u32)> = ends.iter().map(|p| (p.line, p.column)).collect();
        assert!(ends.iter().all(|&e| e == end), "{text:?}: {ends:?}");
    }
}

const SEEDS: &[&str] = &[
    "agents:\n  list:\n    - id: main\n      default: true\n    - id: research\n      runtime: {kind: acp, command: [x]}\n",
    "channels:\n  telegram:\n    accounts:\n      default: {botToken: \"${T}\"}\n      biz: {dmPolicy: open, allowFrom: [\"*\"]}\n",
    "bindings:\n  - agentId: research\n    match: {channel: telegram, accountId: biz, peer: {kind: dm, id: \"1\"}}\n  - agentId: main\n    match: {channel: discord, guildId: g, roles: [r]}\n",
];

/// 2,000 cases per property in the normal run; `PROPTEST_CASES=200000 cargo test --release
/// --test loader` for a long soak (docs/yaml.md, "Fuzzing").
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        check_texts(&text, &text, &text);
    }

    #[test]
    fn yaml_shaped_noise_never_panics(text in "([-:{}\\[\\],&*!|>'\" \n\t#a-z0-9]|agents|list|id|bindings|match|channel){0,120}") {
        check_texts(&text, &text, &text);
    }

    #[test]
    fn mutated_configs_never_panic(
        which in 0usize..3,
        at in 0usize..400,
        insert in "[-:{}\\[\\],&*!|>'\" \n\ta-z0-9]{0,4}",
        cut in 0usize..4,
    ) {
        let seed = SEEDS[which];
        let at = seed.floor_char_boundary(at.min(seed.len()));
        let end = seed.floor_char_boundary((at + cut).min(seed.len()));
        let mutated = format!("{}{}{}", &seed[..at], insert, &seed[end..]);
        let mut texts = [SEEDS[0].to_string(), SEEDS[1].to_string(), SEEDS[2].to_string()];
        texts[which] = mutated;
        check_texts(&texts[0], &texts[1], &texts[2]);
    }
}

#[test]
fn the_quote_hint_shows_the_number_as_written() {
    let texts = vec![(
        FileKind::Bindings,
        PathBuf::from("bindings.yaml"),
        "bindings:\n  - agentId: main\n    match: {channel: cli, peer: {kind: direct, id: 0777}}\n"
            .to_string(),
    )];
    let report = validate::finish(config::load_texts(
        std::path::Path::new("."),
        texts,
        &options(),
    ));
    let hint = report.diagnostics[0].hint.as_deref().unwrap();
    assert!(hint.contains("\"0777\""), "{hint}");
}
