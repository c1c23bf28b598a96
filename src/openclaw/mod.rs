//! The door to and from OpenClaw (openclaw.md): `openclaw.json` → the three deepcli files
//! ([`import`]), and a config → an `openclaw.json` fragment ([`export`]).
//!
//! Import is pure: text in, file texts and a report out (the caller writes the files). Its
//! stages: JSON5 ([`json5`]) → mapping ([`import::map`]) → the schema gate (what deepcli's
//! schema refuses is moved from the trees into the report, so the result validates whenever
//! the input's meaning does) → YAML ([`yaml_out`]) → deepcli's own loader and rules → the
//! agreement check ([`agree`]): OpenClaw's routing of the original ([`route`]) against
//! deepcli's routing of the result, and OpenClaw's inbound gate on the original ([`gate`])
//! against deepcli's policy gate on the result. Nothing here prints or writes.

pub mod agree;
pub mod export;
pub mod gate;
pub mod import;
pub mod json5;
pub mod route;
pub mod yaml_out;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{self, FileKind, LoadOptions};
use crate::diagnostic::rules;
use crate::routing::RoutingPlan;
use yaml_out::Node;

/// A key as a segment of a dotted OpenClaw path: bare when it is an identifier, else quoted.
pub fn key_path(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !key.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    if bare {
        key.to_string()
    } else {
        format!("[{}]", serde_json::Value::String(key.to_string()))
    }
}

/// Something in `openclaw.json` that did not carry over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unsupported {
    /// Where it is in `openclaw.json` (`channels.telegram.streaming`).
    pub path: String,
    /// What kind of value it is (never the value: it may be a secret).
    pub shape: String,
    pub why: String,
}

/// Where a secret that must be set came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "ref")]
pub enum SecretKind {
    /// An environment variable `openclaw.json` already referenced (`${VAR}` or an env
    /// SecretRef): kept as it was, and to be set all the same.
    Env,
    /// The value was written inline in `openclaw.json` (not copied).
    Inline,
    /// An OpenClaw `exec` SecretRef: deepcli runs no secret commands.
    Exec(String),
    /// A `file` SecretRef into a JSON secrets file (deepcli reads whole files only).
    FileJson(String),
    /// Any other SecretRef source.
    Other(String),
}

/// An environment variable the imported config references and the operator must set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretVar {
    pub variable: String,
    /// The deepcli field that references it.
    pub target: String,
    /// Where the secret was in `openclaw.json`.
    pub from: String,
    #[serde(flatten)]
    pub kind: SecretKind,
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutFile {
    pub name: String,
    pub text: String,
}

/// Everything an import made and found.
#[derive(Debug)]
pub struct Imported {
    pub files: Vec<OutFile>,
    pub unsupported: Vec<Unsupported>,
    pub secrets: Vec<SecretVar>,
    pub notes: Vec<String>,
    /// The agents imported without a runtime: `deepcli up` starts nothing for them.
    pub no_runtime: Vec<String>,
    pub agreement: agree::Agreement,
    /// The inbound policy's decisions, OpenClaw's against deepcli's.
    pub policy: agree::PolicyAgreement,
    /// deepcli's validation of the files (as if written in the output directory).
    pub report: crate::validate::Report,
}

impl Imported {
    pub fn is_valid(&self) -> bool {
        self.report.is_valid()
    }
}

/// Why an import could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Json5(#[from] json5::Json5Error),
    #[error("the imported files cannot be routed: {0}")]
    Index(#[from] crate::routing::IndexError),
}

fn header(kind: FileKind, source: &str) -> Vec<String> {
    let what = match kind {
        FileKind::Agents => "agents, agents.defaults, tools and session",
        FileKind::Channels => "channels and their accounts (credentials as references only)",
        FileKind::Bindings => "bindings, in OpenClaw's order (within a tier the first match wins)",
    };
    vec![
        // `init`'s modeline: the schema beside the file (`manage::openclaw` writes it there).
        crate::scaffold::modeline(kind),
        String::new(),
        format!("Imported from {source} by `deepcli import openclaw`: {what}."),
        "Each `# from …` comment names the part of openclaw.json an entry came from.".into(),
    ]
}

