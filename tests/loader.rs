//! Loading bad input: every failure is a diagnostic with a position, nothing panics.

use std::path::PathBuf;

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
    for d in &report.diagnostics {
        let l = d
            .location
            .as_ref()
            .expect("diagnostics on files have a location");
        assert!(l.span.start.line >= 1, "{d:?}");
        let _ = deepcli::report::human(&report);
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
