//! `not-enforced`: keys the schema accepts but deepcli does not act on, at least not for the
//! agent's runtime kind (config.md, "What each key does"). Each is a warning at the key, with
//! what would enforce it: a config must not look as if it restricted, scheduled or selected
//! something that nothing does.
//!
//! [`UNENFORCED`] lists the keys deepcli never acts on; `tests/it/schemas.rs` holds every schema
//! property against it, so that a new key is either read by code or listed here.

use super::Context;
use crate::config::model::{BindingType, RuntimeKind};
use crate::config::{Agent, FileKind};
use crate::diagnostic::{Diagnostic, rules};

const AGENTS: FileKind = FileKind::Agents;

/// A key deepcli never acts on, whatever the runtime: where it is (a path in the schema's
/// terms, `agents.list[].` standing for `agents.defaults.` too), why, and what would act on it.
pub struct Unenforced {
    pub key: &'static str,
    pub why: &'static str,
    pub enforce: &'static str,
}

/// The keys deepcli accepts and never acts on.
pub const UNENFORCED: &[Unenforced] = &[
    Unenforced {
        key: "agents.list[].tools",
        why: "deepcli passes no tool policy to a runtime (it only refuses every permission request the agent asks)",
        enforce: "configure tools in the agent itself (codex's config.toml, Claude Code's settings.json, …)",
    },
    Unenforced {
        key: "agents.list[].heartbeat.target",
        why: "a heartbeat's answer always goes to the agent's last conversation",
        enforce: "remove it; see controller.md, Heartbeats",
    },
];

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let listed: Vec<&Agent> = cx
        .config
        .agents
        .iter()
        .filter(|a| a.index.is_some())
        .collect();
    for key in UNENFORCED {
        match key.key.strip_prefix("agents.list[].") {
            Some(field) => agent_key(cx, &listed, key, field, out),
            None => {
                let pointer = format!("/{}", key.key.replace('.', "/"));
                if cx.exists(AGENTS, &pointer) {
                    out.push(warning(cx, AGENTS, &pointer, key.key, key));
                }
            }
        }
    }
    kind_keys(cx, &listed, out);
    acp_settings(cx, out);
    adapter_keys(cx, out);
}

