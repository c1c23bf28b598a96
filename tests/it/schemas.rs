//! The schemas themselves: valid draft 2020-12, every example passes, every schema-error
//! fixture fails.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn load_yaml(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    deepcli::config::yaml::parse(&text)
        .unwrap()
        .map_or(serde_json::Value::Null, |n| n.to_json())
}

fn schema(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join(format!("schema/{name}.schema.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn schemas_are_valid_draft_2020_12_with_descriptions() {
    for name in ["agents", "channels", "bindings"] {
        let s = schema(name);
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        jsonschema::meta::validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut missing = Vec::new();
        undocumented(&s, String::new(), &mut missing);
        assert!(
            missing.is_empty(),
            "{name}: properties without description: {missing:?}"
        );
    }
}

fn undocumented(node: &serde_json::Value, path: String, out: &mut Vec<String>) {
    if let Some(map) = node.as_object() {
        if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
            for (key, prop) in props {
                let is_schema = prop.is_object();
                if is_schema && prop.get("description").is_none() && prop.get("$ref").is_none() {
                    out.push(format!("{path}/{key}"));
                }
            }
        }
        for (key, value) in map {
            undocumented(value, format!("{path}/{key}"), out);
        }
    }
}

#[test]
fn every_example_file_passes_its_schema() {
    for example in ["quickstart", "multi-account-slack", "broken"] {
        for name in ["agents", "channels", "bindings"] {
            let file = root().join(format!("examples/{example}/{name}.yaml"));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                text.starts_with(&format!(
                    "# yaml-language-server: $schema=../../schema/{name}.schema.json"
                )),
                "{} lacks the modeline",
                file.display()
            );
            if example == "broken" {
                continue;
            }
            let validator = jsonschema::validator_for(&schema(name)).unwrap();
            let instance = load_yaml(&file);
            let errors: Vec<String> = validator
                .iter_errors(&instance)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", file.display());
        }
    }
}

#[test]
fn every_schema_error_fixture_fails_its_schema() {
    let dir = root().join("tests/fixtures/rules/schema/fail");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut failing = 0;
    for name in ["agents", "channels", "bindings"] {
        // Only the files the fixture names as broken; the others support them.
        if !expected.contains(&format!("{name}.yaml:")) {
            continue;
        }
        let file = dir.join(format!("{name}.yaml"));
        let validator = jsonschema::validator_for(&schema(name)).unwrap();
        assert!(
            !validator.is_valid(&load_yaml(&file)),
            "{} passes its schema",
            file.display()
        );
        failing += 1;
    }
    assert!(failing > 0);
}

// ---- every key acts, or says it does not ----

