//! Loading bad input: every failure is a diagnostic with a position inside the file, nothing
//! panics; and a large file parsed in pieces loads into the tree the whole parse gives.

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
    // The models are resolved, and not enforced (these agents run nothing): only that is said.
    assert!(
        report
            .diagnostics
            .iter()
            .all(|d| d.rule.id == "not-enforced"),
        "{:?}",
        report.diagnostics
    );
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

/// The keys issues 20 and 23 added (budgets, permissions, `runtime.kind: a2a` with `url` and
/// `token`, channels.yaml's `a2a:` block) decode from the span tree as from the JSON, and a
/// valid file decodes (not an error both ways).
#[test]
fn budgets_permissions_and_a2a_decode_from_the_tree() {
    use deepcli::config::model::{AgentsFile, ChannelsFile};
    use deepcli::config::yaml::de::from_node;
    let agents = "agents:\n  defaults:\n    budgets: {turnsPerHour: 10, costPerDayUsd: 2.5, concurrentTurns: 2.0}\n    permissions: {mode: approve-reads, timeoutSeconds: 60, approvers: [\"telegram:1\"]}\n  list:\n    - id: remote\n      runtime: {kind: a2a, url: \"https://r.example/a2a/x/\", token: {source: env, id: R}}\n      budgets: {turnsPerHour: 3}\n    - id: local\n      runtime: {kind: acp, command: [x]}\n      permissions: {mode: deny-all}\n";
    let channels = "channels:\n  telegram:\n    accounts:\n      main: {botToken: \"${T}\"}\na2a:\n  expose: [local]\n  peers:\n    partner: {token: {source: env, id: P}, allowAgents: [local], requestsPerMinute: 60}\n";
    for text in [agents, channels] {
        assert_tree_decode_is_json_decode(text).unwrap();
    }
    let root = yaml::parse(agents).unwrap().unwrap();
    let file: AgentsFile = from_node(&root).unwrap();
    assert_eq!(file, serde_json::from_value(root.to_json()).unwrap());
    let root = yaml::parse(channels).unwrap().unwrap();
    let file: ChannelsFile = from_node(&root).unwrap();
    let a2a = file.a2a.as_ref().expect("the a2a block is decoded");
    assert_eq!(a2a.expose, ["local"]);
    assert_eq!(a2a.peers["partner"].requests_per_minute, Some(60));
    assert_eq!(file, serde_json::from_value(root.to_json()).unwrap());
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

// ---- large files: the cut parse is the whole parse ----

/// One item of a large block sequence, in one of the shapes whose end a cut has to get right:
/// nested block mappings, empty values, block scalars with each chomping, flow and quoted
/// scalars over several lines, anchors (and, apart, aliases to them), comments and blank
/// lines, non-ASCII text.
fn big_item(shape: u8, n: usize) -> String {
    match shape % 17 {
        0 => format!("- agentId: a{n}\n  match: {{channel: telegram, accountId: acct-{n}}}\n"),
        1 => format!(
            "- agentId: a{n}\n  match:\n    channel: slack\n    peer:\n      kind: direct\n      id: \"u{n}\"\n"
        ),
        2 => format!("- agentId: a{n}\n  comment:\n  match: {{channel: cli}}\n"),
        3 => format!(
            "- agentId: a{n}\n  comment: |\n    line one\n    line two\n\n  match: {{channel: cli}}\n"
        ),
        4 => format!("- agentId: a{n}\n  match: {{channel: cli}}\n  comment: |+\n    kept\n\n\n"),
        5 => format!(
            "- agentId: a{n}\n  match: {{channel: cli}}\n  comment: >-\n    folded\n    text\n"
        ),
        6 => "-\n".to_string(),
        7 => format!("- plain {n}\n"),
        8 => format!("- \"quoted\n  over lines {n}\"\n"),
        9 => format!("- [a{n}, b, {{c: d}}]\n"),
        10 => format!("- {{agentId: a{n},\n   match: {{channel: cli}}}}\n"),
        11 => "# a comment\n\n".to_string(),
        12 => format!("- &anchor{n} {{agentId: x{n}, match: {{channel: cli}}}}\n"),
        13 => format!("- - nested {n}\n  - seq\n"),
        14 => {
            format!("- agentId: a{n} # trailing\n  match: {{channel: discord, guildId: \"{n}\"}}\n")
        }
        15 => format!("- agentId: \"é{n}\"\n  comment: 日本語\n  match: {{channel: cli}}\n"),
        _ => format!("- agentId: a{n}\n  match: {{channel: discord, roles:\n    [r1, r2]}}\n"),
    }
}

/// A bindings.yaml of at least `min_bytes`: its list cycles through `shapes`, indented by
/// `indent`, followed by one of four tails, with or without a final line break.
fn big_document(
    shapes: &[u8],
    indent: usize,
    tail: u8,
    newline_at_end: bool,
    min_bytes: usize,
) -> String {
    let pad = " ".repeat(indent);
    let mut text = String::from("# bindings\nbindings:\n");
    let mut n = 0;
    while text.len() < min_bytes {
        for line in big_item(shapes[n % shapes.len()], n).split_inclusive('\n') {
            if line != "\n" {
                text.push_str(&pad);
            }
            text.push_str(line);
        }
        n += 1;
    }
    match tail % 4 {
        0 => {}
        1 => text.push_str("other: x\n"),
        2 => text.push_str("# trailing comment\n"),
        _ => text.push_str("after:\n  - one\n"),
    }
    if !newline_at_end {
        while text.ends_with('\n') {
            text.pop();
        }
    }
    text
}

/// What `config::load_texts` made of a bindings.yaml: its tree, or its YAML error as
/// (message, span, related span).
type Outcome = Result<Option<yaml::Node>, (String, yaml::Span, Option<yaml::Span>)>;

fn loaded_tree(text: &str) -> Outcome {
    let texts = vec![(
        FileKind::Bindings,
        PathBuf::from("bindings.yaml"),
        text.to_string(),
    )];
    let mut loaded = config::load_texts(std::path::Path::new("."), texts, &options());
    let file = loaded.config.sources.files.pop().expect("the file is kept");
    let yaml_error = loaded.diagnostics.iter().find(|d| {
        [
            "yaml-syntax",
            "yaml-tab",
            "duplicate-key",
            "alias-limit",
            "yaml-too-deep",
        ]
        .contains(&d.rule.id)
    });
    match yaml_error {
        None => Ok(file.root),
        Some(d) => Err((
            d.message.clone(),
            d.location.as_ref().unwrap().span,
            d.related.first().map(|r| r.location.span),
        )),
    }
}

fn whole_tree(text: &str) -> Outcome {
    yaml::parse_whole(text).map_err(|e| (e.message, e.span, e.related))
}

/// Large-file cases: 12 in a normal run (each parses a file over 256 KiB three times), one
/// for every hundred of `PROPTEST_CASES` in a long one.
fn big_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(12, |n| (n / 100).max(12))
}