/// The platform adapter keys (adapters.md) where no adapter reads them: on a channel deepcli
/// has no built-in adapter for (only `slack`, `telegram` and `discord`), in `mode: bridge`, or a
/// key of another platform (`webhookUrl` is Telegram's, `replyToMode` Slack's, `discussion`
/// Slack's and Discord's, `applicationId` Discord's, `guilds` no Slack or Telegram message's).
fn adapter_keys(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    use crate::config::model::AdapterMode;
    const CHANNELS: FileKind = FileKind::Channels;
    let not_enforced = |message: String, pointer: &str| {
        Diagnostic::new(rules::NOT_ENFORCED, message)
            .hint("remove it, or see docs/channels.md for what each platform takes")
            .at(cx.at_key(CHANNELS, pointer))
    };
    for channel in &cx.config.channels {
        let platform = match crate::ids::channel(&channel.id).as_ref() {
            "slack" => Some("slack"),
            "telegram" => Some("telegram"),
            "discord" => Some("discord"),
            _ => None,
        };
        for account in channel.accounts() {
            let base = account.pointer();
            let mode = account.spec.mode;
            let modes: &[AdapterMode] = match platform {
                Some("slack") => &[AdapterMode::Socket, AdapterMode::Http],
                Some("discord") => &[AdapterMode::Gateway],
                Some(_) => &[AdapterMode::Polling, AdapterMode::Webhook],
                None => &[],
            };
            for key in [
                "mode",
                "apiBase",
                "webhookUrl",
                "replyToMode",
                "discussion",
                "applicationId",
                "guilds",
            ] {
                let pointer = format!("{base}/{key}");
                if !cx.exists(CHANNELS, &pointer) {
                    continue;
                }
                let why = match (platform, mode) {
                    (_, Some(AdapterMode::Bridge)) if key == "mode" => None,
                    // The gate reads `guilds` off any envelope that names its guild (a bridge's).
                    (None, _) if key == "guilds" => None,
                    (None, _) => Some(format!(
                        "deepcli has no built-in adapter for channel `{}` (only slack, telegram and discord): an external bridge delivers its messages",
                        channel.id
                    )),
                    (Some(_), Some(AdapterMode::Bridge)) if key != "guilds" => {
                        Some("`mode: bridge` runs no built-in adapter for this account".to_string())
                    }
                    (Some(p), Some(m)) if key == "mode" && !modes.contains(&m) => Some(format!(
                        "`{}` is not a {p} mode (it takes {}): the adapter cannot connect",
                        m.as_str(),
                        modes
                            .iter()
                            .map(|m| format!("`{}`", m.as_str()))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    )),
                    (Some(p), _) if key == "webhookUrl" && p != "telegram" => Some(format!(
                        "`webhookUrl` is Telegram's webhook mode; {}",
                        if p == "slack" {
                            "Slack's Events API URL is set in the Slack app"
                        } else {
                            "Discord's events come over the Gateway"
                        }
                    )),
                    (Some(p), _) if key == "replyToMode" && p != "slack" => {
                        Some(format!("`{key}` is read by the Slack adapter only"))
                    }
                    (Some("telegram"), _) if key == "discussion" => Some(format!(
                        "`{key}` is read by the Slack and Discord adapters only"
                    )),
                    (Some(p), _) if key == "applicationId" && p != "discord" => {
                        Some(format!("`{key}` is read by the Discord adapter only"))
                    }
                    (Some(p), _) if key == "guilds" && p != "discord" => Some(format!(
                        "the {p} adapter's messages name no guild (Discord's do)"
                    )),
                    (Some("telegram"), m)
                        if key == "webhookUrl" && m != Some(AdapterMode::Webhook) =>
                    {
                        Some("`webhookUrl` is read in `mode: webhook` only".to_string())
                    }
                    _ => None,
                };
                if let Some(why) = why {
                    out.push(not_enforced(
                        format!(
                            "`{key}` of account `{}/{}` is not enforced: {why}",
                            channel.id, account.id
                        ),
                        &pointer,
                    ));
                }
            }
        }
        if platform != Some("slack") && platform != Some("discord") {
            for (id, group) in &channel.spec.groups {
                if group.discussion.is_some() {
                    let pointer = format!(
                        "{}/groups/{}/discussion",
                        channel.pointer(),
                        id.replace('~', "~0").replace('/', "~1")
                    );
                    out.push(
                        Diagnostic::new(
                            rules::NOT_ENFORCED,
                            format!("`discussion` of group `{id}` on channel `{}` is not enforced: the Slack and Discord adapters alone read it", channel.id),
                        )
                        .hint("remove it")
                        .at(cx.at_key(CHANNELS, &pointer)),
                    );
                }
            }
        }
        let guilds = format!("{}/guilds", channel.pointer());
        if matches!(platform, Some("slack" | "telegram")) && cx.exists(CHANNELS, &guilds) {
            out.push(not_enforced(
                format!(
                    "`guilds` of channel `{}` is not enforced: its adapter's messages name no guild (Discord's do)",
                    channel.id
                ),
                &guilds,
            ));
        }
    }
}

fn warning(
    cx: &Context<'_>,
    file: FileKind,
    pointer: &str,
    shown: &str,
    key: &Unenforced,
) -> Diagnostic {
    Diagnostic::new(
        rules::NOT_ENFORCED,
        format!("`{shown}` is not enforced: {}", key.why),
    )
    .hint(key.enforce)
    .at(cx.at_key(file, pointer))
}