/// What deepcli does with a config key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acts {
    /// deepcli itself acts on it (the code that reads it).
    Enforced(&'static str),
    /// deepcli hands it to the agent's runtime (how).
    Passed(&'static str),
    /// Accepted and acted on by nothing: `validate` warns (`not-enforced`), for this reason.
    NotEnforced(&'static str),
    /// Never read, on purpose (why).
    Reserved(&'static str),
    /// An inbound policy key, at every level it is written (`channels.defaults`, a channel, an
    /// account, a group): `policy::settings` resolves it, the gate enforces it.
    Policy,
}

use Acts::*;

/// Every property of the three schemas. `agents.list[].X` stands for `agents.defaults.X` too
/// (the defaults take a subset of the agent's keys and mean the same); a secret reference
/// (`$defs/secretRef`) is one key, not three.
const KEYS: &[(&str, Acts)] = &[
    // agents.yaml
    ("agents", Enforced("config::resolve: the agents")),
    (
        "agents.defaults",
        Enforced("config::resolve: inherited by every agent that leaves a key unset"),
    ),
    (
        "agents.list",
        Enforced("config::resolve: the agents, plus an implicit main"),
    ),
    (
        "agents.list[].id",
        Enforced("config::resolve, routing, apply: the agent's id"),
    ),
    (
        "agents.list[].default",
        Enforced("config::resolve::default_agent: receives unmatched messages"),
    ),
    (
        "agents.list[].name",
        Passed(
            "workspace: IDENTITY.md (when identity.name is unset); also routing-plan.json and agents list",
        ),
    ),
    (
        "agents.list[].workspace",
        Enforced("config::paths, apply: the workspace directory"),
    ),
    (
        "agents.list[].agentDir",
        Enforced("config::paths, apply: the agent's directory, its runtime's HOME"),
    ),
    (
        "agents.list[].model",
        Passed(
            "access::model: set in each ACP session (session/set_config_option); not-enforced for other runtime kinds",
        ),
    ),
    (
        "agents.list[].model.primary",
        Passed("access::model: tried first"),
    ),
    (
        "agents.list[].model.fallbacks",
        Passed("access::model: tried in order after the primary"),
    ),
    (
        "agents.list[].skipBootstrap",
        Enforced("plan::desired: no bootstrap files"),
    ),
    (
        "agents.list[].bootstrapMaxChars",
        Enforced("sessions::system: each bootstrap file cut to it in the system section"),
    ),
    (
        "agents.list[].artifactMaxBytes",
        Enforced("tasks::artifacts: a larger file is not handed in"),
    ),
    (
        "agents.list[].artifactQuotaBytes",
        Enforced("tasks::store: a hand-in past a task's or run's total is not recorded"),
    ),
    (
        "agents.list[].runtime",
        Enforced("runtime: what the controller runs"),
    ),
    (
        "agents.list[].runtime.kind",
        Enforced("runtime, access: acp, process or nothing"),
    ),
    (
        "agents.list[].runtime.command",
        Passed("runtime::process: the program started; not-enforced with kind none"),
    ),
    (
        "agents.list[].runtime.env",
        Passed("runtime::process: the runtime's environment; not-enforced with kind none"),
    ),
    (
        "agents.list[].runtime.inheritEnv",
        Passed("runtime: these names of the controller's environment, as they are"),
    ),
    (
        "agents.list[].runtime.cwd",
        Passed("runtime::process: the runtime's working directory; not-enforced with kind none"),
    ),
    (
        "agents.list[].runtime.url",
        Enforced("runtime::a2a: the remote's endpoint; its card is read and checked against it"),
    ),
    (
        "agents.list[].runtime.token",
        Enforced("runtime::a2a: the bearer token sent to the remote agent"),
    ),
    (
        "agents.list[].runtime.cardKey",
        Enforced("runtime::a2a: the remote's card must carry a signature that verifies with it"),
    ),
    (
        "agents.list[].tools",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].tools.profile",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].tools.allow",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].tools.deny",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].tools.elevated",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].tools.elevated.enabled",
        NotEnforced("deepcli passes no tool policy to a runtime"),
    ),
    (
        "agents.list[].subagents",
        Enforced("hub::policy: what the agent may spawn through sessions_spawn"),
    ),
    (
        "agents.list[].subagents.allowAgents",
        Enforced("hub::policy: which other agents sessions_spawn may run children on"),
    ),
    (
        "agents.list[].subagents.maxSpawnDepth",
        Enforced("hub: depth_exceeded; a session at the limit gets no sessions_spawn"),
    ),
    (
        "agents.list[].subagents.maxChildrenPerAgent",
        Enforced("hub: too_many_children, per requester session"),
    ),
    (
        "agents.list[].subagents.maxConcurrent",
        Enforced("hub: budget_exceeded (the defaults': hub-wide; an agent's: its own runs)"),
    ),
    (
        "agents.list[].subagents.runTimeoutSeconds",
        Enforced("hub: a child's run timeout when sessions_spawn names none"),
    ),
    (
        "agents.list[].subagents.keptIdleSeconds",
        Enforced("hub: an idle kept child is closed and its token revoked"),
    ),
    (
        "agents.list[].subagents.tools",
        Enforced("hub::policy: the Hub tools a spawned session keeps (tool_denied)"),
    ),
    (
        "agents.list[].subagents.tools.allow",
        Enforced("hub::policy: only these tools for a spawned session"),
    ),
    (
        "agents.list[].subagents.tools.alsoAllow",
        Enforced("hub::policy: tools given back despite the default denials"),
    ),
    (
        "agents.list[].subagents.tools.deny",
        Enforced("hub::policy: tools taken away besides the default denials"),
    ),
    (
        "agents.list[].budgets",
        Enforced(
            "access::budget: checked before every turn, and by the hub before a send or spawn",
        ),
    ),
    (
        "agents.list[].budgets.turnsPerHour",
        Enforced(
            "access::budget: turns in the last hour; inbound 429 retryAfter, hub budget_exceeded",
        ),
    ),
    (
        "agents.list[].budgets.concurrentTurns",
        Enforced("access::budget: turns running at once"),
    ),
    (
        "agents.list[].budgets.turnSeconds",
        Enforced("access: a longer turn is cancelled with session/cancel"),
    ),
    (
        "agents.list[].budgets.spawnsPerHour",
        Enforced("hub: sessions_spawn calls in the last hour (budget_exceeded)"),
    ),
    (
        "agents.list[].budgets.tokensPerDay",
        Enforced(
            "access::budget: tokens the runtime reports; unknown otherwise (usage-budget-unenforceable)",
        ),
    ),
    (
        "agents.list[].budgets.costPerDayUsd",
        Enforced(
            "access::budget: USD cost the runtime reports; unknown otherwise (usage-budget-unenforceable)",
        ),
    ),
    (
        "agents.list[].budgets.loopTurns",
        Enforced("hub::loops: a send past it waits as a paused run for the operator"),
    ),
    (
        "agents.list[].budgets.loopWindowSeconds",
        Enforced("hub::loops: the window loopTurns counts in"),
    ),
    (
        "agents.list[].budgets.treeTurns",
        Enforced("hub::loops: a send past it waits as a paused run for the operator"),
    ),
    (
        "agents.list[].budgets.replyBytes",
        Enforced("access::cap: a longer reply is cut with a note"),
    ),
    (
        "agents.list[].budgets.contextBytes",
        Enforced("access::cap: the newest earlier conversation that fits is given"),
    ),
    (
        "agents.list[].sandbox",
        Enforced(
            "sandbox: what holds the runtime and everything it starts (isolation.md); not-enforced with kind none or a2a",
        ),
    ),
    (
        "agents.list[].sandbox.mode",
        Enforced("sandbox: all or off (sandbox-off); non-main is not-enforced, acts as all"),
    ),
    (
        "agents.list[].sandbox.scope",
        Enforced("sandbox: one per agent's runtime (agent); session and shared are not-enforced"),
    ),
    (
        "agents.list[].sandbox.backend",
        Enforced(
            "sandbox: auto, bwrap or landlock; the rest are refused (sandbox-backend-unbuilt)",
        ),
    ),
    (
        "agents.list[].sandbox.workspaceAccess",
        Enforced("sandbox: the workspace rw, ro, or a private scratch directory"),
    ),
    (
        "agents.list[].sandbox.network",
        Enforced("sandbox: host, none, or allowlist through the egress proxy"),
    ),
    (
        "agents.list[].sandbox.allowedDomains",
        Enforced("sandbox: the egress proxy's allowlist; not-enforced without network: allowlist"),
    ),
    (
        "agents.list[].sandbox.binds",
        Enforced(
            "sandbox: extra host paths; those that reach hidden paths are refused (sandbox-bind)",
        ),
    ),
    (
        "agents.list[].sandbox.binds[].path",
        Enforced("sandbox: the bound host path"),
    ),
    (
        "agents.list[].sandbox.binds[].mode",
        Enforced("sandbox: ro or rw"),
    ),
    (
        "agents.list[].sandbox.sessionToolsVisibility",
        Enforced("hub: a sandboxed caller sees at most its tree unless this says all"),
    ),
    ("agents.list[].heartbeat", Enforced("controller::heartbeat")),
    (
        "agents.list[].heartbeat.every",
        Enforced(
            "controller::heartbeat: the cadence of the main session's heartbeat prompt (acp runtimes; not-enforced otherwise)",
        ),
    ),
    (
        "agents.list[].heartbeat.target",
        NotEnforced("a heartbeat's answer always goes to the agent's last external route"),
    ),
    (
        "agents.list[].groupChat",
        Enforced("policy::settings: the agent's mention patterns"),
    ),
    (
        "agents.list[].groupChat.mentionPatterns",
        Enforced("policy::mention: what counts as a mention of the agent"),
    ),
    (
        "agents.list[].identity",
        Passed("workspace: IDENTITY.md in the agent's workspace"),
    ),
    (
        "agents.list[].identity.name",
        Passed("workspace: IDENTITY.md"),
    ),
    (
        "agents.list[].identity.emoji",
        Passed("workspace: IDENTITY.md"),
    ),
    (
        "agents.list[].identity.theme",
        Passed("workspace: IDENTITY.md"),
    ),
    (
        "agents.list[].identity.avatar",
        Passed("workspace: IDENTITY.md"),
    ),
    (
        "agents.list[].identity.description",
        Enforced("hub: agents_list's description"),
    ),
    (
        "agents.list[].identity.whenToUse",
        Enforced("hub: agents_list's whenToUse"),
    ),
    (
        "agents.list[].permissions",
        Enforced(
            "approvals: what the runtime's permission requests and management requests get (acp runtimes; not-enforced otherwise)",
        ),
    ),
    (
        "agents.list[].permissions.mode",
        Enforced("approvals::policy: ask, approve-reads, approve-all, deny-all"),
    ),
    (
        "agents.list[].permissions.timeoutSeconds",
        Enforced("approvals: a pending approval expires, denied, after it"),
    ),
    (
        "agents.list[].permissions.approvers",
        Enforced("approvals: who may answer /approve and /deny from a chat"),
    ),
    (
        "agents.list[].permissions.route",
        Enforced(
            "approvals: where a pending approval is announced; origin without a conversation denies",
        ),
    ),
    (
        "agents.list[].protect",
        Enforced("plan::diff: deleting the agent needs --allow-destroy"),
    ),
    ("tools", Enforced("config: holds agentToAgent and sessions")),
    (
        "tools.agentToAgent",
        Enforced("hub::policy: agent-to-agent messaging"),
    ),
    (
        "tools.agentToAgent.enabled",
        Enforced("hub::policy: agent_to_agent_disabled, on every call and at delivery"),
    ),
    (
        "tools.agentToAgent.allow",
        Enforced("hub::policy: agent_to_agent_not_allowed (validate checks the names)"),
    ),
    (
        "tools.sessions",
        Enforced("hub: what the session tools may see"),
    ),
    (
        "tools.sessions.visibility",
        Enforced("hub: visibility_restricted (self, tree, agent, all)"),
    ),
    (
        "state",
        Enforced("state::retention through the controller and `state prune`"),
    ),
    (
        "state.retention",
        Enforced("state::retention: the controller prunes every hour; `deepcli state prune`"),
    ),
    (
        "state.retention.transcripts",
        Enforced("state::retention: transcript rows"),
    ),
    (
        "state.retention.transcripts.days",
        Enforced("state::retention: transcript rows older than it"),
    ),
    (
        "state.retention.transcripts.keepPerSession",
        Enforced("state::retention::keep_newest: the newest rows of each session"),
    ),
    (
        "state.retention.deliveries",
        Enforced("state::retention: the idempotency records"),
    ),
    (
        "state.retention.deliveries.days",
        Enforced("state::retention: deliveries older than it (7 at least, by the schema)"),
    ),
    (
        "state.retention.runs",
        Enforced("state::retention: Hub runs that ended, their events"),
    ),
    (
        "state.retention.runs.days",
        Enforced("state::retention: by finished_at"),
    ),
    (
        "state.retention.approvals",
        Enforced("state::retention: approvals no longer pending, their events"),
    ),
    (
        "state.retention.approvals.days",
        Enforced("state::retention: by decided_at"),
    ),
    (
        "state.retention.audit",
        Enforced("state::retention: budget events, cancels and loop pauses that ended"),
    ),
    (
        "state.retention.audit.days",
        Enforced("state::retention: 2 at least, by the schema"),
    ),
    (
        "state.retention.deadLetters",
        Enforced("state::retention: dead letters, the outbox's posted and dead rows"),
    ),
    (
        "state.retention.deadLetters.days",
        Enforced("state::retention: by at, done_at"),
    ),
    (
        "state.retention.a2aTasks",
        Enforced("state::retention: A2A tasks in a final state, their runs"),
    ),
    (
        "state.retention.a2aTasks.days",
        Enforced("state::retention: by updated_at"),
    ),
    ("session", Enforced("routing::session")),
    (
        "session.dmScope",
        Enforced("routing::session: direct-message session keys"),
    ),
    (
        "session.groupScope",
        Enforced("routing::session: group session keys"),
    ),
    (
        "session.mainKey",
        Enforced("routing::session: the main session's key (heartbeats prompt it)"),
    ),
    (
        "session.identityLinks",
        Enforced("routing::session: one person's ids share a session"),
    ),
    (
        "session.maxPingPongTurns",
        Enforced("hub::runs: the reply-back loop's turns after sessions_send"),
    ),
    (
        "session.resetTriggers",
        Enforced("access::session_reset: the chat commands that start a new session"),
    ),
    (
        "session.reset",
        Enforced("access::session_reset: a stale session starts over at its next message"),
    ),
    (
        "session.reset.mode",
        Enforced("access::session_reset: daily, idle or none"),
    ),
    (
        "session.reset.atHour",
        Enforced("access::session_reset: the daily reset's hour, local time"),
    ),
    (
        "session.reset.idleMinutes",
        Enforced("access::session_reset: the idle reset's minutes"),
    ),
    // channels.yaml
    (
        "channels",
        Enforced("routing::document, access::plan: the channels"),
    ),
    (
        "channels.*.enabled",
        Enforced("access::plan: a disabled channel's accounts answer 403"),
    ),
    (
        "channels.*.defaultAccount",
        Enforced("routing: the account bindings without accountId mean"),
    ),
    (
        "channels.*.accounts",
        Enforced("routing, access::plan: the accounts"),
    ),
    (
        "channels.*.accounts.*.name",
        Enforced("manage::channels: shown by channels list"),
    ),
    (
        "channels.*.accounts.*.enabled",
        Enforced("access::plan: a disabled account answers 403"),
    ),
    (
        "channels.*.accounts.*.botToken",
        Enforced(
            "adapters: the Slack and Telegram adapters call the platform with it (auth.test, getMe, chat.postMessage, sendMessage); channels status resolves and checks it",
        ),
    ),
    (
        "channels.*.accounts.*.appToken",
        Enforced("adapters::slack: apps.connections.open for Socket Mode"),
    ),
    (
        "channels.*.accounts.*.userToken",
        Enforced(
            "manage::channels: resolved and checked by channels status (the platform adapter uses it)",
        ),
    ),
    (
        "channels.*.accounts.*.signingSecret",
        Enforced("adapters::slack: verifies POST /v1/slack/<account>/events (v0 signature)"),
    ),
    (
        "channels.*.accounts.*.webhookSecret",
        Enforced(
            "access: authenticates POST /v1/inbound, signs the reply sink's calls; adapters::telegram: setWebhook's secret_token, checked on POST /v1/telegram/<account>/webhook",
        ),
    ),
    (
        "channels.*.accounts.*.mode",
        Enforced("adapters: the transport of the account's platform adapter, or none (bridge)"),
    ),
    (
        "channels.*.accounts.*.apiBase",
        Enforced("adapters: the platform API every call of the adapter goes to"),
    ),
    (
        "channels.*.accounts.*.webhookUrl",
        Enforced("adapters::telegram: registered with setWebhook in webhook mode"),
    ),
    (
        "channels.*.accounts.*.replyToMode",
        Enforced("adapters::slack: whether a reply starts a thread"),
    ),
    (
        "channels.*.accounts.*.maxReplyMessages",
        Enforced("adapters::outbound: the pieces of one reply; the last says the rest was cut"),
    ),
    (
        "channels.*.accounts.*.discussion",
        Enforced("adapters::slack, adapters::discord: discussions per thread (adapters.md)"),
    ),
    (
        "channels.*.accounts.*.discussion.maxRounds",
        Enforced("adapters::slack: bot replies per thread before bot messages are held"),
    ),
    (
        "channels.*.accounts.*.discussion.closeMarker",
        Enforced("adapters::slack: the text that closes a thread's discussion"),
    ),
    (
        "channels.*.accounts.*.discussion.stallRounds",
        Enforced("adapters::slack: repeated replies that pause a thread's discussion"),
    ),
    (
        "channels.*.accounts.*.replyUrl",
        Enforced("access::reply: where replies and heartbeat answers are POSTed"),
    ),
    (
        "channels.*.accounts.*.token",
        Enforced(
            "adapters::discord: the bot token of the Gateway's IDENTIFY and every REST call; channels status resolves and checks it",
        ),
    ),
    (
        "channels.*.accounts.*.applicationId",
        Enforced(
            "adapters::discord: the application whose interactions are answered (the follow-up webhook)",
        ),
    ),
    (
        "channels.*.accounts.*.password",
        Enforced(
            "manage::channels: resolved and checked by channels status (the platform adapter uses it)",
        ),
    ),
    (
        "channels.*.accounts.*.apiKey",
        Enforced(
            "manage::channels: resolved and checked by channels status (the platform adapter uses it)",
        ),
    ),
    (
        "channels.*.accounts.*.clientSecret",
        Enforced(
            "manage::channels: resolved and checked by channels status (the platform adapter uses it)",
        ),
    ),
    (
        "channels.*.guilds",
        Enforced("policy::settings: Discord guilds, listed and overriding the account's policy"),
    ),
    (
        "channels.*.guilds.*.users",
        Enforced("policy::settings: the guild's groupAllowFrom, by user id"),
    ),
    (
        "channels.*.guilds.*.roles",
        Enforced("policy::settings: the guild's groupAllowFrom, by the member's roles"),
    ),
    (
        "channels.*.guilds.*.channels",
        Enforced("policy::settings: the guild's channels, listed and overriding the guild's"),
    ),
    (
        "channels.*.guilds.*.channels.*.enabled",
        Enforced("policy::decide: a channel switched off is group-not-allowed"),
    ),
    (
        "channels.*.guilds.*.channels.*.users",
        Enforced("policy::settings: the channel's groupAllowFrom, by user id"),
    ),
    (
        "channels.*.guilds.*.channels.*.roles",
        Enforced("policy::settings: the channel's groupAllowFrom, by the member's roles"),
    ),
    (
        "channels.*.accounts.*.guilds",
        Enforced("policy::settings: Discord guilds, listed and overriding the account's policy"),
    ),
    (
        "channels.*.accounts.*.guilds.*.users",
        Enforced("policy::settings: the guild's groupAllowFrom, by user id"),
    ),
    (
        "channels.*.accounts.*.guilds.*.roles",
        Enforced("policy::settings: the guild's groupAllowFrom, by the member's roles"),
    ),
    (
        "channels.*.accounts.*.guilds.*.channels",
        Enforced("policy::settings: the guild's channels, listed and overriding the guild's"),
    ),
    (
        "channels.*.accounts.*.guilds.*.channels.*.enabled",
        Enforced("policy::decide: a channel switched off is group-not-allowed"),
    ),
    (
        "channels.*.accounts.*.guilds.*.channels.*.users",
        Enforced("policy::settings: the channel's groupAllowFrom, by user id"),
    ),
    (
        "channels.*.accounts.*.guilds.*.channels.*.roles",
        Enforced("policy::settings: the channel's groupAllowFrom, by the member's roles"),
    ),
    (
        "channels.defaults",
        Enforced("policy::settings: the inbound policy's lowest level"),
    ),
    ("a2a", Enforced("a2a: the hub as an A2A server")),
    (
        "a2a.expose",
        Enforced("a2a::A2aPlan: the agents with a card and a JSON-RPC endpoint"),
    ),
    ("a2a.peers", Enforced("a2a::A2a::admit: who may call")),
    (
        "a2a.peers.*.token",
        Enforced("a2a::A2a::admit: the peer's bearer token, kept as its SHA-256"),
    ),
    (
        "a2a.peers.*.allowAgents",
        Enforced("a2a::A2a::admit: the exposed agents the peer may reach (403 otherwise)"),
    ),
    (
        "a2a.peers.*.requestsPerMinute",
        Enforced("a2a::A2a::admit: the peer's token bucket (429 beyond)"),
    ),
    (
        "a2a.peers.*.maxStreams",
        Enforced("a2a::streams: the peer's open streams (429 beyond)"),
    ),
    (
        "a2a.maxStreams",
        Enforced("a2a::streams: all peers' open streams (429 beyond)"),
    ),
    (
        "a2a.peers.*.maxPushConfigs",
        Enforced("a2a::A2a::add_push: the peer's push configs on unfinished tasks (-32602 beyond)"),
    ),
    (
        "a2a.push",
        Enforced("a2a::push: where push notifications may go"),
    ),
    (
        "a2a.push.allowPrivateTargets",
        Enforced("a2a::push::check: non-public and plain-http webhooks taken (refused otherwise)"),
    ),
    ("dmPolicy", Policy),
    ("allowFrom", Policy),
    ("groupPolicy", Policy),
    ("groups", Policy),
    ("groupAllowFrom", Policy),
    ("requireMention", Policy),
    ("mentionPatterns", Policy),
    ("implicitMentions", Policy),
    ("requireExplicitMention", Policy),
    ("allowBots", Policy),
    ("botUserId", Policy),
    ("historyLimit", Policy),
    ("botLoopProtection", Policy),
    // bindings.yaml
    ("bindings", Enforced("routing::plan: the bindings")),
    (
        "bindings[].type",
        Enforced("routing::plan: route tiers or an acp binding"),
    ),
    ("bindings[].agentId", Enforced("routing: the agent")),
    ("bindings[].comment", Reserved("a note for humans")),
    ("bindings[].match", Enforced("routing::scope: the match")),
    ("bindings[].match.channel", Enforced("routing::scope")),
    ("bindings[].match.accountId", Enforced("routing::scope")),
    ("bindings[].match.peer", Enforced("routing::scope")),
    ("bindings[].match.peer.kind", Enforced("routing::scope")),
    ("bindings[].match.peer.id", Enforced("routing::scope")),
    ("bindings[].match.guildId", Enforced("routing::scope")),
    ("bindings[].match.teamId", Enforced("routing::scope")),
    ("bindings[].match.roles", Enforced("routing::scope")),
    (
        "bindings[].session",
        Enforced("routing::session: per-binding scope"),
    ),
    ("bindings[].session.dmScope", Enforced("routing::session")),
    (
        "bindings[].session.groupScope",
        Enforced("routing::session"),
    ),
    (
        "bindings[].acp",
        Enforced(
            "access: the acp binding's sessions (not-enforced on a route binding or a non-acp agent)",
        ),
    ),
    (
        "bindings[].acp.mode",
        Enforced("access: oneshot opens and closes a session per message"),
    ),
    (
        "bindings[].acp.label",
        Enforced("access: names the session in responses and the transcript"),
    ),
    (
        "bindings[].acp.cwd",
        Passed("access: the cwd of the binding's ACP sessions"),
    ),
];