/// docs/yaml.md and ARCHITECTURE.md: a file of 256 KiB or more is parsed in pieces, and gives
/// the tree the whole parse gives, spans included, or the whole parse's error. Driven through
/// `config::load_texts`, the loading path every command takes; sometimes with a line of noise
/// put into the list (which may stop the cut or break the YAML).
///
/// A runner of its own rather than `proptest!`, which would take `PROPTEST_CASES` as is: a long
/// soak of the small properties would ask for hundreds of thousands of large files.
#[test]
fn a_large_file_loads_into_the_whole_parse_tree() {
    let config = ProptestConfig {
        cases: big_cases(),
        // Each shrinking step parses a large file three times: a few dozen steps say enough.
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let strategy = (
        prop::collection::vec(0u8..17, 1..24),
        prop::sample::select(vec![0usize, 2, 4]),
        0u8..4,
        any::<bool>(),
        0usize..64 * 1024,
        prop::option::of((0.0f64..1.0, "[-:{}\\[\\],&*!|>'\" #a-z0-9]{1,12}")),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let outcome = runner.run(
        &strategy,
        |(shapes, indent, tail, newline, extra, noise)| {
            let mut text = big_document(&shapes, indent, tail, newline, 256 * 1024 + extra);
            if let Some((at, noise)) = &noise {
                let line_starts: Vec<usize> = std::iter::once(0)
                    .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                    .filter(|&i| i < text.len())
                    .collect();
                let at = line_starts[((line_starts.len() - 1) as f64 * at) as usize];
                text.insert_str(at, &format!("{noise}\n"));
            }
            prop_assert!(text.len() >= 256 * 1024);
            let cut = yaml::is_cut(&text);
            // Cases the cut must take (its own test in config/yaml/parallel.rs says when): a list
            // of two or more items that does not start with an empty one, nothing after it but a
            // comment or a plain key, no noise. Not on a machine with one core, which never cuts.
            let first_item = shapes.iter().find(|&&s| s != 11);
            if cores >= 2 && noise.is_none() && tail != 3 && first_item.is_some_and(|&s| s != 6) {
                prop_assert!(cut, "a large list was not cut");
            }
            prop_assert!(loaded_tree(&text) == whole_tree(&text), "cut: {}", cut);
            Ok(())
        },
    );
    if let Err(e) = outcome {
        panic!("{e}");
    }
    if cores < 2 {
        eprintln!(
            "a_large_file_loads_into_the_whole_parse_tree: one core, so nothing was cut; the \
             equivalence of the cut was not tested"
        );
    }
}

// ---- the load path: item-by-item schema check and decoding from the tree ----

/// A file as `config::load` holds it, from its text.
fn source(kind: FileKind, text: &str) -> Option<config::SourceFile> {
    let root = yaml::parse(text).ok()?;
    let mut file = config::SourceFile::new(kind, PathBuf::from(kind.file_name()), text.to_string());
    file.root = root;
    Some(file)
}

/// The top-level keys of another file, which loading leaves out before the schema check.
fn misplaced(file: &config::SourceFile) -> Vec<String> {
    match file.root.as_ref().map(|r| &r.value) {
        Some(yaml::Value::Map(entries)) => entries
            .iter()
            .filter(|e| FileKind::owning(&e.key).is_some_and(|k| k != file.kind))
            .map(|e| e.key.to_string())
            .collect(),
        _ => Vec::new(),
    }
}

/// The schema check item by item gives what checking the whole file as one instance gives:
/// the same diagnostics, in the same order once sorted as every report sorts them.
fn assert_split_check_is_whole_check(kind: FileKind, text: &str) -> Result<(), TestCaseError> {
    let Some(file) = source(kind, text) else {
        return Ok(());
    };
    let skip = misplaced(&file);
    let mut split = config::schema::validate(&file, &skip);
    let mut whole = config::schema::validate_whole(&file, &skip);
    deepcli::diagnostic::sort(&mut split);
    deepcli::diagnostic::sort(&mut whole);
    prop_assert_eq!(format!("{split:#?}"), format!("{whole:#?}"), "{:?}", kind);
    Ok(())
}

/// Decoding a file's types from its tree gives what decoding them from its JSON gives: the same
/// value, or an error both ways.
fn assert_tree_decode_is_json_decode(text: &str) -> Result<(), TestCaseError> {
    use deepcli::config::model::{
        AccountSpec, AgentSpec, AgentsFile, BindingSpec, BindingsFile, ChannelsFile,
    };
    use deepcli::config::yaml::de::from_node;
    let Ok(Some(root)) = yaml::parse(text) else {
        return Ok(());
    };
    let json = root.to_json();
    fn same<T: serde::de::DeserializeOwned + for<'a> serde::Deserialize<'a> + std::fmt::Debug>(
        root: &yaml::Node,
        json: &serde_json::Value,
    ) -> Result<(), TestCaseError> {
        let from_tree = from_node::<T>(root).map_err(|_| ());
        let from_json = serde_json::from_value::<T>(json.clone()).map_err(|_| ());
        prop_assert_eq!(
            format!("{from_tree:?}"),
            format!("{from_json:?}"),
            "{}",
            std::any::type_name::<T>()
        );
        Ok(())
    }
    same::<AgentsFile>(&root, &json)?;
    same::<ChannelsFile>(&root, &json)?;
    same::<BindingsFile>(&root, &json)?;
    same::<AgentSpec>(&root, &json)?;
    same::<AccountSpec>(&root, &json)?;
    same::<BindingSpec>(&root, &json)?;
    Ok(())
}

/// Every config file among the test fixtures and the examples.
fn fixture_files() -> Vec<(FileKind, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(FileKind, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let Some(kind) = FileKind::ALL.into_iter().find(|k| k.file_name() == name) else {
                continue;
            };
            if let Ok(text) = std::fs::read_to_string(&path) {
                out.push((kind, text));
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    walk(&root.join("tests/fixtures"), &mut out);
    walk(&root.join("examples"), &mut out);
    out
}

#[test]
fn the_item_by_item_schema_check_is_the_whole_file_check_on_every_fixture() {
    let files = fixture_files();
    assert!(files.len() > 50, "only {} fixture files", files.len());
    for (kind, text) in &files {
        assert_split_check_is_whole_check(*kind, text).unwrap();
        assert_tree_decode_is_json_decode(text).unwrap();
    }
}

#[test]
fn the_large_collections_are_checked_item_by_item() {
    // agents.list, each channel's accounts, bindings: if a schema change makes splitting one
    // inexact, it is checked whole again (correct, slower); this says so.
    for kind in FileKind::ALL {
        assert_eq!(config::schema::split_collections(kind), 1, "{kind:?}");
    }
}

/// Item-level errors of every kind, in lists long enough to be checked and decoded on every
/// core: the big bindings files of the cut-parse test (null items, scalars, nested lists, bad
/// keys and types among valid bindings), and as many agents and accounts.
#[test]
fn a_large_file_with_bad_items_is_checked_and_decoded_as_a_whole() {
    let shapes: Vec<u8> = (0..17).collect();
    let bindings = big_document(&shapes, 2, 1, true, 256 * 1024);
    assert_split_check_is_whole_check(FileKind::Bindings, &bindings).unwrap();
    assert_tree_decode_is_json_decode(&bindings).unwrap();
    let mut agents = String::from("bindings: []\nagents:\n  defaults: {model: m}\n  list:\n");
    let mut channels = String::from("channels:\n  defaults: {dmPolicy: open}\n");
    for i in 0..3000 {
        agents.push_str(&match i % 7 {
            0 => format!("    - id: a{i}\n      runtime: {{kind: acp, command: [x]}}\n"),
            1 => format!("    - id: A{i}\n      model: 42\n"),
            2 => format!("    - id: a{i}\n      bogus: true\n"),
            3 => "    -\n".to_string(),
            4 => format!("    - id: a{i}\n      identity: {{name: n, emoji: \"🙂\"}}\n"),
            5 => format!("    - {{id: a{i}, tools: {{allow: [x], deny: 1}}}}\n"),
            _ => match (i / 7) % 4 {
                0 => format!("    - id: a{i}\n      model: {{primary: p, fallbacks: [f]}}\n"),
                // What issues 20 and 23 added: budgets, permissions, a remote A2A runtime.
                1 => format!(
                    "    - id: a{i}\n      runtime: {{kind: a2a, url: \"https://r.example/a2a\", token: {{source: env, id: T}}}}\n      budgets: {{turnsPerHour: 10, costPerDayUsd: 2.5}}\n"
                ),
                2 => format!(
                    "    - id: a{i}\n      permissions: {{mode: approve-reads, timeoutSeconds: 60.0, approvers: [\"telegram:1\"]}}\n      budgets: {{turnsPerHour: 0, bogus: 1}}\n"
                ),
                _ => format!(
                    "    - id: a{i}\n      permissions: {{mode: maybe}}\n      runtime: {{kind: a2a, url: 7}}\n"
                ),
            },
        });
        if i % 100 == 0 {
            channels.push_str(&format!("  ch{i}:\n    dmPolicy: pairing\n    accounts:\n"));
        }
        channels.push_str(&match i % 5 {
            0 => format!("      acc{i}: {{botToken: \"${{T{i}}}\"}}\n"),
            1 => format!("      acc{i}: {{dmPolicy: nope}}\n"),
            2 => format!("      acc{i}: 5\n"),
            3 => format!("      acc{i}: {{webhookSecret: {{source: env}}, historyLimit: 4.0}}\n"),
            _ => format!("      acc{i}: {{allowFrom: [\"*\"], dmPolicy: open, extra: 1}}\n"),
        });
    }
    // channels.yaml's `a2a:` block (issue 23), beside the split accounts: one good peer, one bad.
    channels.push_str("a2a:\n  expose: [a0, a7]\n  peers:\n    p1: {token: {source: env, id: P1}, allowAgents: [a0], requestsPerMinute: 60.0}\n    p2: {token: 5, extra: 1}\n");
    assert_split_check_is_whole_check(FileKind::Agents, &agents).unwrap();
    assert_tree_decode_is_json_decode(&agents).unwrap();
    assert_split_check_is_whole_check(FileKind::Channels, &channels).unwrap();
    assert_tree_decode_is_json_decode(&channels).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// The seeds with an edit anywhere: whatever it breaks, the split check and the tree decode
    /// agree with the whole-file ones.
    #[test]
    fn mutated_configs_check_and_decode_as_a_whole(
        which in 0usize..3,
        at in 0usize..400,
        insert in "[-:{}\\[\\],&*!|>'\" \n\ta-z0-9]{0,4}|agents|list|id|bindings|accounts|channels|defaults|42|4.0|~",
        cut in 0usize..4,
    ) {
        let seed = SEEDS[which];
        let at = seed.floor_char_boundary(at.min(seed.len()));
        let end = seed.floor_char_boundary((at + cut).min(seed.len()));
        let mutated = format!("{}{}{}", &seed[..at], insert, &seed[end..]);
        for kind in FileKind::ALL {
            assert_split_check_is_whole_check(kind, &mutated)?;
        }
        assert_tree_decode_is_json_decode(&mutated)?;
    }
}

/// `deepcli validate` never holds a large bindings.yaml's whole tree (`validate_dir_lean`):
/// each binding is checked and decoded as it is parsed, and what the rules find, they place by
/// parsing again the binding it is in. The report is the one that keeps the tree: every
/// diagnostic, position, hint and redaction, in every format.
#[test]
fn streaming_a_large_bindings_file_changes_no_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("agents.yaml"),
        "agents:\n  list:\n    - id: main\n      default: true\n    - id: ops\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("channels.yaml"),
        "channels:\n  telegram:\n    accounts:\n      default: {}\n      bot2: {}\n",
    )
    .unwrap();
    let mut bindings = String::from("bindings:\n");
    let mut i = 0;
    while bindings.len() < 4200 * 1024 {
        bindings.push_str(&match i % 5000 {
            // unknown-agent, with a did-you-mean
            17 => format!("  - agentId: opz\n    match: {{channel: telegram, peer: {{kind: direct, id: \"u{i}\"}}}}\n"),
            // binding-conflict with the binding before it
            18 => format!("  - agentId: main\n    match: {{channel: telegram, peer: {{kind: direct, id: \"u{}\"}}}}\n", i - 2),
            // a secret in a comment: found, and masked wherever it is quoted
            19 => "  - agentId: ops\n    comment: ghp_EXAMPLE0example0EXAMPLE0example0EXAM\n    match: {channel: telegram, accountId: bot2}\n".to_string(),
            // unknown-account and a non-canonical id, in a block mapping
            20 => format!("  - agentId: Ops\n    match:\n      channel: telegram\n      accountId: bot3\n      peer:\n        kind: dm\n        id: \"v{i}\"\n"),
            // not-enforced: `acp` settings on a route binding
            21 => format!("  - agentId: ops\n    acp: {{mode: persistent}}\n    match: {{channel: telegram, peer: {{kind: group, id: \"g{i}\"}}}}\n"),
            // schema: an unknown key and a number where a string goes, in one binding (left
            // out of the config); a secret as a key
            22 => format!("  - agentId: 7\n    match: {{channel: telegram, extra: 1}}\n    comment: {{xoxb-1234567890-abcdefghij: {i}}}\n"),
            // an empty item
            23 => "  -\n".to_string(),
            _ => format!("  - agentId: ops\n    match: {{channel: telegram, peer: {{kind: direct, id: \"u{i}\"}}}}\n"),
        });
        i += 1;
    }
    std::fs::write(dir.path().join("bindings.yaml"), &bindings).unwrap();
    let options = LoadOptions {
        state_dir: dir.path().join("state"),
        home: None,
    };
    let parsed_whole_again = |r: &validate::Report| {
        r.config
            .sources
            .get(FileKind::Bindings)
            .unwrap()
            .parsed_whole_again()
    };
    let same = |rules: &[&str]| {
        let whole = validate_dir(dir.path(), &options).unwrap();
        let lean = validate::validate_dir_lean(dir.path(), &options).unwrap();
        assert_same_reports(&lean, &whole, rules);
        parsed_whole_again(&lean)
    };
    let rules = [
        "binding-conflict",
        "inline-secret",
        "legacy-peer-kind",
        "non-canonical-id",
        "not-enforced",
        "schema",
        "unknown-account",
        "unknown-agent",
        "unreachable-binding",
    ];
    // Each finding was placed by parsing the one binding it is in.
    assert!(!same(&rules), "the whole file was parsed again");
    // In the last binding too: it ends where the list does.
    bindings.push_str("  - agentId: ghost\n    match: {channel: telegram, accountId: bot2}\n");
    std::fs::write(dir.path().join("bindings.yaml"), &bindings).unwrap();
    assert!(!same(&rules), "the whole file was parsed again");
    // A key after the list, unknown and holding a secret: nothing of the file is decoded, the
    // secret is found outside the bindings, and its place is looked up in the whole file.
    bindings.push_str("extra: ghp_EXAMPLE1example1EXAMPLE1example1EXAM\n");
    std::fs::write(dir.path().join("bindings.yaml"), &bindings).unwrap();
    assert!(same(&["inline-secret", "schema"]));
}

/// `lean` (bindings.yaml's tree let go) says what `whole` says, in every format.
fn assert_same_reports(lean: &validate::Report, whole: &validate::Report, rules: &[&str]) {
    let bindings_file = |r: &validate::Report| {
        r.config
            .sources
            .get(FileKind::Bindings)
            .map(|f| f.root.is_some())
    };
    assert_eq!(bindings_file(whole), Some(true));
    assert_eq!(bindings_file(lean), Some(false), "the tree was not let go");
    let in_bindings = |r: &validate::Report| {
        r.diagnostics
            .iter()
            .filter(|d| {
                d.location
                    .as_ref()
                    .is_some_and(|l| l.file.ends_with("bindings.yaml"))
            })
            .map(|d| d.rule.id)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(in_bindings(whole).into_iter().collect::<Vec<_>>(), rules);
    assert_eq!(
        format!("{:#?}", lean.diagnostics),
        format!("{:#?}", whole.diagnostics)
    );
    use deepcli::report;
    for render in [report::human, report::json, report::github, report::sarif] {
        assert_eq!(render(lean), render(whole));
    }
    assert!(!report::human(lean).contains("ghp_EXAMPLE0"));
}
