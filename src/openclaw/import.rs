//! `openclaw.json` → the three deepcli files, as YAML trees with comments saying where each
//! part came from, plus everything that did not carry over (with its OpenClaw path and why)
//! and the secret variables to set.
//!
//! The mapping is written for readability of its result, not for coverage of OpenClaw's whole
//! schema: every key it does not map is reported, never dropped silently. Keys deepcli shares
//! with OpenClaw are copied and then held to deepcli's schema by the gate in `super`, which
//! moves whatever the schema refuses into the report.

use std::collections::{BTreeSet, HashSet};

use super::json5::Value;
use super::route::{self, Router};
use super::yaml_out::{Entry, Item, Node};
use super::{SecretKind, SecretVar, Unsupported, key_path};
use crate::config::model::SECRET_FIELDS;
use crate::ids;

/// The access-policy keys (policy.md) an account, a channel or `channels.defaults` may set;
/// written once, at the level where openclaw.json sets them (deepcli inherits them the same way).
pub const POLICY_KEYS: &[&str] = &[
    "dmPolicy",
    "allowFrom",
    "groupPolicy",
    "groupAllowFrom",
    "requireMention",
    "mentionPatterns",
    "implicitMentions",
    "requireExplicitMention",
    "allowBots",
    "botUserId",
    "historyLimit",
    "botLoopProtection",
];

/// Keys of a per-group entry (`channels.<ch>.groups.<id>`) that are policy keys.
const GROUP_KEYS: &[&str] = &[
    "requireMention",
    "allowFrom",
    "groupAllowFrom",
    "mentionPatterns",
    "requireExplicitMention",
    "allowBots",
    "historyLimit",
    "implicitMentions",
    "botLoopProtection",
];

/// Keys of a Discord guild entry (`channels.discord.guilds.<id>`) deepcli takes.
const GUILD_KEYS: &[&str] = &["requireMention", "users", "roles", "channels"];

/// Keys of a Discord guild's channel entry deepcli takes (`allow`, OpenClaw's legacy
/// `enabled`, is read as `enabled`).
const GUILD_CHANNEL_KEYS: &[&str] = &["enabled", "allow", "requireMention", "users", "roles"];

/// The ACP servers deepcli documents and tests (docs/controller.md, "Running real agents") for
/// OpenClaw's ACP harness names: the harness, the command, the npm package that installs it.
const ACP_HARNESSES: &[(&str, &[&str], &str)] = &[
    ("codex", &["codex-acp"], "@zed-industries/codex-acp"),
    (
        "claude",
        &["claude-agent-acp"],
        "@agentclientprotocol/claude-agent-acp",
    ),
    ("gemini", &["gemini", "--acp"], "@google/gemini-cli"),
    ("opencode", &["opencode", "acp"], "opencode-ai"),
];

/// `channels.<x>` keys that are not channels.
const NOT_CHANNELS: &[&str] = &["defaults", "modelByChannel"];

/// Sender ids written as numbers (OpenClaw takes Telegram's numeric ids either way) as the
/// strings deepcli's allowlists hold: dropping one instead would widen who may speak.
fn ids_as_strings(list: &mut Node) {
    if let Node::Seq(items) = list {
        for item in items {
            if let Node::Int(n) = &item.value {
                item.value = Node::Str(n.to_string());
            }
        }
    }
}

pub(super) fn child(path: &str, key: &str) -> String {
    let k = key_path(key);
    if k.starts_with('[') || path.is_empty() {
        format!("{path}{k}")
    } else {
        format!("{path}.{k}")
    }
}

/// What the mapping made.
pub struct Mapped {
    pub agents: Node,
    pub channels: Node,
    pub bindings: Node,
    pub unsupported: Vec<Unsupported>,
    pub secrets: Vec<SecretVar>,
    pub notes: Vec<String>,
    /// The agents imported without a runtime (`deepcli up` starts nothing for them).
    pub no_runtime: Vec<String>,
}

struct Mapper<'a> {
    root: &'a Value,
    /// OpenClaw's default agent, if it has one.
    default_agent: Option<String>,
    unsupported: Vec<Unsupported>,
    secrets: Vec<SecretVar>,
    notes: Vec<String>,
    vars: HashSet<String>,
    /// OpenClaw's `tools.subagents.tools` in deepcli's terms: it goes into every `subagents`
    /// block deepcli writes (an agent's own replaces the defaults' whole).
    subagent_tools: Option<Node>,
    no_runtime: Vec<String>,
}

/// A JSON5 value as YAML: ids that are numbers become strings (`as_id`), as OpenClaw reads them.
fn to_node(v: &Value) -> Option<Node> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => Node::Bool(*b),
        Value::Int(i) => Node::Int(*i),
        Value::Float(_) => Node::Str(v.as_id()?),
        Value::Str(s) => Node::Str(s.clone()),
        Value::Array(items) => Node::Seq(
            items
                .iter()
                .filter_map(to_node)
                .map(|value| Item {
                    value,
                    comment: Vec::new(),
                })
                .collect(),
        ),
        Value::Object(entries) => Node::Map(
            entries
                .iter()
                .filter_map(|(k, v)| {
                    Some(Entry {
                        key: k.clone(),
                        value: Some(to_node(v)?),
                        comment: Vec::new(),
                    })
                })
                .collect(),
        ),
    })
}

/// A list of ids (numbers written as strings).
fn id_list(v: &Value) -> Option<Node> {
    match v {
        Value::Array(items) => Some(Node::strs(items.iter().filter_map(Value::as_id))),
        _ => None,
    }
}

fn env_name(parts: &[&str]) -> String {
    let mut out = String::new();
    for part in parts {
        if !out.is_empty() {
            out.push('_');
        }
        let mut last_sep = false;
        for c in part.chars() {
            if c.is_ascii_alphanumeric() {
                out.push(c.to_ascii_uppercase());
                last_sep = false;
            } else if !last_sep {
                out.push('_');
                last_sep = true;
            }
        }
    }
    let out = out.trim_matches('_').to_string();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        format!("SECRET_{out}")
    } else {
        out
    }
}

