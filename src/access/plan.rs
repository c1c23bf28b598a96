//! The plan the Access layer serves: the routing plan plus what it needs to let a message in
//! (the channel accounts: enabled, webhook secret, reply URL) and to deliver it (each agent's
//! runtime kind). Built from the config by the controller, swapped atomically on every apply.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};

use crate::config::Config;
use crate::config::model::{BindingType, Model, RuntimeKind, SecretRef};
use crate::ids::AccountKey;
use crate::routing::RoutingPlan;
use crate::routing::document::{PlanMeta, StoredAccount};

/// A channel account as the Access layer sees it.
#[derive(Clone, Debug)]
pub(crate) struct AccountAccess {
    pub enabled: bool,
    /// The resolved `webhookSecret` (redacted in `Debug`; exposed only to sign and verify), or
    /// why there is none.
    pub webhook_secret: Result<SecretString, String>,
    pub reply_url: Option<String>,
}

/// One routing plan generation, with everything a request needs from the config.
#[derive(Debug)]
pub(crate) struct AccessPlan {
    pub routing: RoutingPlan,
    pub generation: u64,
    pub content_hash: String,
    pub config_hash: String,
    pub loaded_at: String,
    /// By (normalized channel, normalized account id).
    pub accounts: HashMap<AccountKey, AccountAccess>,
    /// What runs each agent (absent: `none`).
    pub runtimes: HashMap<String, RuntimeKind>,
    /// Each agent's `model` (absent: none set), applied to its ACP sessions.
    pub models: HashMap<String, Model>,
    /// Each agent's `budgets` (absent: none set).
    pub budgets: HashMap<String, super::budget::BudgetLimits>,
    /// The session working directory of each `acp` binding that sets `acp.cwd`, resolved, by
    /// the binding's index in bindings.yaml.
    pub acp_cwds: HashMap<usize, PathBuf>,
    /// The accounts whose `webhookSecret` is referenced but unusable (unset, unreadable,
    /// empty): `channel/account: why`, for the operator. Their callers only hear that the
    /// account takes no messages.
    pub closed: Vec<String>,
    /// `session.resetTriggers` and `session.reset`.
    pub lifecycle: super::lifecycle::Lifecycle,
    /// The enabled accounts a built-in platform adapter (Slack, Telegram) serves with its
    /// credentials set: their adapter carries what the outbox holds for them. The controller
    /// fills it (`access serve` runs no adapters).
    pub adapters: std::collections::HashSet<AccountKey>,
    /// What each `acp` agent's system section is made of. The controller fills it (the
    /// Hub's part comes from its policy).
    pub systems: HashMap<String, std::sync::Arc<crate::sessions::system::SystemSpec>>,
    /// How many agents and bindings the plan holds.
    pub agents: usize,
    pub bindings: usize,
    /// The inbound policy of every account (policy.md). Empty for a plan loaded from a
    /// published file (`access serve`, which delivers nothing): nothing is gated there.
    pub policy: crate::policy::PolicyPlan,
}

/// Resolves a `webhookSecret` now (the value lives only in memory): a secret that is empty or
/// only whitespace (a file holding only a line break, a variable set to "") is refused, since
/// an HMAC with the empty key is one anybody can compute.
pub(crate) fn resolve_webhook_secret(secret: &SecretRef) -> Result<SecretString, String> {
    let value = secret.resolve().map_err(|e| e.to_string())?;
    let text = value.expose_secret();
    if !text.trim().is_empty() {
        return Ok(value);
    }
    let what = if text.is_empty() {
        "is empty"
    } else {
        "holds only whitespace"
    };
    Err(match secret {
        SecretRef::Env { id } => format!("environment variable `{id}` {what}"),
        SecretRef::File { path } => format!("secret file `{path}` {what}"),
    })
}

