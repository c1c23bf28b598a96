//! One casing for every JSON document deepcli prints or publishes: camelCase keys, as the
//! Access API and OpenClaw use, so that the version key is `formatVersion` everywhere.
//! (Keys that are data, such as the variable names of a runtime's `env`, are not deepcli's.)

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// Maps whose keys are the operator's words, not deepcli's.
const DATA_MAPS: &[&str] = &["env"];

/// Every key in `doc` (at `at`) that is not camelCase: no `_`, no `-`, no leading capital.
fn not_camel_case(doc: &Value, at: &str, out: &mut Vec<String>) {
    match doc {
        Value::Object(map) => {
            for (key, value) in map {
                let path = format!("{at}/{key}");
                let camel =
                    !key.contains(['_', '-']) && !key.starts_with(|c: char| c.is_ascii_uppercase());
                if !camel {
                    out.push(path.clone());
                }
                if !DATA_MAPS.contains(&key.as_str()) {
                    not_camel_case(value, &path, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                not_camel_case(item, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

struct Hub {
    tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
}

impl Hub {
    fn new() -> Hub {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("config");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&config).unwrap();
        let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart");
        for name in ["agents.yaml", "channels.yaml", "bindings.yaml"] {
            std::fs::copy(quickstart.join(name), config.join(name)).unwrap();
        }
        Hub { tmp, config, state }
    }

    /// `deepcli ARGS` with `stdin`; its exit code and stdout.
    fn run(&self, args: &[&str], stdin: &str) -> (i32, String) {
        let out = Command::cargo_bin("deepcli")
            .unwrap()
            .current_dir(self.tmp.path())
            .env("HOME", self.tmp.path())
            .env("DEEPCLI_CONFIG", &self.config)
            .env("DEEPCLI_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .env_remove("DEEPCLI_OPERATOR_TOKEN")
            .args(args)
            .write_stdin(stdin)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// The JSON documents `deepcli ARGS` prints: one, or one per line.
    fn json(&self, args: &[&str], stdin: &str) -> Vec<Value> {
        let (code, out) = self.run(args, stdin);
        assert!(code == 0 || code == 1, "{args:?} exited {code}:\n{out}");
        match serde_json::from_str(&out) {
            Ok(doc) => vec![doc],
            Err(_) => out
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
                .collect(),
        }
    }
}

#[test]
fn every_json_document_deepcli_writes_is_camel_case() {
    let hub = Hub::new();
    let mut documents: Vec<(String, Value)> = Vec::new();
    let mut add = |what: &str, docs: Vec<Value>| {
        assert!(!docs.is_empty(), "{what} printed nothing");
        documents.extend(docs.into_iter().map(|d| (what.to_string(), d)));
    };
    let broken = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/broken");
    add(
        "validate --format json",
        hub.json(
            &[
                "validate",
                "--config",
                broken.to_str().unwrap(),
                "--format",
                "json",
            ],
            "",
        ),
    );
    add("plan --json", hub.json(&["plan", "--json"], ""));
    let (code, _) = hub.run(&["plan", "--out", "saved.json"], "");
    assert_eq!(code, 0);
    let saved = hub.tmp.path().join("saved.json");
    add(
        "plan --out",
        vec![serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap()],
    );
    let (code, out) = hub.run(&["apply", saved.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}");
    add(
        "routing-plan.json",
        vec![
            serde_json::from_str(
                &std::fs::read_to_string(hub.state.join("routing-plan.json")).unwrap(),
            )
            .unwrap(),
        ],
    );
    // An agent deleted, so that the trash has an entry.
    let agents = std::fs::read_to_string(hub.config.join("agents.yaml")).unwrap();
    let cut = agents.find("    - id: research").unwrap();
    std::fs::write(hub.config.join("agents.yaml"), &agents[..cut]).unwrap();
    std::fs::write(
        hub.config.join("bindings.yaml"),
        "bindings:\n  - agentId: main\n    match: {channel: telegram}\n",
    )
    .unwrap();
    let (code, out) = hub.run(&["apply", "--auto-approve", "--allow-mass-delete"], "");
    assert_eq!(code, 0, "{out}");
    add("state export", hub.json(&["state", "export"], ""));
    add("history --json", hub.json(&["history", "--json"], ""));
    add(
        "trash list --json",
        hub.json(&["trash", "list", "--json"], ""),
    );
    add("status --json", hub.json(&["status", "--json"], ""));
    add(
        "route --json --explain",
        hub.json(
            &[
                "route",
                "--channel",
                "telegram",
                "--peer",
                "direct:1",
                "--json",
                "--explain",
            ],
            "",
        ),
    );
    add(
        "route --batch",
        hub.json(
            &["route", "--batch"],
            "{\"channel\": \"telegram\", \"peer\": {\"kind\": \"group\", \"id\": \"1\"}}\nnot json\n",
        ),
    );
    for args in [
        &["agents", "list", "--bindings", "--json"][..],
        &["agents", "bindings", "--json"],
        &[
            "agents",
            "add",
            "ops",
            "--bind",
            "cli",
            "--dry-run",
            "--json",
        ],
        &["channels", "list", "--json"],
        &["channels", "status", "--json"],
        &["channels", "capabilities", "--json"],
    ] {
        add(&args.join(" "), hub.json(args, ""));
    }
    // The quickstart's one Telegram account is a bridge's: doctor reaches no platform.
    let listen = crate::common::free_addr().to_string();
    add(
        "doctor --json",
        hub.json(&["doctor", "--json", "--listen", &listen], ""),
    );

    let mut wrong = Vec::new();
    for (what, doc) in &documents {
        let mut keys = Vec::new();
        not_camel_case(doc, "", &mut keys);
        if !keys.is_empty() {
            wrong.push(format!("{what}: {}", keys.join(", ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "keys not in camelCase:\n{}",
        wrong.join("\n")
    );
    for (what, doc) in &documents {
        if let Some(version) = doc.get("formatVersion") {
            assert!(version.is_string(), "{what}: formatVersion {version}");
        }
    }
    let trash = &documents
        .iter()
        .find(|(what, _)| what == "trash list --json")
        .unwrap()
        .1;
    assert_eq!(trash["formatVersion"], "2");
    assert_eq!(trash["entries"][0]["manifest"]["agentId"], "research");
}