/// Imports `openclaw.json` bytes. `dir` is where the files are meant to go (findings point
/// there); `source` names the input in the files' headers.
pub fn import_bytes(
    bytes: &[u8],
    source: &str,
    dir: &Path,
    options: &LoadOptions,
) -> Result<Imported, ImportError> {
    let root = json5::parse_bytes(bytes)?;
    let router = route::Router::new(&root);
    let import::Mapped {
        agents,
        channels,
        bindings,
        mut unsupported,
        secrets,
        notes,
        no_runtime,
    } = import::map(&root, &router);
    let mut trees = [
        (FileKind::Agents, agents),
        (FileKind::Channels, channels),
        (FileKind::Bindings, bindings),
    ];
    // The gate: at most a few passes (a removed required key makes its parent the next
    // pass's finding).
    let mut loaded = None;
    for _ in 0..8 {
        let texts = render(&trees, source, dir);
        let l = config::load_texts(dir, texts, options);
        let refused: Vec<(FileKind, String, String)> = l
            .diagnostics
            .iter()
            .filter(|d| d.rule.id == rules::SCHEMA.id)
            .filter_map(|d| {
                let loc = d.location.as_ref()?;
                let kind = FileKind::ALL
                    .into_iter()
                    .find(|k| loc.file.file_name().is_some_and(|n| n == k.file_name()))?;
                Some((kind, loc.pointer.clone(), d.message.clone()))
            })
            .collect();
        if refused.is_empty() {
            loaded = Some(l);
            break;
        }
        let mut removed_any = false;
        // Deepest and last first, so earlier pointers stay valid.
        let mut refused = refused;
        refused.sort_by(|a, b| b.1.cmp(&a.1));
        refused.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        for (kind, pointer, message) in refused {
            let Some((_, tree)) = trees.iter_mut().find(|(k, _)| *k == kind) else {
                continue;
            };
            if let Some((origin, shape)) = remove(tree, &pointer) {
                removed_any = true;
                unsupported.push(Unsupported {
                    path: origin,
                    shape,
                    why: format!("deepcli's schema does not take it ({message})"),
                });
            }
        }
        if !removed_any {
            loaded = Some(l);
            break;
        }
    }
    let loaded = match loaded {
        Some(l) => l,
        None => config::load_texts(dir, render(&trees, source, dir), options),
    };
    let files = trees
        .iter()
        .map(|(kind, tree)| OutFile {
            name: kind.file_name().to_string(),
            text: yaml_out::render(&header(*kind, source), tree),
        })
        .collect();
    let report = crate::validate::finish(loaded);
    let plan = RoutingPlan::compile(&report.config)?;
    let probes = agree::probes(&root);
    let agreement = agree::check(&root, &router, &plan, &probes);
    let (policy_probes, not_compared) = agree::policy_probes(&root, &report.config);
    let policy = agree::check_policy(&report.config, &plan, &policy_probes, not_compared);
    unsupported.sort_by(|a, b| a.path.cmp(&b.path));
    // A setting pushed down into several accounts is refused once per account: say it once.
    let mut merged: Vec<Unsupported> = Vec::with_capacity(unsupported.len());
    let mut repeats = 0usize;
    for u in unsupported {
        match merged.last_mut() {
            Some(last) if last.path == u.path => repeats += 1,
            _ => {
                if repeats > 0
                    && let Some(last) = merged.last_mut()
                {
                    last.why.push_str(&format!(" (and {repeats} more)"));
                }
                repeats = 0;
                merged.push(u);
            }
        }
    }
    if repeats > 0
        && let Some(last) = merged.last_mut()
    {
        last.why.push_str(&format!(" (and {repeats} more)"));
    }
    let unsupported = merged;
    Ok(Imported {
        files,
        unsupported,
        secrets,
        notes,
        no_runtime,
        agreement,
        policy,
        report,
    })
}