/// An `acp` binding's `acp.cwd`: `workspace` is the agent's workspace; `~/…` is under the home
/// directory; an absolute path is itself; a relative one is relative to the workspace.
pub(crate) fn session_cwd(cwd: &str, workspace: &Path, home: Option<&Path>) -> PathBuf {
    match cwd {
        "workspace" => workspace.to_path_buf(),
        _ => crate::config::paths::resolve(cwd, workspace, home),
    }
}

/// What the published routing plan says of itself.
pub(crate) struct Published<'a> {
    pub generation: u64,
    pub content_hash: &'a str,
    pub config_hash: &'a str,
    pub accounts: &'a [StoredAccount],
}

impl AccessPlan {
    /// Whether something can carry the outbox's messages to `account`: its platform adapter,
    /// or its reply sink (a `replyUrl` and a usable `webhookSecret`).
    pub(crate) fn has_carrier(&self, account: &AccountKey) -> bool {
        self.adapters.contains(account)
            || self
                .accounts
                .get(account)
                .is_some_and(|a| a.reply_url.is_some() && a.webhook_secret.is_ok())
    }

    /// The plan of `config`, whose routing is already compiled into `routing` and published as
    /// `published`.
    pub(crate) fn from_config(
        config: &Config,
        routing: RoutingPlan,
        published: Published<'_>,
    ) -> AccessPlan {
        let runtimes = config
            .agents
            .iter()
            .filter_map(|a| Some((a.id().to_string(), a.spec.runtime.as_ref()?.kind)))
            .collect();
        let models = config
            .agents
            .iter()
            .filter_map(|a| Some((a.id().to_string(), a.spec.model.clone()?)))
            .collect();
        let budgets = config
            .agents
            .iter()
            .filter_map(|a| {
                let limits = super::budget::BudgetLimits::of(a.spec.budgets.as_ref()?);
                Some((a.id().to_string(), limits))
            })
            .collect();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let acp_cwds = config
            .bindings
            .iter()
            .filter(|b| b.spec.kind == BindingType::Acp)
            .filter_map(|b| {
                let cwd = b.spec.acp.as_ref()?.cwd.as_deref()?;
                let agent = crate::ids::agent_id(&b.spec.agent_id);
                let agent = config.agents.iter().find(|a| a.id() == agent)?;
                Some((b.index, session_cwd(cwd, &agent.workspace, home.as_deref())))
            })
            .collect();
        let mut plan = AccessPlan::new(
            routing,
            published.accounts,
            runtimes,
            PlanMeta {
                format_version: String::new(),
                generation: published.generation,
                content_hash: published.content_hash.to_string(),
                config_hash: published.config_hash.to_string(),
            },
            (config.agents.len(), config.bindings.len()),
        );
        plan.models = models;
        plan.budgets = budgets;
        plan.acp_cwds = acp_cwds;
        plan.lifecycle = super::lifecycle::Lifecycle::from_config(&config.session);
        plan.policy = crate::policy::PolicyPlan::compile(config);
        plan
    }

    /// A plan from its parts; webhook secrets are resolved now.
    pub(crate) fn new(
        routing: RoutingPlan,
        accounts: &[StoredAccount],
        runtimes: HashMap<String, RuntimeKind>,
        meta: PlanMeta,
        (agents, bindings): (usize, usize),
    ) -> AccessPlan {
        let mut closed = Vec::new();
        let accounts = accounts
            .iter()
            .map(|a| {
                let field = format!(
                    "channels.{}.accounts.{}.webhookSecret",
                    a.channel, a.account_id
                );
                let webhook_secret = match &a.webhook_secret {
                    Some(r) => resolve_webhook_secret(r).map_err(|e| {
                        let account = AccountKey::new(&a.channel, &a.account_id).to_string();
                        let why = format!("`{field}`: {e}");
                        // Said once per plan, where the secret is resolved.
                        tracing::warn!(%account, %why, "this channel account takes no messages");
                        closed.push(format!("{account}: {why}"));
                        why
                    }),
                    None => Err(format!("`{field}` is not set")),
                };
                (
                    AccountKey::new(&a.channel, &a.account_id),
                    AccountAccess {
                        enabled: a.enabled,
                        webhook_secret,
                        reply_url: a.reply_url.clone(),
                    },
                )
            })
            .collect();
        AccessPlan {
            routing,
            generation: meta.generation,
            content_hash: meta.content_hash,
            config_hash: meta.config_hash,
            loaded_at: crate::clock::now(),
            accounts,
            runtimes,
            models: HashMap::new(),
            budgets: HashMap::new(),
            acp_cwds: HashMap::new(),
            adapters: Default::default(),
            systems: HashMap::new(),
            lifecycle: Default::default(),
            closed,
            agents,
            bindings,
            policy: crate::policy::PolicyPlan::default(),
        }
    }

