//! Rules over agents.yaml: ids, defaults, paths, runtimes, allow lists, inline env secrets.

use rustc_hash::FxHashMap as HashMap;
use std::path::PathBuf;

use super::Context;
use crate::config::model::{EnvValue, Runtime, RuntimeKind, Secret};
use crate::config::yaml::escape_pointer_token;
use crate::config::{Agent, FileKind};
use crate::diagnostic::{Diagnostic, rules};
use crate::ids::PRIMARY_ALIAS;

const FILE: FileKind = FileKind::Agents;

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let listed: Vec<&Agent> = cx
        .config
        .agents
        .iter()
        .filter(|a| a.index.is_some())
        .collect();
    ids(cx, &listed, out);
    defaults(cx, &listed, out);
    // The implicit `main` has paths too, and a listed agent can collide with them.
    let all: Vec<&Agent> = cx.config.agents.iter().collect();
    paths(cx, &all, out);
    runtimes(cx, &listed, out);
    allow_lists(cx, &listed, out);
    usage_budgets(cx, &all, out);
}

/// A token or cost budget counts only what a runtime reports (approvals.md): a `process` or
/// `none` runtime takes no prompts and reports nothing, and a remote A2A agent reports no
/// usage, so such a budget can never be enforced. Whether an ACP runtime reports usage is known only once it did: `deepcli status`
/// says, per agent.
fn usage_budgets(cx: &Context<'_>, agents: &[&Agent], out: &mut Vec<Diagnostic>) {
    for agent in agents {
        let Some(budgets) = &agent.spec.budgets else {
            continue;
        };
        let kind = agent
            .spec
            .runtime
            .as_ref()
            .map_or(RuntimeKind::None, |r| r.kind);
        let why = match kind {
            RuntimeKind::Acp => continue,
            RuntimeKind::A2a => "is a remote A2A agent, which reports no usage",
            _ => "takes no prompts and reports no usage",
        };
        let own = format!("{}/budgets", agent.pointer());
        let base = if agent.index.is_some() && cx.exists(FILE, &own) {
            own
        } else {
            "/agents/defaults/budgets".to_string()
        };
        for (key, set) in [
            ("tokensPerDay", budgets.tokens_per_day.is_some()),
            ("costPerDayUsd", budgets.cost_per_day_usd.is_some()),
        ] {
            if !set {
                continue;
            }
            out.push(
                Diagnostic::new(
                    rules::USAGE_BUDGET_UNENFORCEABLE,
                    format!(
                        "`budgets.{key}` cannot be enforced for agent `{}`: its runtime (kind {}) {why}, so its usage stays unknown",
                        agent.id(),
                        kind.as_str()
                    ),
                )
                .hint("give the agent an `acp` runtime that reports usage (ACP usage_update), or remove the budget; `deepcli status` shows what each runtime reported")
                .at(cx.at(FILE, &format!("{base}/{key}"))),
            );
        }
    }
}

fn ids(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut seen: HashMap<&str, &Agent> = HashMap::default();
    for agent in listed {
        let pointer = format!("{}/id", agent.pointer());
        if agent.id() == PRIMARY_ALIAS {
            out.push(
                Diagnostic::new(
                    rules::RESERVED_AGENT_ID,
                    "`primary` is reserved: it is the alias of `main`",
                )
                .hint("pick another id; bindings that say `primary` route to `main`")
                .at(cx.at(FILE, &pointer)),
            );
        }
        if let Some(first) = seen.get(agent.id()) {
            out.push(
                Diagnostic::new(
                    rules::DUPLICATE_AGENT_ID,
                    format!("agent id `{}` is declared twice", agent.id()),
                )
                .hint("agent ids must be unique; rename or merge one of the two entries")
                .at(cx.at(FILE, &pointer))
                .related(
                    cx.at(FILE, &format!("{}/id", first.pointer())),
                    "first declared here",
                ),
            );
        } else {
            seen.insert(agent.id(), agent);
        }
    }
}

fn defaults(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let marked: Vec<&&Agent> = listed
        .iter()
        .filter(|a| a.spec.default == Some(true))
        .collect();
    if let Some((first, rest)) = marked.split_first() {
        for agent in rest {
            out.push(
                Diagnostic::new(
                    rules::MULTIPLE_DEFAULTS,
                    format!(
                        "`{}` is marked `default: true`, but so is `{}` before it, which wins",
                        agent.id(),
                        first.id()
                    ),
                )
                .hint("mark exactly one agent as the default")
                .at(cx.at_key(FILE, &format!("{}/default", agent.pointer())))
                .related(
                    cx.at_key(FILE, &format!("{}/default", first.pointer())),
                    "the default agent",
                ),
            );
        }
    }
}