fn render(
    trees: &[(FileKind, Node)],
    source: &str,
    dir: &Path,
) -> Vec<(FileKind, PathBuf, String)> {
    trees
        .iter()
        .map(|(kind, tree)| {
            (
                *kind,
                dir.join(kind.file_name()),
                yaml_out::render(&header(*kind, source), tree),
            )
        })
        .collect()
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Removes the node at a JSON pointer; answers where it came from in `openclaw.json` (the
/// nearest `from …` comment on the way down, plus the keys below it) and its shape.
fn remove(tree: &mut Node, pointer: &str) -> Option<(String, String)> {
    let tokens: Vec<String> = pointer.split('/').skip(1).map(unescape).collect();
    let (last, parents) = tokens.split_last()?;
    let mut node = tree;
    let mut origin: Option<(String, usize)> = None;
    let visit = |comment: &[String], depth: usize, origin: &mut Option<(String, usize)>| {
        for c in comment {
            if let Some(from) = c
                .strip_prefix("from ")
                .or_else(|| c.strip_prefix("inherited from "))
            {
                *origin = Some((from.to_string(), depth));
            }
        }
    };
    for (depth, t) in parents.iter().enumerate() {
        node = match node {
            Node::Map(entries) => {
                let e = entries
                    .iter_mut()
                    .find(|e| e.key == *t && e.value.is_some())?;
                visit(&e.comment, depth + 1, &mut origin);
                e.value.as_mut()?
            }
            Node::Seq(items) => {
                let item = items.get_mut(t.parse::<usize>().ok()?)?;
                visit(&item.comment, depth + 1, &mut origin);
                &mut item.value
            }
            _ => return None,
        };
    }
    let (removed_comment, removed) = match node {
        Node::Map(entries) => {
            let i = entries
                .iter()
                .position(|e| e.key == *last && e.value.is_some())?;
            let e = entries.remove(i);
            (e.comment, e.value?)
        }
        Node::Seq(items) => {
            let i = last.parse::<usize>().ok()?;
            if i >= items.len() {
                return None;
            }
            let item = items.remove(i);
            (item.comment, item.value)
        }
        _ => return None,
    };
    visit(&removed_comment, tokens.len(), &mut origin);
    let path = match origin {
        Some((base, depth)) => {
            let mut p = base;
            for t in &tokens[depth..] {
                if t.parse::<usize>().is_ok() {
                    p.push_str(&format!("[{t}]"));
                } else {
                    p = import::child(&p, t);
                }
            }
            p
        }
        None => tokens.join("."),
    };
    Some((path, node_shape(&removed)))
}

fn node_shape(node: &Node) -> String {
    match node {
        Node::Str(_) => "string".into(),
        Node::Bool(_) => "boolean".into(),
        Node::Int(_) => "number".into(),
        Node::Seq(items) => format!(
            "array of {}",
            crate::plural::plural(items.len(), "item", "items")
        ),
        Node::Map(entries) => {
            let keys: Vec<&str> = entries
                .iter()
                .filter(|e| e.value.is_some())
                .take(4)
                .map(|e| e.key.as_str())
                .collect();
            format!("object {{{}}}", keys.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LoadOptions {
        LoadOptions {
            state_dir: PathBuf::from("/srv/deepcli-state"),
            home: Some(PathBuf::from("/home/operator")),
        }
    }

    /// The review's `amp.json`, smaller: long allowlists at the channel level and in
    /// `channels.defaults`, and many accounts that inherit them.
    fn amplifying(ids: usize, accounts: usize) -> String {
        let list: Vec<String> = (0..ids).map(|i| format!("\"{}\"", 100_000 + i)).collect();
        let list = list.join(",");
        let accounts: Vec<String> = (0..accounts)
            .map(|i| format!("\"acc{i}\": {{\"name\": \"account {i}\"}}"))
            .collect();
        format!(
            "{{\"agents\": {{\"list\": [{{\"id\": \"main\"}}]}}, \"channels\": {{\
             \"defaults\": {{\"groupAllowFrom\": [{list}]}}, \
             \"telegram\": {{\"dmPolicy\": \"allowlist\", \"allowFrom\": [{list}], \
             \"accounts\": {{\"default\": {{}}, {}}}}}}}}}",
            accounts.join(", ")
        )
    }

    #[test]
    fn inherited_allowlists_are_written_once_not_copied_into_every_account() {
        let input = amplifying(2_000, 200);
        let imported =
            import_bytes(input.as_bytes(), "amp.json", Path::new("/hub"), &options()).unwrap();
        let channels = imported
            .files
            .iter()
            .find(|f| f.name == "channels.yaml")
            .unwrap();
        // Each list once (and each id once per list): the output is about the input's size.
        assert!(
            channels.text.len() < 2 * input.len(),
            "channels.yaml is {} bytes for a {} byte input",
            channels.text.len(),
            input.len()
        );
        assert_eq!(channels.text.matches("\"101999\"").count(), 2);
        assert!(imported.is_valid(), "{:?}", imported.report.diagnostics);
        // What the accounts inherit is what deepcli's loader resolves for them.
        let config = &imported.report.config;
        let telegram = config.channels.iter().find(|c| c.id == "telegram").unwrap();
        assert_eq!(telegram.spec.accounts.len(), 201);
        assert_eq!(
            telegram.spec.policy.allow_from.as_ref().map(Vec::len),
            Some(2_000)
        );
        assert_eq!(
            config
                .channel_defaults
                .group_allow_from
                .as_ref()
                .map(Vec::len),
            Some(2_000)
        );
    }

    #[test]
    fn an_imported_file_over_the_size_limit_is_an_error_not_zero_errors() {
        let dir = Path::new("/hub");
        let huge = format!(
            "channels:\n  telegram:\n    accounts:\n      default: {{}}\n# {}\n",
            "x".repeat(crate::config::MAX_FILE_BYTES as usize)
        );
        let loaded = config::load_texts(
            dir,
            vec![(FileKind::Channels, dir.join("channels.yaml"), huge)],
            &options(),
        );
        let report = crate::validate::finish(loaded);
        assert!(!report.is_valid());
        assert!(
            report
                .diagnostics
                .iter()
                .any(|d| d.rule.id == rules::FILE_TOO_LARGE.id),
            "{:?}",
            report.diagnostics
        );
    }
}
