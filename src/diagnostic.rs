//! Diagnostics: what every check in deepcli reports, and the catalogue of rule ids.
//!
//! A diagnostic is born with its location (file, JSON pointer, span), so renderers never have to
//! look anything up again. Rule ids are stable: CI configs, SARIF baselines and people's muscle
//! memory depend on them. Add rules; never rename one.

use std::path::PathBuf;

use crate::span::Span;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A check deepcli performs, with its stable id and default severity.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub id: &'static str,
    pub severity: Severity,
    /// One line for SARIF rule metadata and `--help`-style listings.
    pub summary: &'static str,
}

macro_rules! rules {
    ($($name:ident = $id:literal, $severity:ident, $summary:literal;)*) => {
        $(pub const $name: &Rule = &Rule { id: $id, severity: Severity::$severity, summary: $summary };)*
        /// Every rule deepcli knows, in catalogue order.
        pub const ALL: &[&Rule] = &[$($name),*];
    };
}

/// The rule catalogue. `docs/config.md` lists the same ids with examples.
pub mod rules {
    use super::{Rule, Severity};

    rules! {
        UNREADABLE_FILE = "unreadable-file", Error, "A config file could not be read.";
        FILE_TOO_LARGE = "file-too-large", Error, "A config file is larger than the 16 MiB limit.";
        NON_UTF8 = "non-utf8", Error, "A config file is not valid UTF-8 text.";
        YAML_SYNTAX = "yaml-syntax", Error, "A config file is not valid YAML.";
        YAML_TAB = "yaml-tab", Error, "A tab is used where YAML needs spaces.";
        DUPLICATE_KEY = "duplicate-key", Error, "A mapping has the same key twice.";
        ALIAS_LIMIT = "alias-limit", Error, "YAML aliases expand past the safety bound.";
        YAML_TOO_DEEP = "yaml-too-deep", Error, "YAML nesting is deeper than the safety bound.";
        WRONG_FILE = "wrong-file", Error, "A top-level key sits in the wrong config file.";
        SCHEMA = "schema", Error, "The file does not match its JSON Schema.";
        DUPLICATE_AGENT_ID = "duplicate-agent-id", Error, "Two agents have the same id.";
        RESERVED_AGENT_ID = "reserved-agent-id", Error, "An agent is called `primary`, the alias of `main`.";
        DUPLICATE_AGENT_DIR = "duplicate-agent-dir", Error, "Two agents resolve to the same agentDir.";
        DUPLICATE_SESSION_STORE = "duplicate-session-store", Error, "Two agents resolve to the same session store.";
        UNKNOWN_AGENT = "unknown-agent", Error, "A binding or allow list names an agent that does not exist.";
        UNKNOWN_CHANNEL = "unknown-channel", Error, "A binding names a channel that channels.yaml does not declare.";
        UNKNOWN_ACCOUNT = "unknown-account", Error, "A binding or defaultAccount names an account the channel does not have.";
        BINDING_CONFLICT = "binding-conflict", Error, "Two route bindings with the same match key name different agents.";
        ACP_BINDING_CONFLICT = "acp-binding-conflict", Error, "Two ACP bindings bind one conversation to different agents.";
        ACP_BINDING_PEER = "acp-binding-peer", Error, "An ACP binding has no concrete peer id.";
        DUPLICATE_ACCOUNT = "duplicate-account", Error, "Two account ids of one channel normalize to the same id.";
        MISSING_DEFAULT_ACCOUNT = "missing-default-account", Error, "A channel with several accounts declares no default account.";
        DM_ALLOWLIST_EMPTY = "dm-allowlist-empty", Error, "`dmPolicy: allowlist` without `allowFrom` lets nobody in.";
        DM_OPEN_WITHOUT_WILDCARD = "dm-open-without-wildcard", Error, "`dmPolicy: open` needs `allowFrom: [\"*\"]` to say so explicitly.";
        INVALID_MENTION_PATTERN = "invalid-mention-pattern", Error, "A mention pattern is not a regex deepcli can run, or is too large.";
        UNKNOWN_ACCESS_GROUP = "unknown-access-group", Error, "An allowlist names an access group that is not declared.";
        INLINE_SECRET = "inline-secret", Error, "A secret is written inline instead of as a reference.";
        EMPTY_SECRET = "empty-secret", Error, "A secret field is empty or only whitespace.";
        RUNTIME_MISSING_COMMAND = "runtime-missing-command", Error, "An acp or process runtime has no command.";
        MULTIPLE_DEFAULTS = "multiple-defaults", Warning, "Several agents are marked `default: true`; the first wins.";
        UNREACHABLE_BINDING = "unreachable-binding", Warning, "An earlier binding in the same tier always wins over this one.";
        UNCOVERED_ACCOUNT = "uncovered-account", Warning, "A non-default account has no binding; its messages go to the default agent.";
        NON_CANONICAL_ID = "non-canonical-id", Warning, "An id is not in canonical form and is normalized.";
        CONTROL_CHARACTER = "control-character", Warning, "An id has a control character (newline, carriage return, escape).";
        LEGACY_PEER_KIND = "legacy-peer-kind", Warning, "`peer.kind: dm` is the legacy spelling of `direct`.";
        BOT_LOOP_RISK = "bot-loop-risk", Warning, "`requireMention: false` and `allowBots: true` with bot-loop protection off.";
        POSSIBLE_SECRET = "possible-secret", Warning, "A string looks like it may hold a credential.";
        NOTHING_DECLARED = "nothing-declared", Warning, "The config directory has none of the three config files.";
        USAGE_BUDGET_UNENFORCEABLE = "usage-budget-unenforceable", Warning, "A tokensPerDay or costPerDayUsd budget on an agent whose runtime reports no usage.";
        A2A_NOT_EXPOSED = "a2a-not-exposed", Warning, "An A2A peer's `allowAgents`, or a binding on channel `a2a`, names an agent that `a2a.expose` does not list.";
        A2A_BINDING = "a2a-binding", Error, "A binding on channel `a2a` names an account, peer, guild, team or roles that no A2A request has.";
        NOT_ENFORCED = "not-enforced", Warning, "A key deepcli accepts but does not act on (for the agent's runtime kind).";
        SANDBOX_OFF = "sandbox-off", Warning, "An agent with an acp or process runtime runs unsandboxed (`sandbox.mode: off`).";
        SECRET_SHARED_WITH_AGENT = "secret-shared-with-agent", Warning, "A runtime's env or inheritEnv references a channel account's secret.";
        SANDBOX_BIND = "sandbox-bind", Error, "A sandbox bind is relative, or reaches the state directory, another agent's directories or (rw) the config directory.";
        SANDBOX_BACKEND_UNBUILT = "sandbox-backend-unbuilt", Error, "A sandbox backend deepcli does not have yet (docker, podman, kubernetes).";
        SANDBOX_LANDLOCK_UNENFORCEABLE = "sandbox-landlock-unenforceable", Warning, "`backend: landlock` on a sandbox only bubblewrap can enforce (a hidden path inside a readable one, workspaceAccess none, network allowlist).";
        NETWORK_ALLOWLIST_EMPTY = "network-allowlist-empty", Warning, "`network: allowlist` with no `allowedDomains`: the runtime can reach no host.";
    }

