//! Semantic rules: what JSON Schema cannot say (config.md, "Validation rules").
//!
//! Each rule family lives in its own file and appends diagnostics; none does I/O. Cross-item
//! rules hash their keys (never compare all pairs), so validation stays linear in the number of
//! bindings. Rules that resolve references into a collection skip that check when the
//! collection lost items to schema errors, so one typo never cascades into false reports.

mod a2a;
mod agents;
mod bindings;
mod channels;
mod control;
pub mod not_enforced;
mod policy;
mod sandbox;
mod secrets;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::config::{self, Config, FileKind, LoadError, LoadOptions};
use crate::diagnostic::{self, Diagnostic, Location};

/// A validated config and everything found wrong with it, sorted by position.
#[derive(Debug)]
pub struct Report {
    pub config: Config,
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// Whether the directory held none of the three files (`nothing-declared`).
    pub fn declares_nothing(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.rule.id == crate::diagnostic::rules::NOTHING_DECLARED.id)
    }

    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }

    pub fn is_valid(&self) -> bool {
        self.errors() == 0
    }

    /// Makes every warning an error (`--strict`).
    pub fn make_strict(&mut self) {
        diagnostic::make_strict(&mut self.diagnostics);
    }
}

/// Loads `dir` and runs every rule.
pub fn validate_dir(dir: &Path, options: &LoadOptions) -> Result<Report, LoadError> {
    let loaded = config::load(dir, options)?;
    Ok(finish(loaded))
}

/// [`validate_dir`] for a run that only reports (`deepcli validate`). A large bindings.yaml
/// never has its whole span tree, the largest thing loading makes ([`config::load_lean`]): the
/// rules place what they find in it by parsing again the binding it is in
/// ([`config::SourceFile::subtree`]), and the secret search looks again at the bindings that
/// hold a credential-shaped string. The report keeps that file's text, not its tree.
pub fn validate_dir_lean(dir: &Path, options: &LoadOptions) -> Result<Report, LoadError> {
    let loaded = config::load_lean(dir, options, &secrets::worth_a_look)?;
    Ok(finish(loaded))
}

/// Runs every rule on an already loaded config.
pub fn finish(loaded: config::Loaded) -> Report {
    finish_with(loaded, |_| ()).0
}

/// [`finish`], running `alongside` on the config while the rules run (on another thread),
/// if it loaded without errors. What it made is the caller's to drop when the report has
/// errors.
pub fn finish_with<T: Send>(
    loaded: config::Loaded,
    alongside: impl FnOnce(&Config) -> T + Send,
) -> (Report, Option<T>) {
    let config::Loaded {
        config,
        mut diagnostics,
    } = loaded;
    let clean = !diagnostics.iter().any(Diagnostic::is_error);
    let (rules, made) =
        crate::threads::join(|| check(&config), || clean.then(|| alongside(&config)));
    diagnostics.extend(rules);
    diagnostic::sort(&mut diagnostics);
    secrets::scrub(&mut diagnostics, &config.sources);
    (
        Report {
            config,
            diagnostics,
        },
        made,
    )
}

/// The semantic rules over a loaded config. bindings.yaml's rules, the bulk of a large config,
/// run beside all the others.
pub fn check(config: &Config) -> Vec<Diagnostic> {
    let cx = Context::new(config);
    let ((mut out, later), from_bindings) = crate::threads::join(
        || {
            let mut fields = Vec::new();
            agents::check(&cx, &mut fields);
            channels::check(&cx, &mut fields);
            a2a::check(&cx, &mut fields);
            policy::check(&cx, &mut fields);
            let mut later = Vec::new();
            control::check(&cx, &mut later);
            not_enforced::check(&cx, &mut later);
            sandbox::check(&cx, &mut later);
            // Last: it skips what the field rules above already reported.
            secrets::check(&cx, &fields, &mut later);
            (fields, later)
        },
        || {
            let mut out = Vec::new();
            bindings::check(&cx, &mut out);
            out
        },
    );
    out.extend(from_bindings);
    out.extend(later);
    out
}

struct Context<'a> {
    config: &'a Config,
    /// Agent ids, for reference checks in O(1).
    agent_ids: HashSet<&'a str>,
    /// Each channel's normalized account ids.
    accounts: HashMap<&'a str, HashSet<String>>,
}

impl<'a> Context<'a> {
    fn new(config: &'a Config) -> Context<'a> {
        Context {
            config,
            agent_ids: config.agents.iter().map(|a| a.id()).collect(),
            accounts: config
                .channels
                .iter()
                .map(|c| (c.id.as_str(), c.accounts().map(|a| a.normalized).collect()))
                .collect(),
        }
    }

    /// Whether `channel` declares the (normalized) account `account`.
    fn has_account(&self, channel: &str, account: &str) -> bool {
        self.accounts
            .get(channel)
            .is_some_and(|a| a.contains(account))
    }

    /// The location of the node at `pointer` in `kind`'s file.
    fn at(&self, kind: FileKind, pointer: &str) -> Location {
        self.config
            .sources
            .locate(kind, pointer)
            .unwrap_or_else(|| self.missing_file(kind, pointer))
    }

    /// The location of the key of the entry at `pointer`.
    fn at_key(&self, kind: FileKind, pointer: &str) -> Location {
        self.config
            .sources
            .locate_key(kind, pointer)
            .unwrap_or_else(|| self.missing_file(kind, pointer))
    }

    fn missing_file(&self, kind: FileKind, pointer: &str) -> Location {
        Location {
            file: self.config.dir.join(kind.file_name()),
            pointer: pointer.to_string(),
            span: Default::default(),
        }
    }

    /// Whether the file of `kind` has a node at `pointer` (as opposed to an inherited value).
    fn exists(&self, kind: FileKind, pointer: &str) -> bool {
        self.config
            .sources
            .get(kind)
            .and_then(|f| f.tree())
            .and_then(|r| r.pointer(pointer))
            .is_some()
    }

    /// The keys of the mapping at `pointer` in `kind`'s file, in file order (`None`: no
    /// mapping there).
    fn keys(&self, kind: FileKind, pointer: &str) -> Option<Vec<String>> {
        let node = self.config.sources.get(kind)?.tree()?.pointer(pointer)?;
        match &node.value {
            crate::config::yaml::Value::Map(entries) => {
                Some(entries.iter().map(|e| e.key.to_string()).collect())
            }
            _ => None,
        }
    }

    fn has_agent(&self, id: &str) -> bool {
        self.agent_ids.contains(id)
    }
}