/// An agent-level key: once in `agents.defaults`, and in each agent that writes its own.
fn agent_key(
    cx: &Context<'_>,
    listed: &[&Agent],
    key: &Unenforced,
    field: &str,
    out: &mut Vec<Diagnostic>,
) {
    let relative = field.replace('.', "/");
    let pointer = format!("/agents/defaults/{relative}");
    if cx.exists(AGENTS, &pointer) {
        out.push(warning(
            cx,
            AGENTS,
            &pointer,
            &format!("agents.defaults.{field}"),
            key,
        ));
    }
    for agent in listed {
        let pointer = format!("{}/{relative}", agent.pointer());
        if cx.exists(AGENTS, &pointer) {
            out.push(warning(cx, AGENTS, &pointer, field, key));
        }
    }
}

/// Keys that act for one runtime kind only: `model`, `heartbeat.every`, `permissions`,
/// `bootstrapMaxChars`, `artifactMaxBytes` and `artifactQuotaBytes` (through ACP), and
/// `runtime.command`, `env`, `cwd` (for a runtime that runs).
fn kind_keys(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let heartbeat_why = |kind: RuntimeKind| {
        format!(
            "a heartbeat prompts an ACP session, and `runtime.kind: {}` has none",
            kind.as_str()
        )
    };
    // Set in `agents.defaults`: reported there, naming the agents that inherit it in vain.
    // (An agent inherits a key as a whole: one that sets its own `heartbeat` inherits none of
    // `agents.defaults.heartbeat`.)
    let inheriting = |key: &str| -> Vec<&Agent> {
        cx.config
            .agents
            .iter()
            .filter(|a| a.runtime_kind() != RuntimeKind::Acp)
            .filter(|a| !cx.exists(AGENTS, &format!("{}/{key}", a.pointer())))
            .collect()
    };
    for (field, key, shown) in [
        ("model", "model", "model"),
        ("heartbeat/every", "heartbeat", "heartbeat.every"),
        ("permissions", "permissions", "permissions"),
        (
            "bootstrapMaxChars",
            "bootstrapMaxChars",
            "bootstrapMaxChars",
        ),
        ("artifactMaxBytes", "artifactMaxBytes", "artifactMaxBytes"),
        (
            "artifactQuotaBytes",
            "artifactQuotaBytes",
            "artifactQuotaBytes",
        ),
    ] {
        let pointer = format!("/agents/defaults/{field}");
        if !cx.exists(AGENTS, &pointer) {
            continue;
        }
        let agents = inheriting(key);
        if agents.is_empty() {
            continue;
        }
        let names: Vec<String> = agents.iter().map(|a| format!("`{}`", a.id())).collect();
        out.push(
            Diagnostic::new(
                rules::NOT_ENFORCED,
                format!(
                    "`agents.defaults.{shown}` is not enforced for {}: deepcli applies it only to `runtime.kind: acp`",
                    names.join(", ")
                ),
            )
            .hint("give those agents an `acp` runtime, or set the key only on agents that have one")
            .at(cx.at_key(AGENTS, &pointer)),
        );
    }
    for agent in listed {
        let kind = agent.runtime_kind();
        let base = agent.pointer();
        if let Err(why) = kind.applies_model()
            && cx.exists(AGENTS, &format!("{base}/model"))
        {
            out.push(
                Diagnostic::new(
                    rules::NOT_ENFORCED,
                    format!("`model` of agent `{}` is not applied: {why}", agent.id()),
                )
                .hint("use `runtime.kind: acp` with an agent that offers a model selection, or pass the model to the program in `command` or `env`")
                .at(cx.at_key(AGENTS, &format!("{base}/model"))),
            );
        }
        if kind != RuntimeKind::Acp && cx.exists(AGENTS, &format!("{base}/heartbeat/every")) {
            out.push(
                Diagnostic::new(
                    rules::NOT_ENFORCED,
                    format!(
                        "`heartbeat.every` of agent `{}` is not run: {}",
                        agent.id(),
                        heartbeat_why(kind)
                    ),
                )
                .hint("use `runtime.kind: acp`, or remove the heartbeat")
                .at(cx.at_key(AGENTS, &format!("{base}/heartbeat/every"))),
            );
        }
    }
    // Permission requests and management requests come from ACP sessions only, and the
    // system section goes to them only.
    for (key, why) in [
        (
            "permissions",
            "only an ACP runtime asks for permission or reaches the Hub's management_request",
        ),
        (
            "bootstrapMaxChars",
            "deepcli gives the bootstrap files to ACP sessions only",
        ),
        (
            "artifactMaxBytes",
            "only an ACP session hands files in to a task, through the Hub's tools",
        ),
        (
            "artifactQuotaBytes",
            "only an ACP session hands files in to a task, through the Hub's tools",
        ),
    ] {
        for agent in listed {
            let kind = agent.runtime_kind();
            let pointer = format!("{}/{key}", agent.pointer());
            if kind != RuntimeKind::Acp && cx.exists(AGENTS, &pointer) {
                out.push(
                    Diagnostic::new(
                        rules::NOT_ENFORCED,
                        format!(
                            "`{key}` of agent `{}` is not enforced: {why}, and `runtime.kind: {}` is not one",
                            agent.id(),
                            kind.as_str()
                        ),
                    )
                    .hint(format!("use `runtime.kind: acp`, or remove `{key}`"))
                    .at(cx.at_key(AGENTS, &pointer)),
                );
            }
        }
    }
    // A runtime that runs nothing: its `command`, `env` and `cwd` do nothing.
    let runtimes = std::iter::once((
        "/agents/defaults/runtime".to_string(),
        cx.config.agent_defaults.runtime.as_ref(),
    ))
    .chain(
        listed
            .iter()
            .map(|a| (format!("{}/runtime", a.pointer()), a.spec.runtime.as_ref())),
    );
    for (base, runtime) in runtimes {
        if runtime.is_none_or(|r| r.kind != RuntimeKind::None) {
            continue;
        }
        for field in ["command", "env", "cwd"] {
            let pointer = format!("{base}/{field}");
            if cx.exists(AGENTS, &pointer) {
                out.push(
                    Diagnostic::new(
                        rules::NOT_ENFORCED,
                        format!(
                            "`runtime.{field}` does nothing: `runtime.kind: none` runs no process"
                        ),
                    )
                    .hint("set `kind: acp` or `kind: process` to run it, or remove the key")
                    .at(cx.at_key(AGENTS, &pointer)),
                );
            }
        }
    }
}