    /// Whether a channel (normalized) has accounts declared in this plan.
    pub(crate) fn declares_channel(&self, channel: &str) -> bool {
        self.accounts.keys().any(|key| key.channel == channel)
    }

    pub(crate) fn runtime(&self, agent_id: &str) -> RuntimeKind {
        self.runtimes
            .get(agent_id)
            .copied()
            .unwrap_or(RuntimeKind::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_secret(dir: &std::path::Path, name: &str, text: &str) -> SecretRef {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        SecretRef::File {
            path: path.display().to_string(),
        }
    }

    #[test]
    fn an_empty_or_blank_webhook_secret_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text, why) in [
            ("empty", "", "is empty"),
            ("newline", "\n", "is empty"),
            ("crlf", "\r\n", "is empty"),
            ("blank", " \t \n", "holds only whitespace"),
        ] {
            let secret = file_secret(dir.path(), name, text);
            let error = resolve_webhook_secret(&secret).unwrap_err();
            assert!(error.ends_with(why), "{name}: {error}");
            assert!(error.contains(name), "{name}: names the file: {error}");
        }
    }

    #[test]
    fn a_webhook_secret_keeps_all_but_its_trailing_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let secret = file_secret(dir.path(), "s", " s3cret \n");
        assert_eq!(
            resolve_webhook_secret(&secret).unwrap().expose_secret(),
            " s3cret "
        );
    }

    #[test]
    fn an_account_with_an_unusable_secret_is_closed_and_says_why_to_the_operator() {
        let dir = tempfile::tempdir().unwrap();
        let account = |id: &str, secret: Option<SecretRef>| StoredAccount {
            channel: "telegram".into(),
            account_id: id.into(),
            enabled: true,
            webhook_secret: secret,
            reply_url: None,
        };
        let accounts = [
            account("empty", Some(file_secret(dir.path(), "e", "\n"))),
            account(
                "good",
                Some(file_secret(dir.path(), "g", "resolved-value\n")),
            ),
            account("unset", None),
        ];
        let plan = AccessPlan::new(
            RoutingPlan::default(),
            &accounts,
            HashMap::new(),
            PlanMeta {
                format_version: String::new(),
                generation: 1,
                content_hash: String::new(),
                config_hash: String::new(),
            },
            (0, 0),
        );
        let key = |id: &str| AccountKey::new("telegram", id);
        assert!(plan.accounts[&key("empty")].webhook_secret.is_err());
        assert_eq!(
            plan.accounts[&key("good")]
                .webhook_secret
                .as_ref()
                .map(ExposeSecret::expose_secret),
            Ok("resolved-value")
        );
        // An account without a webhookSecret takes no calls either, but it was written that
        // way: only unusable references are the operator's to hear about.
        assert!(plan.accounts[&key("unset")].webhook_secret.is_err());
        assert_eq!(plan.closed.len(), 1, "{:?}", plan.closed);
        let shown = format!("{plan:?}");
        assert!(
            !shown.contains("resolved-value"),
            "the resolved secret is shown: {shown}"
        );
        assert!(
            plan.closed[0].starts_with("telegram/empty: "),
            "{:?}",
            plan.closed
        );
        assert!(plan.closed[0].ends_with("is empty"), "{:?}", plan.closed);
    }
}