/// Two agents must never share an agentDir or a session store: they would read and write each
/// other's state.
fn paths(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    let mut agent_dirs: HashMap<&PathBuf, &Agent> = HashMap::default();
    let mut stores: HashMap<&PathBuf, &Agent> = HashMap::default();
    let mut ids: HashMap<&str, ()> = HashMap::default();
    for agent in listed {
        // A duplicate id is already an error; its equal default paths would only repeat it.
        if ids.insert(agent.id(), ()).is_some() {
            continue;
        }
        // The agentDir key when the agent sets one, else the agent's entry.
        let dir_of = |a: &Agent| {
            if a.spec.agent_dir.is_some() {
                cx.at(FILE, &format!("{}/agentDir", a.pointer()))
            } else {
                cx.at(FILE, &a.pointer())
            }
        };
        if let Some(first) = agent_dirs.get(&agent.agent_dir) {
            out.push(
                Diagnostic::new(
                    rules::DUPLICATE_AGENT_DIR,
                    format!(
                        "`{}` and `{}` both use agentDir {}",
                        first.id(),
                        agent.id(),
                        agent.agent_dir.display()
                    ),
                )
                .hint("give each agent its own agentDir (or leave it unset for <state>/agents/<id>/agent)")
                .at(dir_of(agent))
                .related(dir_of(first), format!("`{}` uses it here", first.id())),
            );
            continue;
        }
        agent_dirs.insert(&agent.agent_dir, agent);
        if let Some(first) = stores.get(&agent.sessions_dir) {
            out.push(
                Diagnostic::new(
                    rules::DUPLICATE_SESSION_STORE,
                    format!(
                        "`{}` and `{}` share the session store {} (it sits beside the agentDir)",
                        first.id(),
                        agent.id(),
                        agent.sessions_dir.display()
                    ),
                )
                .hint("put the agentDirs in different parent directories, e.g. ~/agents/<id>/agent")
                .at(dir_of(agent))
                .related(dir_of(first), format!("`{}` uses it here", first.id())),
            );
        } else {
            stores.insert(&agent.sessions_dir, agent);
        }
    }
}

/// Checks each runtime where it is written: once in `agents.defaults`, and in every agent that
/// sets its own (an inherited runtime would only repeat the defaults' findings).
fn runtimes(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    if let Some(runtime) = &cx.config.agent_defaults.runtime {
        runtime_rules(
            cx,
            runtime,
            "/agents/defaults/runtime",
            "`agents.defaults`",
            out,
        );
    }
    for agent in listed {
        let base = format!("{}/runtime", agent.pointer());
        if let (Some(runtime), true) = (&agent.spec.runtime, cx.exists(FILE, &base)) {
            runtime_rules(cx, runtime, &base, &format!("agent `{}`", agent.id()), out);
        }
    }
}

fn runtime_rules(
    cx: &Context<'_>,
    runtime: &Runtime,
    base: &str,
    whose: &str,
    out: &mut Vec<Diagnostic>,
) {
    let missing = runtime.command.as_ref().is_none_or(|c| c.is_empty());
    if matches!(runtime.kind, RuntimeKind::Acp | RuntimeKind::Process) && missing {
        out.push(
            Diagnostic::new(
                rules::RUNTIME_MISSING_COMMAND,
                format!(
                    "{whose} has `runtime.kind: {}` but no `command` to run",
                    runtime.kind.as_str()
                ),
            )
            .hint("add `command: [\"program\", \"arg\"]`, or use `kind: none` for a routing-only agent")
            .at(cx.at(FILE, &format!("{base}/kind"))),
        );
    }
    for (name, value) in &runtime.env {
        if let EnvValue::Text(text) = value
            && looks_secret(name)
            // An empty value holds no secret (it may be there to blank an inherited one).
            && !text.trim().is_empty()
            && matches!(Secret::from_text(text), Secret::Inline(_))
        {
            out.push(
                    Diagnostic::new(
                        rules::INLINE_SECRET,
                        format!("env `{name}` of {whose} holds an inline secret"),
                    )
                    .hint(format!(
                        "write `{name}: {{source: env, id: {name}}}` or `\"${{{name}}}\"`, and rotate the value: it is in your git history"
                    ))
                    .at(cx.at(FILE, &format!("{base}/env/{}", escape_pointer_token(name))))
                    .redacted(),
                );
        }
    }
}

/// An env variable whose name says it carries a credential.
fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

fn allow_lists(cx: &Context<'_>, listed: &[&Agent], out: &mut Vec<Diagnostic>) {
    if !cx.config.complete.agents {
        return;
    }
    let mut check = |id: &str, pointer: String, what: &str| {
        if id == "*" || cx.has_agent(&crate::ids::agent_id(id)) {
            return;
        }
        let ids = cx.config.agents.iter().map(Agent::id);
        let d = Diagnostic::new(
            rules::UNKNOWN_AGENT,
            format!("{what} names agent `{id}`, which is not declared"),
        )
        .at(cx.at(FILE, &pointer));
        out.push(match crate::suggest::closest(id, ids) {
            Some(near) => d.hint(format!("did you mean `{near}`?")),
            None => d.hint("declare the agent in agents.yaml, or remove it from the list"),
        });
    };
    if let Some(a2a) = &cx.config.tools.agent_to_agent {
        for (i, id) in a2a.allow.iter().enumerate() {
            check(
                id,
                format!("/tools/agentToAgent/allow/{i}"),
                "`tools.agentToAgent.allow`",
            );
        }
    }
    for agent in listed {
        // Inherited lists are checked once, below, at their own place.
        let base = format!("{}/subagents", agent.pointer());
        let (true, Some(sub)) = (cx.exists(FILE, &base), &agent.spec.subagents) else {
            continue;
        };
        for (i, id) in sub.allow_agents.iter().enumerate() {
            check(
                id,
                format!("{base}/allowAgents/{i}"),
                "`subagents.allowAgents`",
            );
        }
    }
    let defaults = cx
        .config
        .sources
        .get(FILE)
        .and_then(|f| f.tree())
        .and_then(|r| r.pointer("/agents/defaults/subagents/allowAgents"))
        .map(|n| n.to_json());
    if let Some(serde_json::Value::Array(ids)) = defaults {
        for (i, id) in ids.iter().enumerate() {
            if let Some(id) = id.as_str() {
                check(
                    id,
                    format!("/agents/defaults/subagents/allowAgents/{i}"),
                    "`agents.defaults.subagents.allowAgents`",
                );
            }
        }
    }
}