/// Every property path of `schema` in the table's terms.
fn properties(schema: &serde_json::Value) -> std::collections::BTreeSet<String> {
    fn walk(
        node: &serde_json::Value,
        path: &str,
        defs: &serde_json::Value,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        let Some(map) = node.as_object() else { return };
        if let Some(reference) = map.get("$ref").and_then(|r| r.as_str()) {
            let name = reference.rsplit('/').next().unwrap();
            // A secret reference is one value, not three keys.
            if name != "secretRef" {
                walk(&defs[name], path, defs, out);
            }
        }
        if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
            for (key, prop) in props {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                out.insert(child.clone());
                walk(prop, &child, defs, out);
            }
        }
        if let Some(more) = map.get("additionalProperties").filter(|a| a.is_object()) {
            walk(more, &format!("{path}.*"), defs, out);
        }
        if let Some(items) = map.get("items") {
            walk(items, &format!("{path}[]"), defs, out);
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for sub in map
                .get(key)
                .and_then(|s| s.as_array())
                .into_iter()
                .flatten()
            {
                walk(sub, path, defs, out);
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(schema, "", &schema["$defs"], &mut out);
    // The defaults mean what the agent's keys mean.
    out.into_iter()
        .map(|p| p.replacen("agents.defaults.", "agents.list[].", 1))
        .collect()
}

/// An inbound policy key: a channels.yaml path with a policy key's name in it (at the
/// account, the channel or a group: the policy module decides where).
fn policy_key(path: &str) -> bool {
    path.starts_with("channels.")
        && path.split(['.', '[']).any(|part| {
            KEYS.iter()
                .any(|(key, acts)| *acts == Policy && *key == part.trim_end_matches(']'))
        })
}

#[test]
fn every_schema_key_is_read_by_code_or_listed_as_not_enforced() {
    let mut in_schemas = std::collections::BTreeSet::new();
    for name in ["agents", "channels", "bindings"] {
        in_schemas.extend(properties(&schema(name)));
    }
    let listed = |path: &str| KEYS.iter().any(|(key, _)| *key == path);
    let missing: Vec<&String> = in_schemas
        .iter()
        .filter(|p| !listed(p) && !policy_key(p))
        .collect();
    let gone: Vec<&str> = KEYS
        .iter()
        .filter(|(key, acts)| match acts {
            Policy => !in_schemas
                .iter()
                .any(|p| policy_key(p) && p.ends_with(&format!(".{key}"))),
            _ => !in_schemas.contains(*key),
        })
        .map(|(key, _)| *key)
        .collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "schema keys that no row of KEYS lists (read them, or list them as not enforced with a \
         `not-enforced` warning): {missing:#?}\nrows of KEYS that no schema has: {gone:#?}"
    );
}

#[test]
fn every_key_that_is_not_enforced_is_one_validate_warns_about() {
    let warned: Vec<&str> = deepcli::validate::not_enforced::UNENFORCED
        .iter()
        .map(|u| u.key)
        .collect();
    // A key is warned about when it, or the key it sits in, is.
    let covered = |key: &str| {
        warned
            .iter()
            .any(|w| key == *w || key.starts_with(&format!("{w}.")))
    };
    for (key, acts) in KEYS {
        assert_eq!(
            matches!(acts, NotEnforced(_)),
            covered(key),
            "`{key}` is {acts:?} in KEYS, but validate's `not-enforced` list {} it",
            if covered(key) { "has" } else { "lacks" }
        );
    }
    for w in &warned {
        assert!(
            KEYS.iter().any(|(key, _)| key == w),
            "validate warns about `{w}`, which KEYS does not list"
        );
    }
}

/// docs/config.md, "What each key does": every key with what deepcli does with it, as KEYS
/// says.
#[test]
fn config_md_says_what_each_key_does() {
    let text = std::fs::read_to_string(root().join("docs/config.md")).unwrap();
    let start = text
        .find("\n## What each key does\n")
        .expect("docs/config.md has a `## What each key does` section");
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut rows = std::collections::BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let key = cells[0].trim_start_matches("| ").trim_matches('`');
        rows.insert(
            key.to_string(),
            cells.get(1).copied().unwrap_or("").to_string(),
        );
    }
    let mut wrong = Vec::new();
    for (key, acts) in KEYS {
        let want = match acts {
            // The policy module documents its keys (the ones the schema has now are listed).
            Policy => continue,
            Enforced(_) => "enforced by deepcli",
            Passed(_) => "passed to the runtime",
            NotEnforced(_) => "not enforced",
            Reserved(_) => "not read",
        };
        match rows.get(*key) {
            Some(said) if said.starts_with(want) => {}
            Some(said) => wrong.push(format!("`{key}`: says `{said}`, KEYS says {acts:?}")),
            None => wrong.push(format!("`{key}`: no row")),
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/config.md, What each key does:\n{}",
        wrong.join("\n")
    );
}
