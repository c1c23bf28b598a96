//! A config → an `openclaw.json` fragment OpenClaw 2026.9 accepts and routes the same way:
//! agents (the default marked), bindings, channels with SecretRefs, session, tools.
//!
//! Read from the files as written (not the resolved config, which would copy defaults into
//! every agent). What OpenClaw has no key for is left out and listed, with why. Which account
//! keys each OpenClaw channel takes was read off OpenClaw's own validator
//! (`scripts/openclaw-routes.mjs` checks every exported fixture with it).

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::agree::{self, Agreement, PolicyAgreement};
use super::route::Router;
use crate::config::model::CHANNEL_DEFAULTS;
use crate::config::{Config, FileKind};
use crate::ids;
use crate::routing::{IndexError, RoutingPlan};

/// The channel ids OpenClaw 2026.9 ships (`bundledChannelIds`); it refuses others.
pub const OPENCLAW_CHANNELS: &[&str] = &[
    "a2a",
    "buzz",
    "clickclack",
    "discord",
    "feishu",
    "googlechat",
    "imessage",
    "irc",
    "line",
    "matrix",
    "mattermost",
    "msteams",
    "nextcloud-talk",
    "nostr",
    "raft",
    "reef",
    "signal",
    "slack",
    "sms",
    "synology-chat",
    "telegram",
    "tlon",
    "twitch",
    "whatsapp",
    "zalo",
    "zalouser",
];

/// The keys of deepcli's `channels.defaults` that OpenClaw's `channels.defaults` takes (2026.9
/// validates them); the others go down to each channel's root.
const OPENCLAW_CHANNEL_DEFAULTS: &[&str] =
    &["groupPolicy", "implicitMentions", "botLoopProtection"];

/// The account keys (of those deepcli has) that OpenClaw's channel accounts take.
fn account_keys(channel: &str) -> &'static [&'static str] {
    const BASE: &[&str] = &["name", "enabled", "dmPolicy", "allowFrom", "groupPolicy"];
    match channel {
        "telegram" => &[
            "name",
            "enabled",
            "botToken",
            "webhookSecret",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "groupAllowFrom",
            "historyLimit",
            "groups",
        ],
        "discord" => &[
            "name",
            "enabled",
            "token",
            "applicationId",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "allowBots",
            "historyLimit",
            "guilds",
        ],
        "slack" => &[
            "name",
            "enabled",
            "botToken",
            "appToken",
            "userToken",
            "signingSecret",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "requireMention",
            "allowBots",
            "historyLimit",
        ],
        "whatsapp" | "signal" | "imessage" => &[
            "name",
            "enabled",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "groupAllowFrom",
            "historyLimit",
            "groups",
        ],
        "googlechat" => &[
            "name",
            "enabled",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "groupAllowFrom",
            "requireMention",
            "allowBots",
            "historyLimit",
            "groups",
        ],
        "matrix" => &[
            "name",
            "enabled",
            "password",
            "token",
            "dmPolicy",
            "allowFrom",
            "groupPolicy",
            "groupAllowFrom",
            "requireMention",
            "allowBots",
            "historyLimit",
            "groups",
        ],
        _ => BASE,
    }
}

/// Something of the config that the export leaves out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// Where it is in deepcli's files (`agents.yaml agents.list[0].runtime`).
    pub path: String,
    pub why: String,
}

#[derive(Debug, Clone)]
pub struct Exported {
    /// The `openclaw.json` fragment.
    pub value: Value,
    pub left_out: Vec<LeftOut>,
}

impl Exported {
    /// As JSON (pretty), or as JSON5 (unquoted keys, trailing commas).
    pub fn text(&self, json5: bool) -> String {
        let mut text = if json5 {
            json5::to_string(&self.value).unwrap_or_default()
        } else {
            serde_json::to_string_pretty(&self.value).unwrap_or_default()
        };
        text.push('\n');
        text
    }
}

struct Exporter {
    left_out: Vec<LeftOut>,
    file_providers: Map<String, Value>,
    /// `agents.defaults.subagents.tools`: OpenClaw's hub-wide `tools.subagents.tools`.
    subagent_tools: Option<Value>,
}

fn written(config: &Config, kind: FileKind) -> Value {
    config
        .sources
        .get(kind)
        .and_then(|f| f.root.as_ref())
        .map_or(Value::Null, |n| n.to_json())
}

impl Exporter {
    fn leave(&mut self, path: String, why: impl Into<String>) {
        self.left_out.push(LeftOut {
            path,
            why: why.into(),
        });
    }

