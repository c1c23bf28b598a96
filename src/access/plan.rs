//! The plan the Access layer serves: the routing plan plus what it needs to let a message in
//! (the channel accounts: enabled, webhook secret, reply URL) and to deliver it (each agent's
//! runtime kind). Built from the config by the controller, swapped atomically on every apply.

use std::collections::HashMap;

use crate::config::Config;
use crate::config::model::{RuntimeKind, Secret, SecretRef};
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

impl AccessPlan {
    /// The plan of `config`, whose routing is already compiled into `routing`.
    pub fn from_config(
        config: &Config,
        routing: RoutingPlan,
        generation: u64,
        content_hash: String,
    ) -> AccessPlan {
        let mut accounts = HashMap::new();
        for channel in &config.channels {
            let channel_on = channel.spec.enabled != Some(false);
            for account in channel.accounts() {
                let field = format!(
                    "channels.{}.accounts.{}.webhookSecret",
                    channel.id, account.id
                );
                let webhook_secret = match account.spec.secrets.get("webhookSecret") {
                    Some(Secret::Ref(r)) => resolve_secret(r)
                        .map(String::into_bytes)
                        .map_err(|e| format!("`{field}`: {e}")),
                    Some(Secret::Inline(_)) => Err(format!("`{field}` is written inline")),
                    None => Err(format!("`{field}` is not set")),
                };
                accounts.insert(
                    (
                        normalize::channel(&channel.id).into_owned(),
                        account.normalized.clone(),
                    ),
                    AccountAccess {
                        enabled: channel_on && account.spec.enabled != Some(false),
                        webhook_secret,
                        reply_url: account.spec.reply_url.clone(),
                    },
                );
            }
        }
        let runtimes = config
            .agents
            .iter()
            .filter_map(|a| Some((a.id().to_string(), a.spec.runtime.as_ref()?.kind)))
            .collect();
        AccessPlan {
            routing,
            agents: config.agents.len(),
            bindings: config.bindings.len(),
            generation,
            content_hash,
            config_hash: config.sources.hash(),
            loaded_at: crate::state::now(),
            accounts,
            runtimes,
        }
    }

    pub fn runtime(&self, agent_id: &str) -> RuntimeKind {
        self.runtimes
            .get(agent_id)
            .copied()
            .unwrap_or(RuntimeKind::None)
    }
}