    /// The rule with this id.
    pub fn by_id(id: &str) -> Option<&'static Rule> {
        ALL.iter().copied().find(|r| r.id == id)
    }
}

/// Where a diagnostic points.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    /// The file as the user named it (config dir joined with the file name).
    pub file: PathBuf,
    /// JSON pointer of the node inside the file (`""` for the whole file).
    pub pointer: String,
    pub span: Span,
}

/// A second place a diagnostic involves (the other side of a conflict).
#[derive(Debug, Clone, PartialEq)]
pub struct Related {
    pub location: Location,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub rule: &'static Rule,
    pub severity: Severity,
    pub message: String,
    pub hint: Option<String>,
    pub location: Option<Location>,
    pub related: Vec<Related>,
    /// The source text at the location is secret: renderers must not echo it.
    pub redact: bool,
}

impl Diagnostic {
    /// A diagnostic of `rule` at its default severity.
    pub fn new(rule: &'static Rule, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            rule,
            severity: rule.severity,
            message: message.into(),
            hint: None,
            location: None,
            related: Vec::new(),
            redact: false,
        }
    }

    pub fn at(mut self, location: Location) -> Diagnostic {
        self.location = Some(location);
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn related(mut self, location: Location, message: impl Into<String>) -> Diagnostic {
        self.related.push(Related {
            location,
            message: message.into(),
        });
        self
    }

    pub fn redacted(mut self) -> Diagnostic {
        self.redact = true;
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Orders diagnostics for output: by file, then position, then rule id.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        let key = |d: &Diagnostic| d.location.as_ref().map(|l| (l.file.clone(), l.span.start));
        key(a).cmp(&key(b)).then_with(|| a.rule.id.cmp(b.rule.id))
    });
}

/// Makes every warning an error (`--strict`).
pub fn make_strict(diagnostics: &mut [Diagnostic]) {
    for d in diagnostics {
        d.severity = Severity::Error;
    }
}