/// `acp` settings of a binding: they hold an ACP session of a `type: acp` binding whose agent
/// has an `acp` runtime, and nothing else.
fn acp_settings(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    // Decoded settings are written ones: bindings inherit nothing.
    for binding in cx.config.bindings.iter().filter(|b| b.spec.acp.is_some()) {
        let pointer = format!("{}/acp", binding.pointer());
        let why = if binding.spec.kind == BindingType::Route {
            Some((
                "a `type: route` binding holds no ACP session of its own".to_string(),
                "add `type: acp` (with a concrete `match.peer`), or remove `acp`",
            ))
        } else {
            let agent = crate::ids::agent_id(&binding.spec.agent_id);
            cx.config
                .agents
                .iter()
                .find(|a| a.id() == agent)
                .map(Agent::runtime_kind)
                .filter(|k| *k != RuntimeKind::Acp)
                .map(|kind| {
                    (
                        format!(
                            "agent `{agent}` has `runtime.kind: {}`, so its messages are routed, never delivered to a session",
                            kind.as_str()
                        ),
                        "give the agent an `acp` runtime, or remove `acp`",
                    )
                })
        };
        if let Some((why, hint)) = why {
            out.push(
                Diagnostic::new(
                    rules::NOT_ENFORCED,
                    format!("the binding's `acp` settings are not enforced: {why}"),
                )
                .hint(hint)
                .at(cx.at_key(FileKind::Bindings, &pointer)),
            );
        }
    }
}