    /// Copies `keys` of `from`, leaving out (and listing) the rest.
    fn pick(&mut self, from: &Value, keys: &[&str], path: &str, why: &str) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, v) in from.as_object().into_iter().flatten() {
            if keys.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            } else {
                self.leave(format!("{path}.{k}"), why.replace("{key}", k));
            }
        }
        out
    }

    /// deepcli's Discord `guilds` in OpenClaw's terms: the same keys, but `allowBots`, which
    /// OpenClaw's guild and guild channel entries do not take (left out, listed).
    fn discord_guilds(&mut self, v: &Value, path: &str) -> Value {
        let mut guilds = v.clone();
        for (id, guild) in guilds.as_object_mut().into_iter().flatten() {
            let at = format!("{path}.{id}");
            if let Some(g) = guild.as_object_mut() {
                if g.remove("allowBots").is_some() {
                    self.leave(
                        format!("{at}.allowBots"),
                        "OpenClaw's Discord guild entries have no `allowBots` (set it on the channel or the account)",
                    );
                }
                for (cid, c) in g
                    .get_mut("channels")
                    .and_then(Value::as_object_mut)
                    .into_iter()
                    .flatten()
                {
                    if c.as_object_mut()
                        .and_then(|c| c.remove("allowBots"))
                        .is_some()
                    {
                        self.leave(
                            format!("{at}.channels.{cid}.allowBots"),
                            "OpenClaw's Discord guild channel entries have no `allowBots`",
                        );
                    }
                }
            }
        }
        guilds
    }

    fn secret(&mut self, v: &Value, path: &str) -> Option<Value> {
        let env = |id: &str| json!({"source": "env", "provider": "default", "id": id});
        let valid_env = |id: &str| {
            id.starts_with(|c: char| c.is_ascii_uppercase())
                && id.len() <= 128
                && id
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        };
        let (source, id) = match v {
            Value::String(s) => match crate::config::model::Secret::from_text(s) {
                crate::config::model::Secret::Ref(crate::config::model::SecretRef::Env { id }) => {
                    ("env", id)
                }
                _ => return None,
            },
            Value::Object(o) => (
                if o.get("source") == Some(&json!("file")) {
                    "file"
                } else {
                    "env"
                },
                o.get("id")
                    .or_else(|| o.get("path"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            ),
            _ => return None,
        };
        if source == "env" {
            if valid_env(&id) {
                return Some(env(&id));
            }
            self.leave(
                path.to_string(),
                format!("OpenClaw's env references take upper-case names only (`{id}`)"),
            );
            return None;
        }
        let name = format!("deepcli-file-{}", self.file_providers.len() + 1);
        self.file_providers.insert(
            name.clone(),
            json!({"source": "file", "path": id, "mode": "singleValue"}),
        );
        Some(json!({"source": "file", "provider": name, "id": "value"}))
    }

    /// deepcli's `sandbox` in OpenClaw's terms, in place of the one `pick` copied: `mode`,
    /// `scope` and `workspaceAccess` are the same keys; `network: none` is OpenClaw's
    /// `docker.network: none`; `sessionToolsVisibility` is read by OpenClaw in
    /// `agents.defaults.sandbox` only. The rest OpenClaw has no key for.
    fn sandbox(&mut self, out: &mut Map<String, Value>, path: &str, defaults: bool) {
        let Some(Value::Object(sandbox)) = out.get_mut("sandbox").map(Value::take) else {
            out.shift_remove("sandbox");
            return;
        };
        let path = format!("{path}.sandbox");
        let mut mapped = Map::new();
        for (k, v) in sandbox {
            let p = format!("{path}.{k}");
            match k.as_str() {
                "mode" | "scope" | "workspaceAccess" => {
                    mapped.insert(k, v);
                }
                "sessionToolsVisibility" if defaults => {
                    mapped.insert(k, v);
                }
                "sessionToolsVisibility" => self.leave(
                    p,
                    "OpenClaw reads `sessionToolsVisibility` in agents.defaults.sandbox only",
                ),
                "network" if v == json!("none") => {
                    mapped.insert("docker".into(), json!({"network": "none"}));
                }
                "network" if v == json!("allowlist") => self.leave(
                    p,
                    "OpenClaw's sandbox has no egress allowlist (its `docker.network` names a Docker network)",
                ),
                "network" => self.leave(
                    p,
                    "OpenClaw's sandbox network is a Docker network, `none` unless `sandbox.docker.network` says otherwise (e.g. `bridge`): set it yourself",
                ),
                "backend" => self.leave(
                    p,
                    "OpenClaw's sandbox is a Docker container: it has no `backend`",
                ),
                "allowedDomains" => self.leave(p, "OpenClaw's sandbox has no egress allowlist"),
                "binds" => self.leave(
                    p,
                    "OpenClaw's binds are Docker bind mounts (`sandbox.docker.binds: [\"host:container:mode\"]`): write them yourself",
                ),
                _ => self.leave(p, format!("OpenClaw's sandbox has no `{k}`")),
            }
        }
        // In place: the key keeps its position in the agent.
        match out.get_mut("sandbox") {
            Some(slot) if !mapped.is_empty() => *slot = Value::Object(mapped),
            _ => {
                out.shift_remove("sandbox");
            }
        }
    }

    /// deepcli's `channels.defaults` in OpenClaw's terms: what OpenClaw's own
    /// `channels.defaults` takes stays there; every other key goes to the root of each
    /// exported channel that takes it and does not set its own, which its accounts inherit as
    /// deepcli's inherit the defaults (account > channel > defaults either way).
    fn channel_defaults(&mut self, channels_file: &Value, channels: &mut Map<String, Value>) {
        let Some(defaults) = channels_file
            .get("channels")
            .and_then(|c| c.get(CHANNEL_DEFAULTS))
            .and_then(Value::as_object)
        else {
            return;
        };
        let mut own = Map::new();
        for (k, v) in defaults {
            let path = format!("channels.yaml channels.{CHANNEL_DEFAULTS}.{k}");
            if OPENCLAW_CHANNEL_DEFAULTS.contains(&k.as_str()) {
                own.insert(k.clone(), v.clone());
                continue;
            }
            let mut placed = false;
            for (name, out) in channels.iter_mut() {
                let Some(out) = out.as_object_mut() else {
                    continue;
                };
                if account_keys(name).contains(&k.as_str()) {
                    placed = true;
                    if !out.contains_key(k) {
                        out.insert(k.clone(), v.clone());
                    }
                } else {
                    self.leave(
                        path.clone(),
                        format!("OpenClaw's {name} channel has no `{k}` to inherit it through"),
                    );
                }
            }
            if !placed && channels.is_empty() {
                self.leave(
                    path,
                    format!("OpenClaw's channels.defaults has no `{k}`, and no channel is exported to carry it"),
                );
            }
        }
        if !own.is_empty() {
            channels.insert(CHANNEL_DEFAULTS.into(), Value::Object(own));
        }
    }

    fn agent(&mut self, a: &Value, path: &str, default: bool) -> Value {
        let mut out = self.pick(
            a,
            &[
                "id",
                "name",
                "workspace",
                "agentDir",
                "model",
                "identity",
                "tools",
                "subagents",
                "sandbox",
                "heartbeat",
                "groupChat",
                "default",
            ],
            path,
            "OpenClaw's agents have no `{key}` (deepcli only)",
        );
        self.sandbox(&mut out, path, false);
        // OpenClaw's sub-agent tool policy is hub-wide only: an agent's own is left out unless
        // it is the defaults' (`tools.subagents.tools`).
        if let Some(Value::Object(sub)) = out.get_mut("subagents")
            && let Some(tools) = sub.remove("tools")
            && self.subagent_tools.as_ref() != Some(&tools)
        {
            self.leave(
                format!("{path}.subagents.tools"),
                "OpenClaw's sub-agent tool policy is hub-wide (tools.subagents.tools, from agents.defaults.subagents.tools): an agent's own has no counterpart",
            );
        }
        out.remove("default");
        if default {
            out.insert("default".into(), Value::Bool(true));
        }
        Value::Object(out)
    }
}

/// The fragment held to the config it came from, as an import is held to its original:
/// OpenClaw's routes and inbound gate on the fragment (read as OpenClaw reads it) against
/// deepcli's on `config`. A disagreement is what OpenClaw would do differently with the export.
pub fn check(
    config: &Config,
    exported: &Exported,
) -> Result<(Agreement, PolicyAgreement), IndexError> {
    let root = super::json5::Value::from_json(&exported.value);
    let plan = RoutingPlan::compile(config)?;
    let router = Router::new(&root);
    let routes = agree::check(&root, &router, &plan, &agree::probes(&root));
    let (probes, skipped) = agree::policy_probes(&root, config);
    let policy = agree::check_policy(config, &plan, &probes, skipped);
    Ok((routes, policy))
}

/// Exports a loaded (valid) config.
pub fn export(config: &Config) -> Exported {
    let mut x = Exporter {
        left_out: Vec::new(),
        file_providers: Map::new(),
        subagent_tools: None,
    };
    let mut root = Map::new();
    let agents_file = written(config, FileKind::Agents);
    let channels_file = written(config, FileKind::Channels);
    let bindings_file = written(config, FileKind::Bindings);

    // agents
    let mut agents = Map::new();

    if let Some(d) = agents_file.get("agents").and_then(|a| a.get("defaults")) {
        let mut defaults = x.pick(
            d,
            &[
                "model",
                "subagents",
                "sandbox",
                "heartbeat",
                "skipBootstrap",
                "bootstrapMaxChars",
                "groupChat",
            ],
            "agents.yaml agents.defaults",
            "OpenClaw's agents.defaults has no `{key}`",
        );
        x.sandbox(&mut defaults, "agents.yaml agents.defaults", true);
        // deepcli's `subagents.tools` is OpenClaw's hub-wide `tools.subagents.tools`.
        if let Some(Value::Object(sub)) = defaults.get_mut("subagents")
            && let Some(tools) = sub.remove("tools")
        {
            x.subagent_tools = Some(tools);
            if sub.is_empty() {
                defaults.remove("subagents");
            }
        }
        if let Some(gc) = defaults.remove("groupChat")
            && let Some(p) = gc.get("mentionPatterns")
        {
            root.insert(
                "messages".into(),
                json!({"groupChat": {"mentionPatterns": p}}),
            );
        }
        if !defaults.is_empty() {
            agents.insert("defaults".into(), Value::Object(defaults));
        }
    }
    let listed: Vec<Value> = agents_file
        .get("agents")
        .and_then(|a| a.get("list"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !listed.is_empty() {
        // A marked default stays marked; deepcli's implicit one (the first agent) becomes
        // OpenClaw's explicit owner of unmatched messages, so an import gives back the same.
        let marked = listed
            .iter()
            .any(|a| a.get("default").and_then(Value::as_bool) == Some(true));
        let mut list = Vec::new();
        let mut has_main = false;
        for (i, a) in listed.iter().enumerate() {
            let id = a.get("id").and_then(Value::as_str).unwrap_or("");
            has_main |= id == ids::MAIN_AGENT;
            list.push(x.agent(
                a,
                &format!("agents.yaml agents.list[{i}]"),
                marked && id == config.default_agent,
            ));
        }
        if !marked {
            agents.insert("ownership".into(), json!("explicit"));
            let defaults = agents
                .entry("defaults")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(d) = defaults.as_object_mut() {
                d.insert(
                    "systemAgent".into(),
                    json!({"agentId": config.default_agent}),
                );
            }
        }
        if !has_main {
            // deepcli's `main` always exists; OpenClaw knows only the agents it lists.
            let mut main = Map::new();
            main.insert("id".into(), json!(ids::MAIN_AGENT));
            list.push(Value::Object(main));
        }
        agents.insert("list".into(), Value::Array(list));
    }
    if !agents.is_empty() {
        root.insert("agents".into(), Value::Object(agents));
    }

    // bindings
    let mut bindings = Vec::new();
    for (i, b) in bindings_file
        .get("bindings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("bindings.yaml bindings[{i}]");
        let mut out = x.pick(
            b,
            &["type", "agentId", "comment", "match", "session", "acp"],
            &path,
            "OpenClaw's bindings have no `{key}`",
        );
        if let Some(Value::String(agent)) = out.get("agentId") {
            let agent = ids::agent_id(agent).into_owned();
            out.insert("agentId".into(), json!(agent));
        }
        if out.get("type") == Some(&json!("route")) {
            out.remove("type");
        }
        bindings.push(Value::Object(out));
    }

    // channels
    let mut channels = Map::new();
    for (name, ch) in channels_file
        .get("channels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let path = format!("channels.yaml channels.{name}");
        if name == CHANNEL_DEFAULTS {
            continue; // below, once every channel is out
        }
        if !OPENCLAW_CHANNELS.contains(&name.as_str()) {
            x.leave(path, format!("OpenClaw ships no `{name}` channel (a plugin may provide it; its bindings are exported)"));
            continue;
        }
        if name == "msteams" {
            x.leave(path, "OpenClaw's msteams channel has no accounts");
            continue;
        }
        let mut out = Map::new();
        if let Some(e) = ch.get("enabled") {
            out.insert("enabled".into(), e.clone());
        }
        if let Some(d) = ch.get("defaultAccount") {
            out.insert("defaultAccount".into(), d.clone());
        }
        let keys = account_keys(name);
        // The channel level's policy keys (`groups`, `dmPolicy`, …) are OpenClaw's too: its
        // channel root holds what every account inherits. A credential is an account's only.
        for (k, v) in ch.as_object().into_iter().flatten() {
            if ["enabled", "defaultAccount", "accounts"].contains(&k.as_str()) {
                continue;
            }
            if name == "discord" && k == "guilds" {
                let guilds = x.discord_guilds(v, &format!("{path}.guilds"));
                out.insert(k.clone(), guilds);
            } else if keys.contains(&k.as_str())
                && !crate::config::model::SECRET_FIELDS.contains(&k.as_str())
                && k != "name"
                && k != "applicationId"
            {
                out.insert(k.clone(), v.clone());
            } else {
                x.leave(
                    format!("{path}.{k}"),
                    format!("not exported to OpenClaw's {name} channel"),
                );
            }
        }
        let mut accounts = Map::new();
        for (id, acc) in ch
            .get("accounts")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let apath = format!("{path}.accounts.{id}");
            let mut a = Map::new();
            for (k, v) in acc.as_object().into_iter().flatten() {
                if !keys.contains(&k.as_str()) {
                    x.leave(
                        format!("{apath}.{k}"),
                        format!("OpenClaw's {name} accounts have no `{k}`"),
                    );
                    continue;
                }
                if crate::config::model::SECRET_FIELDS.contains(&k.as_str()) {
                    if let Some(r) = x.secret(v, &format!("{apath}.{k}")) {
                        a.insert(k.clone(), r);
                    }
                } else if name == "discord" && k == "guilds" {
                    let guilds = x.discord_guilds(v, &format!("{apath}.guilds"));
                    a.insert(k.clone(), guilds);
                } else {
                    a.insert(k.clone(), v.clone());
                }
            }
            accounts.insert(id.clone(), Value::Object(a));
        }
        if !accounts.is_empty() {
            out.insert("accounts".into(), Value::Object(accounts));
        }
        channels.insert(name.clone(), Value::Object(out));
    }
    x.channel_defaults(&channels_file, &mut channels);
    if !channels.is_empty() {
        root.insert("channels".into(), Value::Object(channels));
    }
    if !bindings.is_empty() {
        root.insert("bindings".into(), Value::Array(bindings));
    }

    // session and tools
    if let Some(s) = agents_file.get("session") {
        let mut session = x.pick(
            s,
            &[
                "dmScope",
                "groupScope",
                "identityLinks",
                "mainKey",
                "resetTriggers",
                "reset",
            ],
            "agents.yaml session",
            "OpenClaw has no session.{key} (OpenClaw retired it; deepcli only)",
        );
        if let Some(k) = session.remove("mainKey")
            && k.as_str().map(|k| k.trim().to_lowercase()) != Some("main".into())
        {
            x.leave(
                "agents.yaml session.mainKey".into(),
                "OpenClaw 2026.9 ignores session.mainKey (its main session is always `main`): main-session keys differ",
            );
        }
        // deepcli reads `off` as OpenClaw's `none`; OpenClaw knows `none` only.
        if let Some(mode) = session.get_mut("reset").and_then(|r| r.get_mut("mode"))
            && mode == "off"
        {
            *mode = "none".into();
        }
        if !session.is_empty() {
            root.insert("session".into(), Value::Object(session));
        }
    }
    let mut tools = Map::new();
    if let Some(t) = agents_file.get("tools") {
        tools = x.pick(
            t,
            &["agentToAgent", "sessions"],
            "agents.yaml tools",
            "OpenClaw has no tools.{key}",
        );
    }
    if let Some(sub) = x.subagent_tools.clone() {
        tools.insert("subagents".into(), json!({"tools": sub}));
    }
    {
        if !tools.is_empty() {
            root.insert("tools".into(), Value::Object(tools));
        }
    }
    if !x.file_providers.is_empty() {
        root.insert(
            "secrets".into(),
            json!({"providers": Value::Object(std::mem::take(&mut x.file_providers))}),
        );
    }
    Exported {
        value: Value::Object(root),
        left_out: x.left_out,
    }
}
