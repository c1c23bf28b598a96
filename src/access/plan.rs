//! The plan the Access layer serves: the routing plan plus what it needs to let a message in
//! (the channel accounts: enabled, webhook secret, reply URL) and to deliver it (each agent's
//! runtime kind). Built from the config by the controller, swapped atomically on every apply.

use std::collections::HashMap;

use crate::config::Config;
use crate::config::model::{RuntimeKind, Secret, SecretRef};
use crate::routing::document::{PlanMeta, StoredAccount};
use crate::routing::{RoutingPlan, normalize};

/// A channel account as the Access layer sees it.
#[derive(Clone)]
pub struct AccountAccess {
    pub enabled: bool,
    /// The resolved `webhookSecret`, or why there is none.
    pub webhook_secret: Result<Vec<u8>, String>,
    pub reply_url: Option<String>,
}

impl std::fmt::Debug for AccountAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountAccess")
            .field("enabled", &self.enabled)
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "…"))
            .field("reply_url", &self.reply_url)
            .finish()
    }
}

/// One routing plan generation, with everything a request needs from the config.
#[derive(Debug)]
pub struct AccessPlan {
    pub routing: RoutingPlan,
    pub generation: u64,
    pub content_hash: String,
    pub config_hash: String,
    pub loaded_at: String,
    /// By (normalized channel, normalized account id).
    pub accounts: HashMap<(String, String), AccountAccess>,
    /// What runs each agent (absent: `none`).
    pub runtimes: HashMap<String, RuntimeKind>,
    /// How many agents and bindings the plan holds.
    pub agents: usize,
    pub bindings: usize,
}

/// Resolves a secret reference now; the value lives only in memory.
pub fn resolve_secret(secret: &SecretRef) -> Result<String, String> {
    match secret {
        SecretRef::Env { id } => {
            std::env::var(id).map_err(|_| format!("environment variable `{id}` is not set"))
        }
        SecretRef::File { path } => std::fs::read_to_string(path)
            .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
            .map_err(|e| format!("cannot read secret file `{path}`: {e}")),
    }
}

/// The accounts section of the routing plan document: every declared channel account, with
/// its webhook secret as a reference.
pub fn stored_accounts(config: &Config) -> Vec<StoredAccount> {
    let mut out = Vec::new();
    for channel in &config.channels {
        let channel_on = channel.spec.enabled != Some(false);
        for account in channel.accounts() {
            out.push(StoredAccount {
                channel: normalize::channel(&channel.id).into_owned(),
                account_id: account.normalized.clone(),
                enabled: channel_on && account.spec.enabled != Some(false),
                webhook_secret: match account.spec.secrets.get("webhookSecret") {
                    Some(Secret::Ref(r)) => Some(r.clone()),
                    _ => None,
                },
                reply_url: account.spec.reply_url.clone(),
            });
        }
    }
    out
}

/// What the published routing plan says of itself.
pub struct Published<'a> {
    pub generation: u64,
    pub content_hash: &'a str,
    pub config_hash: &'a str,
    pub accounts: &'a [StoredAccount],
}

impl AccessPlan {
    /// The plan of `config`, whose routing is already compiled into `routing` and published as
    /// `published`.
    pub fn from_config(
        config: &Config,
        routing: RoutingPlan,
        published: Published<'_>,
    ) -> AccessPlan {
        let runtimes = config
            .agents
            .iter()
            .filter_map(|a| Some((a.id().to_string(), a.spec.runtime.as_ref()?.kind)))
            .collect();
        AccessPlan::new(
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
        )
    }

    /// A plan from its parts; webhook secrets are resolved now.
    pub fn new(
        routing: RoutingPlan,
        accounts: &[StoredAccount],
        runtimes: HashMap<String, RuntimeKind>,
        meta: PlanMeta,
        (agents, bindings): (usize, usize),
    ) -> AccessPlan {
        let accounts = accounts
            .iter()
            .map(|a| {
                let field = format!(
                    "channels.{}.accounts.{}.webhookSecret",
                    a.channel, a.account_id
                );
                let webhook_secret = match &a.webhook_secret {
                    Some(r) => resolve_secret(r)
                        .map(String::into_bytes)
                        .map_err(|e| format!("`{field}`: {e}")),
                    None => Err(format!("`{field}` is not set")),
                };
                (
                    (a.channel.clone(), a.account_id.clone()),
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
            loaded_at: crate::state::now(),
            accounts,
            runtimes,
            agents,
            bindings,
        }
    }

    /// Whether a channel (normalized) has accounts declared in this plan.
    pub fn declares_channel(&self, channel: &str) -> bool {
        self.accounts.keys().any(|(c, _)| c == channel)
    }

    pub fn runtime(&self, agent_id: &str) -> RuntimeKind {
        self.runtimes
            .get(agent_id)
            .copied()
            .unwrap_or(RuntimeKind::None)
    }
}