/// `botToken` → `BOT_TOKEN`.
fn field_words(field: &str) -> String {
    let mut out = String::new();
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl<'a> Mapper<'a> {
    fn unsupported(&mut self, path: String, value: &Value, why: impl Into<String>) {
        self.unsupported.push(Unsupported {
            path,
            shape: value.shape(),
            why: why.into(),
        });
    }

    fn var(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut n = 2;
        while !self.vars.insert(name.clone()) {
            name = format!("{wanted}_{n}");
            n += 1;
        }
        name
    }

    /// Copies the keys of `v` named in `keys` (to_node), reporting the others.
    fn copy_keys(&mut self, v: &Value, path: &str, keys: &[&str], what: &str) -> Node {
        let mut out = Node::map();
        for (k, val) in v.entries() {
            if keys.contains(&k.as_str()) {
                if let Some(mut node) = to_node(val) {
                    if matches!(k.as_str(), "allowFrom" | "groupAllowFrom") {
                        ids_as_strings(&mut node);
                    }
                    out.set(k.clone(), node);
                }
            } else {
                self.unsupported(
                    child(path, k),
                    val,
                    format!("deepcli's {what} has no `{k}`"),
                );
            }
        }
        out
    }

    // ---- agents.yaml ----------------------------------------------------------------------

    fn agents(&mut self, router: &Router) -> Node {
        let mut file = Node::map();
        let agents = self.root.get("agents");
        let roster = route::roster(self.root);
        let mut section = Node::map();
        let mut notes_for_default = Vec::new();

        if let Some(agents) = agents {
            for (k, v) in agents.entries() {
                match k.as_str() {
                    "list" | "entries" | "defaults" | "ownership" => {}
                    _ => self.unsupported(
                        format!("agents.{}", key_path(k)),
                        v,
                        "deepcli's agents section has only `defaults` and `list`",
                    ),
                }
            }
            if agents.get("entries").is_some() && agents.get("list").is_some() {
                self.unsupported(
                    "agents.list".into(),
                    agents.get("list").unwrap_or(&Value::Null),
                    "OpenClaw reads `agents.entries` when both are set; the list was not imported",
                );
            }
        }
        let root = self.root;
        self.subagent_tools = root
            .get("tools")
            .and_then(|t| t.get("subagents"))
            .and_then(|s| s.get("tools"))
            .map(|t| {
                self.copy_keys(
                    t,
                    "tools.subagents.tools",
                    &["allow", "alsoAllow", "deny"],
                    "tools.subagents.tools",
                )
            });
        let defaults = agents.and_then(|a| a.get("defaults"));
        let workspace_root = defaults
            .and_then(|d| d.get("workspace"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        if let Some(d) = defaults {
            let node = self.agent_defaults(d);
            if !node.is_empty_map() {
                section.set_commented("defaults", node, vec!["from agents.defaults".into()]);
            }
        }
        // OpenClaw's sub-agent tool policy is hub-wide: the defaults' `subagents` carries it.
        if let Some(tools) = self.subagent_tools.clone()
            && !section
                .get_mut("defaults")
                .is_some_and(|d| d.has("subagents"))
        {
            let mut subagents = Node::map();
            subagents.set_commented("tools", tools, vec!["from tools.subagents.tools".into()]);
            match section.get_mut("defaults") {
                Some(defaults) => {
                    defaults.set("subagents", subagents);
                }
                None => {
                    let mut defaults = Node::map();
                    defaults.set("subagents", subagents);
                    section.set("defaults", defaults);
                }
            }
        }

        let default_agent = router.default_agent().map(str::to_string);
        let owner = route::workspace_owner(self.root, roster.as_deref());
        let first_listed = roster
            .as_ref()
            .and_then(|r| r.first())
            .map(|(raw, _, _)| route::agent_id(raw));
        let mut list = Vec::new();
        let mut listed = HashSet::new();
        for (raw, entry, path) in roster.iter().flatten() {
            let id = route::agent_id(raw);
            let mut comment = vec![format!("from {path}")];
            if raw.trim() != id {
                comment.push(format!(
                    "OpenClaw id `{}` normalized to `{id}`, the form OpenClaw uses in session keys",
                    raw.trim()
                ));
            }
            let mut agent = Node::map();
            agent.set("id", Node::str(id.clone()));
            // deepcli's default is the first agent unless one is marked: mark OpenClaw's
            // default where that rule would not find it, or where openclaw.json marks it.
            let marked = entry.get("default").and_then(Value::as_bool) == Some(true);
            if default_agent.as_deref() == Some(id.as_str())
                && !listed.contains(&id)
                && (marked || first_listed.as_deref() != Some(id.as_str()))
            {
                agent.set_commented("default", Node::Bool(true), vec![default_reason(self.root)]);
            }
            if id == ids::PRIMARY_ALIAS {
                self.unsupported(
                    path.clone(),
                    entry,
                    "deepcli reserves the agent id `primary` (an alias of `main`): rename the agent; its sessions (agent:primary:…) will not carry over under another id",
                );
            }
            self.agent_fields(entry, path, &mut agent);
            if !agent.has("runtime") {
                self.no_runtime.push(id.clone());
                // An OpenClaw runtime deepcli could not map has its own note already.
                if entry.get("runtime").is_none() {
                    agent.note(vec![
                        "no runtime: `deepcli up` starts nothing for it until it has one, e.g. runtime: {kind: acp, command: [codex-acp]}".into(),
                    ]);
                }
            }
            if entry.get("workspace").is_none()
                && let Some(root) = &workspace_root
            {
                let ws = if owner.as_deref() == Some(id.as_str()) {
                    root.clone()
                } else {
                    format!("{}/{id}", root.trim_end_matches('/'))
                };
                agent.set_commented(
                    "workspace",
                    Node::str(ws),
                    vec!["where OpenClaw puts it under agents.defaults.workspace".into()],
                );
            }
            listed.insert(id);
            list.push(Item {
                value: agent,
                comment,
            });
        }
        // With no roster OpenClaw routes bindings to agents it has never heard of; deepcli
        // needs them declared (after `main`, which stays the default).
        if roster.is_none() {
            let mut named = BTreeSet::new();
            for b in self
                .root
                .get("bindings")
                .map(Value::items)
                .unwrap_or_default()
            {
                if let Some(id) = b.get("agentId").and_then(Value::as_id) {
                    let id = route::agent_id(&id);
                    if id != ids::MAIN_AGENT {
                        named.insert(id);
                    }
                }
            }
            if !named.is_empty() {
                let mut main = Node::map();
                main.set("id", Node::str(ids::MAIN_AGENT));
                main.set_commented(
                    "default",
                    Node::Bool(true),
                    vec!["OpenClaw's implicit agent: it lists none, so unmatched messages go to main".into()],
                );
                list.push(Item {
                    value: main,
                    comment: vec!["openclaw.json lists no agents: main is implicit there".into()],
                });
                self.no_runtime.push(ids::MAIN_AGENT.to_string());
                for id in named {
                    self.no_runtime.push(id.clone());
                    let mut agent = Node::map();
                    agent.set("id", Node::str(id));
                    list.push(Item {
                        value: agent,
                        comment: vec![
                            "named by a binding; openclaw.json has no agents list".into(),
                        ],
                    });
                }
            }
        }
        if default_agent.is_none() && roster.as_ref().is_some_and(|r| r.len() > 1) {
            let first = roster
                .as_ref()
                .and_then(|r| r.first())
                .map(|(raw, _, _)| route::agent_id(raw))
                .unwrap_or_default();
            notes_for_default.push(format!(
                "OpenClaw has no default agent here (several agents, none marked): it refuses messages no binding matches. deepcli sends them to the first agent, `{first}`; add a binding with accountId \"*\" per channel if they should go elsewhere"
            ));
        }
        self.notes.extend(notes_for_default);
        if list.is_empty() {
            // deepcli's implicit `main` takes every message, and runs nothing either.
            self.no_runtime.push(ids::MAIN_AGENT.to_string());
        } else {
            section.set("list", Node::Seq(list));
        }
        if !section.is_empty_map() {
            file.set("agents", section);
        }

        if let Some(tools) = self.tools() {
            file.set_commented("tools", tools, vec!["from tools".into()]);
        }
        if let Some(session) = self.session() {
            file.set_commented("session", session, vec!["from session".into()]);
        }
        file
    }

    fn agent_defaults(&mut self, d: &Value) -> Node {
        let mut out = Node::map();
        for (k, v) in d.entries() {
            let path = format!("agents.defaults.{}", key_path(k));
            match k.as_str() {
                "model" => self.model(v, &path, &mut out),
                "skipBootstrap" | "bootstrapMaxChars" | "heartbeat" | "groupChat" | "identity" => {
                    if let Some(n) = to_node(v) {
                        out.set(k.clone(), n);
                    }
                }
                "sandbox" => {
                    let n = self.sandbox(v, &path);
                    out.set("sandbox", n);
                }
                "tools" => {
                    let n = self.tools_of(v, &path);
                    out.set("tools", n);
                }
                "subagents" => {
                    let n = self.subagents(v, &path);
                    out.set("subagents", n);
                }
                "workspace" => {}   // written into each agent
                "systemAgent" => {} // decides the default agent
                _ => self.unsupported(path, v, format!("deepcli's agents.defaults has no `{k}`")),
            }
        }
        // messages.groupChat.mentionPatterns is OpenClaw's global default of the agents' own.
        if !out.has("groupChat")
            && let Some(p) = self
                .root
                .get("messages")
                .and_then(|m| m.get("groupChat"))
                .and_then(|g| g.get("mentionPatterns"))
            && let Some(list) = to_node(p)
        {
            let mut gc = Node::map();
            gc.set("mentionPatterns", list);
            out.set_commented(
                "groupChat",
                gc,
                vec!["from messages.groupChat.mentionPatterns".into()],
            );
        }
        out
    }

    fn model(&mut self, v: &Value, path: &str, out: &mut Node) {
        match v {
            Value::Str(s) => {
                out.set("model", Node::str(s.clone()));
            }
            Value::Object(_) => {
                let n = self.copy_keys(v, path, &["primary", "fallbacks"], "model");
                out.set("model", n);
            }
            _ => self.unsupported(
                path.into(),
                v,
                "a model is a string or {primary, fallbacks}",
            ),
        }
    }

    fn tools_of(&mut self, v: &Value, path: &str) -> Node {
        self.copy_keys(
            v,
            path,
            &["profile", "allow", "deny", "elevated"],
            "agent tools",
        )
    }

    fn subagents(&mut self, v: &Value, path: &str) -> Node {
        // The Hub reads these (hub.md); the schema gate reports the ones this build lacks.
        let mut out = self.copy_keys(
            v,
            path,
            &[
                "allowAgents",
                "maxSpawnDepth",
                "maxChildrenPerAgent",
                "maxConcurrent",
                "runTimeoutSeconds",
            ],
            "subagents",
        );
        if let Some(tools) = &self.subagent_tools {
            out.set_commented(
                "tools",
                tools.clone(),
                vec!["from tools.subagents.tools".into()],
            );
        }
        out
    }

    /// OpenClaw's `sandbox` in deepcli's terms. `mode`, `scope` and `workspaceAccess` are the
    /// same keys (the schema gate reports values deepcli refuses; `validate` warns about the
    /// ones it does not act on), `sessionToolsVisibility: all` too (`spawned` is deepcli's
    /// default). Of OpenClaw's Docker settings only `docker.network` has a counterpart:
    /// `none` stays `none`, any other network (`bridge`, `host`, a named one) becomes `host`,
    /// deepcli's unrestricted network. Everything else (image, setupCommand, binds, browser,
    /// prune, …) is Docker's or OpenClaw's own and is reported.
    fn sandbox(&mut self, v: &Value, path: &str) -> Node {
        let mut out = Node::map();
        for (k, val) in v.entries() {
            let p = child(path, k);
            match k.as_str() {
                "mode" | "scope" | "workspaceAccess" => {
                    if let Some(n) = to_node(val) {
                        out.set(k.clone(), n);
                    }
                }
                "sessionToolsVisibility" => match val.as_str() {
                    Some("all") => {
                        out.set(k.clone(), Node::Str("all".into()));
                    }
                    // OpenClaw's default, and deepcli's when the key is unset.
                    Some("spawned") => {}
                    _ => self.unsupported(
                        p,
                        val,
                        "deepcli's sandbox.sessionToolsVisibility takes only `all`",
                    ),
                },
                "docker" => {
                    for (dk, dv) in val.entries() {
                        let dp = child(&p, dk);
                        if dk != "network" {
                            self.unsupported(
                                dp,
                                dv,
                                format!("deepcli runs the whole runtime in its sandbox (bwrap or landlock), not tools in a Docker container: it has no `docker.{dk}`"),
                            );
                            continue;
                        }
                        let Some(network) = dv.as_str() else {
                            self.unsupported(dp, dv, "not a Docker network name");
                            continue;
                        };
                        if network == "none" {
                            out.set("network", Node::Str("none".into()));
                            self.notes.push(format!(
                                "{dp}: `none` is imported as `sandbox.network: none`. OpenClaw's sandbox held the tools only; deepcli's holds the whole runtime, so the agent cannot reach its model's API either: list its hosts with `network: allowlist` and `allowedDomains` if it needs them"
                            ));
                        } else {
                            out.set("network", Node::Str("host".into()));
                            self.notes.push(format!(
                                "{dp}: the Docker network `{network}` is imported as `sandbox.network: host`, deepcli's unrestricted network (it has no Docker networks); `network: allowlist` with `allowedDomains` restricts it"
                            ));
                        }
                    }
                }
                _ => self.unsupported(p, val, format!("deepcli's sandbox has no `{k}`")),
            }
        }
        out
    }

    fn agent_fields(&mut self, entry: &Value, path: &str, agent: &mut Node) {
        for (k, v) in entry.entries() {
            let p = child(path, k);
            match k.as_str() {
                "id" | "default" => {}
                "name" | "workspace" | "agentDir" | "skipBootstrap" => {
                    if let Some(n) = to_node(v) {
                        agent.set(k.clone(), n);
                    }
                }
                "model" => self.model(v, &p, agent),
                "identity" => {
                    let n =
                        self.copy_keys(v, &p, &["name", "emoji", "theme", "avatar"], "identity");
                    agent.set("identity", n);
                }
                "tools" => {
                    let n = self.tools_of(v, &p);
                    agent.set("tools", n);
                }
                "subagents" => {
                    let n = self.subagents(v, &p);
                    agent.set("subagents", n);
                }
                "sandbox" => {
                    let n = self.sandbox(v, &p);
                    agent.set("sandbox", n);
                }
                "heartbeat" => {
                    let n = self.copy_keys(v, &p, &["every", "target"], "heartbeat");
                    agent.set("heartbeat", n);
                }
                "groupChat" => {
                    let n = self.copy_keys(v, &p, &["mentionPatterns"], "groupChat");
                    agent.set("groupChat", n);
                }
                "runtime" => self.runtime(v, &p, agent),
                _ => self.unsupported(p, v, format!("deepcli's agents have no `{k}`")),
            }
        }
    }

    /// OpenClaw's `runtime`. An ACP harness deepcli knows the server of ([`ACP_HARNESSES`])
    /// becomes an `acp` runtime with that command (and `acp.cwd` its `cwd`); another harness or
    /// runtime type is reported, with a commented `runtime` to fill in.
    fn runtime(&mut self, v: &Value, path: &str, agent: &mut Node) {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("").trim();
        for (k, val) in v.entries() {
            if k != "type" && k != "acp" {
                self.unsupported(
                    child(path, k),
                    val,
                    format!("deepcli's runtime has no `{k}`"),
                );
            }
        }
        let acp = v.get("acp").filter(|_| kind == "acp");
        let harness = acp
            .and_then(|a| a.get("agent"))
            .and_then(Value::as_str)
            .map(|h| h.trim().to_lowercase())
            .unwrap_or_default();
        let known = ACP_HARNESSES.iter().find(|(name, ..)| *name == harness);
        let Some((name, command, package)) = known.filter(|_| acp.is_some()) else {
            self.unsupported(
                path.into(),
                v,
                if kind == "acp" {
                    format!(
                        "deepcli knows no ACP server for OpenClaw's harness `{harness}`: give the agent the command in runtime.command (a commented `runtime` is in agents.yaml)"
                    )
                } else {
                    format!(
                        "OpenClaw's `{kind}` runtime is its own: deepcli starts an ACP agent you name in runtime.command (a commented `runtime` is in agents.yaml)"
                    )
                },
            );
            agent.note(vec![
                format!("{path}: OpenClaw ran it with its `{kind}` runtime; give deepcli an ACP server to start, e.g."),
                "runtime: {kind: acp, command: [codex-acp]}".into(),
            ]);
            return;
        };
        let mut runtime = Node::map();
        runtime.set("kind", Node::str("acp"));
        runtime.set("command", Node::strs(command.iter().map(|c| c.to_string())));
        let acp_path = child(path, "acp");
        for (k, val) in acp.map(Value::entries).unwrap_or_default() {
            let p = child(&acp_path, k);
            match k.as_str() {
                "agent" => {}
                "cwd" => match val.as_str().map(str::trim).filter(|c| !c.is_empty()) {
                    Some(cwd) => {
                        runtime.set("cwd", Node::str(cwd));
                    }
                    None => self.unsupported(p, val, "a working directory is a path"),
                },
                "backend" => self.unsupported(
                    p,
                    val,
                    "OpenClaw's launcher of ACP harnesses: deepcli starts runtime.command itself",
                ),
                "mode" => self.unsupported(
                    p,
                    val,
                    "deepcli keeps one ACP session per conversation, as long as the conversation's session lasts: it has no runtime mode",
                ),
                _ => self.unsupported(p, val, format!("deepcli's runtime has no `{k}`")),
            }
        }
        agent.set_commented(
            "runtime",
            runtime,
            vec![format!(
                "from {path}: OpenClaw's ACP harness `{name}`, whose server deepcli starts itself: `npm install -g {package}`, and its API key in `env` (docs/controller.md, \"Running real agents\")"
            )],
        );
        self.notes.push(format!(
            "{path}: OpenClaw's ACP harness `{name}` is imported as `runtime: {{kind: acp, command: [{}]}}`: install it (`npm install -g {package}`) and give it its API key in runtime.env (docs/controller.md, \"Running real agents\")",
            command.join(", ")
        ));
    }

    fn tools(&mut self) -> Option<Node> {
        let tools = self.root.get("tools")?;
        let mut out = Node::map();
        for (k, v) in tools.entries() {
            let p = format!("tools.{}", key_path(k));
            match k.as_str() {
                "agentToAgent" => {
                    let n = self.copy_keys(v, &p, &["enabled", "allow"], "tools.agentToAgent");
                    out.set("agentToAgent", n);
                }
                "sessions" => {
                    let n = self.copy_keys(v, &p, &["visibility"], "tools.sessions");
                    out.set("sessions", n);
                }
                // `tools` went into the agents' `subagents` blocks (agents()).
                "subagents" => {
                    for (k, val) in v.entries().iter().filter(|(k, _)| k.as_str() != "tools") {
                        self.unsupported(
                            child(&p, k),
                            val,
                            format!("deepcli's sub-agent settings have no `{k}` (tools.subagents.tools is agents.defaults.subagents.tools)"),
                        );
                    }
                }
                _ => self.unsupported(
                    p,
                    v,
                    "deepcli's tools section has only agentToAgent and sessions (per-agent tool lists live on each agent)",
                ),
            }
        }
        (!out.is_empty_map()).then_some(out)
    }

    fn session(&mut self) -> Option<Node> {
        let session = self.root.get("session")?;
        let mut out = Node::map();
        for (k, v) in session.entries() {
            let p = format!("session.{}", key_path(k));
            match k.as_str() {
                "mainKey" => self.unsupported(
                    p,
                    v,
                    "OpenClaw 2026.9 ignores it (the main session is always `main`); left out so session keys stay OpenClaw's",
                ),
                "dmScope" | "groupScope" | "resetTriggers" | "reset" => {
                    if let Some(n) = to_node(v) {
                        out.set(k.clone(), n);
                    }
                }
                "identityLinks" => {
                    let mut links = Node::map();
                    for (name, list) in v.entries() {
                        if let Some(n) = id_list(list) {
                            links.set(name.clone(), n);
                        }
                    }
                    out.set("identityLinks", links);
                }
                "agentToAgent" => {
                    for (kk, vv) in v.entries() {
                        if kk == "maxPingPongTurns" {
                            if let Some(n) = to_node(vv) {
                                out.set_commented(
                                    "maxPingPongTurns",
                                    n,
                                    vec!["from session.agentToAgent.maxPingPongTurns".into()],
                                );
                            }
                        } else {
                            self.unsupported(
                                child(&p, kk),
                                vv,
                                format!("deepcli's session has no agentToAgent.{kk}"),
                            );
                        }
                    }
                }
                _ => self.unsupported(
                    p,
                    v,
                    "deepcli's session section keys sessions and their lifecycle only (dmScope, groupScope, identityLinks, maxPingPongTurns, resetTriggers, reset)",
                ),
            }
        }
        (!out.is_empty_map()).then_some(out)
    }

    // ---- channels.yaml --------------------------------------------------------------------

    fn channels(&mut self) -> Node {
        let mut file = Node::map();
        let mut channels = Node::map();
        let section = self.root.get("channels");
        // `channels.defaults` and `messages.groupChat.historyLimit` are written once, as
        // deepcli's `channels.defaults` (every channel's accounts inherit it as OpenClaw's do),
        // never copied into each account: an input's size bounds the output's.
        let mut defaults = Node::map();
        if let Some(d) = section.and_then(|c| c.get("defaults")) {
            for (k, v) in d.entries() {
                let p = format!("channels.defaults.{}", key_path(k));
                if POLICY_KEYS.contains(&k.as_str()) {
                    if let Some(node) = policy_node(k, v) {
                        defaults.set_commented(k.clone(), node, vec![format!("from {p}")]);
                    }
                } else {
                    self.unsupported(p, v, format!("deepcli has no channel-wide default `{k}`"));
                }
            }
        }
        let global_history = self
            .root
            .get("messages")
            .and_then(|m| m.get("groupChat"))
            .and_then(|g| g.get("historyLimit"));
        if let Some(h) = global_history
            && !defaults.has("historyLimit")
            && let Some(node) = to_node(h)
        {
            defaults.set_commented(
                "historyLimit",
                node,
                vec!["from messages.groupChat.historyLimit".into()],
            );
        }
        if !defaults.is_empty_map() {
            channels.set_commented(
                crate::config::model::CHANNEL_DEFAULTS,
                defaults,
                vec!["what every channel's accounts inherit, unless they set their own".into()],
            );
        }
        let bound = bound_accounts(self.root);
        for (name, ch) in section.map(Value::entries).unwrap_or_default() {
            if NOT_CHANNELS.contains(&name.as_str()) {
                if name == "modelByChannel" {
                    self.unsupported(
                        "channels.modelByChannel".into(),
                        ch,
                        "deepcli pins models per agent, not per conversation",
                    );
                }
                continue;
            }
            let path = format!("channels.{}", key_path(name));
            if !matches!(ch, Value::Object(_)) {
                self.unsupported(path, ch, "a channel is an object");
                continue;
            }
            let id = ids::channel(name).into_owned();
            let bound_here = bound.get(&id).cloned().unwrap_or_default();
            let node = self.channel(&id, ch, &path, &bound_here);
            channels.set_commented(id, node, vec![format!("from {path}")]);
        }
        // Channels bindings route that openclaw.json does not configure.
        for (channel, accounts) in &bound {
            if channels.has(channel) {
                continue;
            }
            let mut ch = Node::map();
            let mut accs = Node::map();
            for a in accounts {
                accs.set(a.clone(), Node::map());
            }
            ch.set("accounts", accs);
            channels.set_commented(
                channel.clone(),
                ch,
                vec![format!(
                    "declared because bindings route `{channel}`; openclaw.json has no channels.{channel} (add its credentials)"
                )],
            );
        }
        if !channels.is_empty_map() {
            file.set("channels", channels);
        }
        file
    }

    fn channel(&mut self, channel: &str, ch: &Value, path: &str, bound: &BTreeSet<String>) -> Node {
        let mut out = Node::map();
        // Channel-level values: settings every account inherits (written once, on the
        // channel, where deepcli's accounts inherit them too), and the default account's own
        // fields (credentials, name) in OpenClaw's single-account shape.
        let mut own_default: Vec<(&str, &Value)> = Vec::new();
        for (k, v) in ch.entries() {
            let p = child(path, k);
            match k.as_str() {
                "enabled" | "defaultAccount" => {
                    if let Some(n) = to_node(v) {
                        out.set(k.clone(), n);
                    }
                }
                "accounts" => {}
                "groups" => {
                    let groups = self.groups(v, &p);
                    out.set_commented("groups", groups, vec![format!("from {p}")]);
                }
                "name" | "tokenFile" => own_default.push((k, v)),
                k if SECRET_FIELDS.contains(&k) || k == "accessToken" => own_default.push((k, v)),
                "guilds" if channel == "discord" => {
                    let guilds = self.guilds(v, &p);
                    out.set_commented("guilds", guilds, vec![format!("from {p}")]);
                }
                // Inherited by every account (OpenClaw's reading): written on each below.
                "applicationId" if channel == "discord" => {}
                "guilds" | "channels" => self.unsupported(
                    p,
                    v,
                    "per-guild and per-channel settings (keyed by name or id) have no deepcli form: write them as `groups.<conversation id>` entries (requireMention, allowFrom, …) in channels.yaml",
                ),
                k if POLICY_KEYS.contains(&k) => {
                    if let Some(node) = policy_node(k, v) {
                        out.set_commented(k, node, vec![format!("from {p}")]);
                    }
                }
                _ => self.unsupported(
                    p,
                    v,
                    format!("deepcli has no {channel} channel setting `{k}`"),
                ),
            }
        }
        let mut accounts: Vec<(String, &Value, String)> = ch
            .get("accounts")
            .map(Value::entries)
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| (k.clone(), v, format!("{path}.accounts.{}", key_path(k))))
            .collect();
        let has_default = accounts
            .iter()
            .any(|(k, _, _)| ids::account_id(k) == ids::DEFAULT_ACCOUNT);
        let mut node_accounts = Node::map();
        if !has_default && (accounts.is_empty() || !own_default.is_empty()) {
            let mut acc = Node::map();
            for (k, v) in &own_default {
                self.account_field(
                    channel,
                    ids::DEFAULT_ACCOUNT,
                    k,
                    v,
                    &child(path, k),
                    &mut acc,
                );
            }
            node_accounts.set_commented(
                ids::DEFAULT_ACCOUNT,
                acc,
                vec![format!(
                    "the account of {path} itself (OpenClaw's single-account shape)"
                )],
            );
        } else if !own_default.is_empty() {
            // Both: channel-level credentials are the default account's unless it has its own.
            if let Some((_, v, _)) = accounts
                .iter_mut()
                .find(|(k, _, _)| ids::account_id(k) == ids::DEFAULT_ACCOUNT)
            {
                for (k, val) in &own_default {
                    if v.get(k).is_some() {
                        self.unsupported(
                            child(path, k),
                            val,
                            "accounts.default sets its own; OpenClaw uses the account's",
                        );
                    }
                }
            }
        }
        for (id, acc, p) in &accounts {
            if !matches!(acc, Value::Object(_)) {
                self.unsupported(p.clone(), acc, "an account is an object");
                continue;
            }
            let mut node = Node::map();
            if ids::account_id(id) == ids::DEFAULT_ACCOUNT {
                for (k, v) in &own_default {
                    if acc.get(k).is_none() {
                        self.account_field(channel, id, k, v, &child(path, k), &mut node);
                    }
                }
            }
            for (k, v) in acc.entries() {
                self.account_field(channel, id, k, v, &child(p, k), &mut node);
            }
            node_accounts.set_commented(id.clone(), node, vec![format!("from {p}")]);
        }
        // Accounts that bindings name and the channel does not configure.
        for a in bound {
            let known = accounts.iter().any(|(k, _, _)| ids::account_id(k) == *a)
                || (a == ids::DEFAULT_ACCOUNT && node_accounts.has(ids::DEFAULT_ACCOUNT));
            if !known {
                node_accounts.set_commented(
                    a.clone(),
                    Node::map(),
                    vec![format!(
                        "declared because a binding names it; {path} does not configure it"
                    )],
                );
            }
        }
        let count = match &node_accounts {
            Node::Map(e) => e.iter().filter(|e| e.value.is_some()).count(),
            _ => 0,
        };
        if count >= 2
            && !node_accounts.has(ids::DEFAULT_ACCOUNT)
            && !out.has("defaultAccount")
            && let Node::Map(entries) = &node_accounts
            && let Some(first) = entries.iter().find(|e| e.value.is_some())
        {
            out.set_commented(
                "defaultAccount",
                Node::str(first.key.clone()),
                vec!["deepcli needs a default account when there are several: the first is chosen, check it".into()],
            );
            self.notes.push(format!(
                "{path} has several accounts and none called `default`: deepcli needs one, so defaultAccount is set to `{}` (bindings without accountId still match only an account called `default`, as in OpenClaw)",
                first.key
            ));
        }
        // Discord's channel-level `applicationId` is every account's that sets none.
        if let Some(app) = ch.get("applicationId").filter(|_| channel == "discord") {
            let from = child(path, "applicationId");
            match app.as_id() {
                Some(id) => {
                    if let Node::Map(entries) = &mut node_accounts {
                        for entry in entries.iter_mut() {
                            if let Some(node) = entry.value.as_mut()
                                && !node.has("applicationId")
                            {
                                node.set_commented(
                                    "applicationId",
                                    Node::str(id.clone()),
                                    vec![format!("from {from}")],
                                );
                            }
                        }
                    }
                }
                None => self.unsupported(from, app, "an application id is a Discord id"),
            }
        }
        if count > 0 {
            accounts.clear();
            out.set("accounts", node_accounts);
        }
        out
    }

    /// Discord's `guilds` (a channel's or an account's): keyed by guild id and, beneath, by
    /// channel id; an entry keyed by a slug or a name is reported (deepcli keys them by id).
    fn guilds(&mut self, v: &Value, path: &str) -> Node {
        let is_id = |k: &str| k == "*" || (!k.is_empty() && k.chars().all(|c| c.is_ascii_digit()));
        let mut out = Node::map();
        for (id, g) in v.entries() {
            let p = child(path, id);
            if !is_id(id.trim()) {
                self.unsupported(
                    p,
                    g,
                    "deepcli keys guilds by id (`channels resolve` finds it): a guild named by its slug or name is not carried over",
                );
                continue;
            }
            let mut node = self.copy_keys(g, &p, GUILD_KEYS, "Discord guild entry");
            for key in ["users", "roles"] {
                if let Some(list) = node.get_mut(key) {
                    ids_as_strings(list);
                }
            }
            if node.take("channels").is_some() {
                let mut channels = Node::map();
                for (cid, c) in g.get("channels").map(Value::entries).unwrap_or_default() {
                    let cp = child(&child(&p, "channels"), cid);
                    if !is_id(cid.trim()) {
                        self.unsupported(
                            cp,
                            c,
                            "deepcli keys a guild's channels by id (`channels resolve '#name'` finds it): a channel named by its name or slug is not carried over",
                        );
                        continue;
                    }
                    let mut entry =
                        self.copy_keys(c, &cp, GUILD_CHANNEL_KEYS, "Discord guild channel entry");
                    if let Some(allow) = entry.take("allow")
                        && !entry.has("enabled")
                    {
                        entry.set_commented(
                            "enabled",
                            allow,
                            vec![format!(
                                "from {} (OpenClaw's legacy key)",
                                child(&cp, "allow")
                            )],
                        );
                    }
                    for key in ["users", "roles"] {
                        if let Some(list) = entry.get_mut(key) {
                            ids_as_strings(list);
                        }
                    }
                    channels.set(cid.clone(), entry);
                }
                node.set("channels", channels);
            }
            out.set(id.clone(), node);
        }
        out
    }

    fn groups(&mut self, v: &Value, path: &str) -> Node {
        let mut out = Node::map();
        for (id, g) in v.entries() {
            let p = child(path, id);
            let mut node = self.copy_keys(g, &p, GROUP_KEYS, "per-group settings");
            // OpenClaw's per-group `allowFrom` is who may speak in that group: deepcli's
            // `groupAllowFrom` (a group entry has no DM allowlist).
            if !node.has("groupAllowFrom")
                && let Some(senders) = node.take("allowFrom")
            {
                node.set_commented(
                    "groupAllowFrom",
                    senders,
                    vec![format!("from {}", child(&p, "allowFrom"))],
                );
            }
            out.set(id.clone(), node);
        }
        out
    }

    fn account_field(
        &mut self,
        channel: &str,
        account: &str,
        k: &str,
        v: &Value,
        path: &str,
        out: &mut Node,
    ) {
        match k {
            "name" | "enabled" => {
                if let Some(n) = to_node(v) {
                    out.set(k, n);
                }
            }
            // Matrix's access token: deepcli's generic `token` credential.
            "accessToken" if !out.has("token") => {
                if let Some(n) = self.secret(channel, account, "token", v, path) {
                    out.set_commented("token", n, vec![format!("from {path}")]);
                }
            }
            "tokenFile" => match v.as_str() {
                Some(file) if !out.has("botToken") => {
                    let mut r = Node::map();
                    r.set("source", Node::str("file"))
                        .set("path", Node::str(file));
                    out.set_commented("botToken", r, vec![format!("from {path}")]);
                }
                _ => self.unsupported(
                    path.into(),
                    v,
                    "tokenFile is a path, and botToken is also set",
                ),
            },
            "allowFrom" | "groupAllowFrom" => {
                if let Some(n) = id_list(v) {
                    out.set(k, n);
                }
            }
            "groups" => {
                let g = self.groups(v, path);
                out.set("groups", g);
            }
            "guilds" if channel == "discord" => {
                let g = self.guilds(v, path);
                out.set("guilds", g);
            }
            "applicationId" if channel == "discord" => match v.as_id() {
                Some(id) => {
                    out.set("applicationId", Node::str(id));
                }
                None => self.unsupported(path.into(), v, "an application id is a Discord id"),
            },
            k if SECRET_FIELDS.contains(&k) => {
                if let Some(n) = self.secret(channel, account, k, v, path) {
                    out.set(k, n);
                }
            }
            k if POLICY_KEYS.contains(&k) => {
                if let Some(n) = to_node(v) {
                    out.set(k, n);
                }
            }
            _ => self.unsupported(
                path.into(),
                v,
                format!("deepcli's {channel} accounts have no `{k}`"),
            ),
        }
    }

    /// A credential as a reference: `${VAR}` and env/file SecretRefs are kept, inline values
    /// become a new `${VAR}` to set, other refs are reported with a variable to fill.
    fn secret(
        &mut self,
        channel: &str,
        account: &str,
        field: &str,
        v: &Value,
        path: &str,
    ) -> Option<Node> {
        let wanted = if account == ids::DEFAULT_ACCOUNT {
            env_name(&[channel, &field_words(field)])
        } else {
            env_name(&[channel, account, &field_words(field)])
        };
        let target = format!(
            "channels.{}.accounts.{}.{field}",
            key_path(channel),
            key_path(account)
        );
        let placeholder = |m: &mut Mapper, kind: SecretKind| {
            let var = m.var(wanted.clone());
            m.secrets.push(SecretVar {
                variable: var.clone(),
                target: target.clone(),
                from: path.to_string(),
                kind,
            });
            Some(Node::str(format!("${{{var}}}")))
        };
        match v {
            Value::Str(s) if s.trim().is_empty() => {
                self.unsupported(path.into(), v, "an empty credential is no credential");
                None
            }
            Value::Str(s) => {
                let var = s
                    .strip_prefix("${")
                    .and_then(|r| r.strip_suffix('}'))
                    .filter(|n| {
                        !n.is_empty()
                            && n.chars()
                                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                            && !n.starts_with(|c: char| c.is_ascii_digit())
                    });
                match var {
                    Some(var) => {
                        self.vars.insert(var.to_string());
                        self.secrets.push(SecretVar {
                            variable: var.to_string(),
                            target: target.clone(),
                            from: path.to_string(),
                            kind: SecretKind::Env,
                        });
                        Some(Node::str(s.clone()))
                    }
                    None => placeholder(self, SecretKind::Inline),
                }
            }
            Value::Object(_) => {
                let source = v.get("source").and_then(Value::as_str).unwrap_or("");
                let id = v.get("id").and_then(Value::as_str).unwrap_or("");
                match source {
                    "env" if !id.is_empty() => {
                        self.vars.insert(id.to_string());
                        self.secrets.push(SecretVar {
                            variable: id.to_string(),
                            target: target.clone(),
                            from: path.to_string(),
                            kind: SecretKind::Env,
                        });
                        let mut r = Node::map();
                        r.set("source", Node::str("env")).set("id", Node::str(id));
                        Some(r)
                    }
                    "file" => match self.file_provider(v) {
                        Some(file) => {
                            let mut r = Node::map();
                            r.set("source", Node::str("file"))
                                .set("path", Node::str(file));
                            Some(r)
                        }
                        None => placeholder(self, SecretKind::FileJson(describe_ref(v))),
                    },
                    "exec" => {
                        self.unsupported(
                            path.into(),
                            v,
                            "an exec SecretRef: deepcli runs no secret commands; put the command's output in the variable listed under secrets",
                        );
                        placeholder(self, SecretKind::Exec(describe_ref(v)))
                    }
                    _ => {
                        self.unsupported(
                            path.into(),
                            v,
                            format!(
                                "a `{source}` SecretRef: deepcli reads env and file references only"
                            ),
                        );
                        placeholder(self, SecretKind::Other(describe_ref(v)))
                    }
                }
            }
            _ => {
                self.unsupported(path.into(), v, "a credential is a string or a SecretRef");
                None
            }
        }
    }

    /// The path of a `file` SecretRef whose provider holds one value (`mode: singleValue`).
    fn file_provider(&self, r: &Value) -> Option<String> {
        let secrets = self.root.get("secrets");
        let name = r
            .get("provider")
            .and_then(Value::as_str)
            .or_else(|| {
                secrets
                    .and_then(|s| s.get("defaults"))
                    .and_then(|d| d.get("file"))
                    .and_then(Value::as_str)
            })
            .unwrap_or("default");
        let provider = secrets?.get("providers")?.get(name)?;
        (provider.get("source").and_then(Value::as_str) == Some("file")
            && provider.get("mode").and_then(Value::as_str) == Some("singleValue"))
        .then(|| {
            provider
                .get("path")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .flatten()
    }

    // ---- bindings.yaml --------------------------------------------------------------------

    fn bindings(&mut self) -> Node {
        let mut file = Node::map();
        let mut list = Vec::new();
        let Some(bindings) = self.root.get("bindings") else {
            return file;
        };
        if !matches!(bindings, Value::Array(_)) {
            self.unsupported("bindings".into(), bindings, "bindings is a list");
            return file;
        }
        for (i, b) in bindings.items().iter().enumerate() {
            let path = format!("bindings[{i}]");
            if let Some(node) = self.binding(b, &path) {
                list.push(Item {
                    value: node,
                    comment: vec![format!("from {path}")],
                });
            }
        }
        if !list.is_empty() {
            file.set("bindings", Node::Seq(list));
        }
        file
    }

    fn binding(&mut self, b: &Value, path: &str) -> Option<Node> {
        if !matches!(b, Value::Object(_)) {
            self.unsupported(path.into(), b, "a binding is an object");
            return None;
        }
        let acp = route::is_acp(b);
        if let Some(t) = b.get("type").filter(|_| !acp)
            && t.as_str() != Some("route")
        {
            self.unsupported(
                format!("{path}.type"),
                t,
                "OpenClaw routes a binding of any type but `acp` as a route binding; imported as one",
            );
        }
        let Some(m) = b.get("match").filter(|m| matches!(m, Value::Object(_))) else {
            self.unsupported(path.into(), b, "OpenClaw ignores a binding without a match");
            return None;
        };
        let channel = m
            .get("channel")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if channel.is_empty() {
            self.unsupported(
                path.into(),
                b,
                "OpenClaw ignores a binding without match.channel",
            );
            return None;
        }
        let mut agent_comment = Vec::new();
        let agent = match b
            .get("agentId")
            .and_then(Value::as_id)
            .filter(|a| !a.trim().is_empty())
        {
            Some(agent) => agent,
            // OpenClaw sends the messages of a binding without agentId to its default agent.
            None => match &self.default_agent {
                Some(d) => {
                    agent_comment.push("openclaw.json names no agentId: OpenClaw routes this binding to its default agent".to_string());
                    d.clone()
                }
                None => {
                    self.unsupported(
                        path.into(),
                        b,
                        "a binding without agentId, and no default agent for it: OpenClaw refuses its messages",
                    );
                    return None;
                }
            },
        };
        let mut out = Node::map();
        if acp {
            out.set("type", Node::str("acp"));
        }
        out.set_commented("agentId", Node::str(route::agent_id(&agent)), agent_comment);
        if let Some(c) = b.get("comment").and_then(Value::as_str) {
            out.set("comment", Node::str(c));
        }
        let mut mm = Node::map();
        mm.set("channel", Node::str(ids::channel(channel)));
        for (k, v) in m.entries() {
            let p = child(&format!("{path}.match"), k);
            match k.as_str() {
                "channel" => {}
                "accountId" => match v.as_str().map(str::trim) {
                    Some("*") => {
                        mm.set("accountId", Node::str("*"));
                    }
                    Some(a) if !a.is_empty() => {
                        mm.set("accountId", Node::str(ids::account_id(a)));
                    }
                    _ => {}
                },
                "peer" => {
                    if matches!(v, Value::Null) {
                        continue;
                    }
                    let kind = v
                        .get("kind")
                        .and_then(Value::as_str)
                        .and_then(route::chat_type);
                    let id = v
                        .get("id")
                        .and_then(Value::as_id)
                        .map(|s| s.trim().to_string());
                    match (kind, id) {
                        (Some(kind), Some(id)) if !id.is_empty() => {
                            let mut peer = Node::map();
                            peer.set("kind", Node::str(kind.as_str()))
                                .set("id", Node::str(id));
                            mm.set("peer", peer);
                        }
                        _ => {
                            self.unsupported(
                                p,
                                v,
                                "OpenClaw ignores a binding whose peer has no known kind (direct, group, channel) or no id",
                            );
                            return None;
                        }
                    }
                }
                "guildId" | "teamId" => {
                    if let Some(id) = v
                        .as_id()
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                    {
                        mm.set(k.clone(), Node::str(id));
                    }
                }
                "roles" => {
                    let roles: Vec<String> = v.items().iter().filter_map(Value::as_id).collect();
                    if !roles.is_empty() {
                        mm.set("roles", Node::strs(roles));
                    }
                }
                _ => self.unsupported(p, v, format!("deepcli's binding match has no `{k}`")),
            }
        }
        out.set("match", mm);
        for (k, v) in b.entries() {
            let p = child(path, k);
            match k.as_str() {
                "type" | "agentId" | "comment" | "match" => {}
                "session" if !acp => {
                    let n = self.copy_keys(v, &p, &["dmScope", "groupScope"], "binding session");
                    out.set("session", n);
                }
                "acp" if acp => {
                    let n = self.copy_keys(v, &p, &["mode", "label", "cwd"], "binding acp");
                    out.set("acp", n);
                }
                _ => self.unsupported(p, v, format!("deepcli's bindings have no `{k}` here")),
            }
        }
        Some(out)
    }

    fn top_level(&mut self) {
        for (k, v) in self.root.entries() {
            match k.as_str() {
                "agents" | "bindings" | "channels" | "session" | "tools" => {}
                "secrets" => {} // providers are read for file references
                "messages" => {
                    for (kk, vv) in v.entries() {
                        if kk == "groupChat" {
                            for (g, gv) in vv.entries() {
                                if g != "mentionPatterns" && g != "historyLimit" {
                                    self.unsupported(
                                        format!("messages.groupChat.{}", key_path(g)),
                                        gv,
                                        "deepcli has no global message settings",
                                    );
                                }
                            }
                        } else {
                            self.unsupported(
                                format!("messages.{}", key_path(kk)),
                                vv,
                                "deepcli has no global message settings",
                            );
                        }
                    }
                }
                "$include" => self.unsupported(
                    k.clone(),
                    v,
                    "import does not follow $include: import the merged config (OpenClaw's `config get` prints it)",
                ),
                _ => self.unsupported(
                    key_path(k),
                    v,
                    format!("deepcli has no `{k}` section (it declares agents, channels, bindings, session and tools)"),
                ),
            }
        }
        // $include inside sections
        fn find_includes(v: &Value, path: &str, out: &mut Vec<String>) {
            for (k, vv) in v.entries() {
                let p = child(path, k);
                if k == "$include" {
                    out.push(p);
                } else {
                    find_includes(vv, &p, out);
                }
            }
        }
        let mut includes = Vec::new();
        for (k, v) in self.root.entries() {
            find_includes(v, &key_path(k), &mut includes);
        }
        for p in includes {
            self.unsupported(
                p,
                &Value::Null,
                "import does not follow $include: import the merged config",
            );
        }
    }
}

fn describe_ref(v: &Value) -> String {
    let get = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    format!("{} ref {}:{}", get("source"), get("provider"), get("id"))
}

/// Why an agent is OpenClaw's default, in words for the comment.
fn default_reason(root: &Value) -> String {
    let explicit = root
        .get("agents")
        .and_then(|a| a.get("ownership"))
        .and_then(Value::as_str)
        == Some("explicit");
    if explicit {
        "OpenClaw's owner of unmatched messages (agents.defaults.systemAgent)".into()
    } else {
        "OpenClaw's default agent: unmatched messages go here".into()
    }
}

/// A policy key's value as written: sender id lists as strings (as OpenClaw reads them).
fn policy_node(key: &str, v: &Value) -> Option<Node> {
    if key == "allowFrom" || key == "groupAllowFrom" {
        id_list(v)
    } else {
        to_node(v)
    }
}

/// Channel → the normalized accounts its bindings name (`*` and omitted: `default`).
fn bound_accounts(root: &Value) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut out: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for b in root.get("bindings").map(Value::items).unwrap_or_default() {
        let Some(m) = b.get("match") else { continue };
        let Some(channel) = m.get("channel").and_then(Value::as_str).map(str::trim) else {
            continue;
        };
        if channel.is_empty() {
            continue;
        }
        let account = m
            .get("accountId")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        let accounts = out.entry(ids::channel(channel).into_owned()).or_default();
        if account != "*" {
            accounts.insert(ids::account_id(account).into_owned());
        }
    }
    out
}

/// Maps a parsed `openclaw.json`.
pub fn map(root: &Value, router: &Router) -> Mapped {
    let mut m = Mapper {
        root,
        default_agent: router.default_agent().map(str::to_string),
        unsupported: Vec::new(),
        secrets: Vec::new(),
        notes: Vec::new(),
        vars: HashSet::new(),
        subagent_tools: None,
        no_runtime: Vec::new(),
    };
    m.top_level();
    let agents = m.agents(router);
    let channels = m.channels();
    let bindings = m.bindings();
    Mapped {
        agents,
        channels,
        bindings,
        unsupported: m.unsupported,
        secrets: m.secrets,
        notes: m.notes,
        no_runtime: m.no_runtime,
    }
}
