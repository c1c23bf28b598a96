//! What the config asks for, in the shape the live state records: agents with their spec
//! hashes, resolved paths and bootstrap contents; channel accounts; bindings by identity; the
//! compiled routing plan.

use std::path::PathBuf;

use serde_json::Value;

use crate::config::model::{BindingSpec, BindingType, RuntimeKind};
use crate::config::{Config, FileKind};
use crate::routing::RoutingPlan;
use crate::routing::document::{PlanDocument, StoredAccount};
use crate::routing::scope::Scope;
use crate::state::{AccountRecord, BindingRecord};
use crate::{hash, workspace};

#[derive(Debug, Clone)]
pub struct DesiredAgent {
    pub id: String,
    pub spec: Value,
    pub spec_hash: String,
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    pub sessions_dir: PathBuf,
    pub protect: bool,
    pub skip_bootstrap: bool,
    /// Every bootstrap file's content, in [`workspace::FILES`] order.
    pub files: Vec<(&'static str, String)>,
    /// `(kind, hash of what the runtime is started from)` unless `runtime.kind` is `none`.
    pub runtime: Option<(RuntimeKind, String)>,
}

impl DesiredAgent {
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.as_str())
    }
}

/// A binding's place in bindings.yaml, for messages.
#[derive(Debug, Clone)]
pub struct DesiredBinding {
    pub record: BindingRecord,
    pub describe: String,
    pub line: u32,
}

#[derive(Debug, Clone)]
pub struct Desired {
    pub config_hash: String,
    pub agents: Vec<DesiredAgent>,
    pub accounts: Vec<AccountRecord>,
    pub bindings: Vec<DesiredBinding>,
    pub routing: RoutingPlan,
    /// The content hash of the routing plan as it would be published.
    pub routing_hash: String,
    /// The accounts section of the published plan (for the Access layer).
    pub routing_accounts: Vec<StoredAccount>,
    pub bindings_file: PathBuf,
}

impl Desired {
    /// Everything `plan` needs from a config that validated without errors.
    pub fn from_config(config: &Config) -> Desired {
        let agents = config
            .agents
            .iter()
            .map(|agent| {
                let mut spec = serde_json::to_value(&agent.spec).unwrap_or(Value::Null);
                strip_nulls(&mut spec);
                // The paths as resolved are part of what was applied: moving a workspace in the
                // config is a change even when the text of the spec looks the same.
                let spec_hash = hash::Hasher::default()
                    .part(spec.to_string().as_bytes())
                    .part(agent.workspace.as_os_str().as_encoded_bytes())
                    .part(agent.agent_dir.as_os_str().as_encoded_bytes())
                    .finish();
                let runtime = agent
                    .spec
                    .runtime
                    .as_ref()
                    .filter(|r| r.kind != RuntimeKind::None)
                    .map(|r| {
                        let text = serde_json::to_string(r).unwrap_or_default();
                        let h = hash::Hasher::default()
                            .part(text.as_bytes())
                            .part(agent.workspace.as_os_str().as_encoded_bytes())
                            .finish();
                        (r.kind, h)
                    });
                DesiredAgent {
                    id: agent.id().to_string(),
                    spec,
                    spec_hash,
                    workspace: agent.workspace.clone(),
                    agent_dir: agent.agent_dir.clone(),
                    sessions_dir: agent.sessions_dir.clone(),
                    protect: agent.spec.protect.unwrap_or(false),
                    skip_bootstrap: agent.spec.skip_bootstrap.unwrap_or(false),
                    files: workspace::FILES
                        .iter()
                        .map(|name| (*name, workspace::render(name, agent)))
                        .collect(),
                    runtime,
                }
            })
            .collect();

        let accounts = config
            .channels
            .iter()
            .flat_map(|channel| {
                channel.accounts().map(|account| {
                    let mut spec = serde_json::to_value(account.spec).unwrap_or(Value::Null);
                    strip_nulls(&mut spec);
                    if let Some(enabled) = channel.spec.enabled {
                        spec["channelEnabled"] = Value::Bool(enabled);
                    }
                    let hash = hash::of(spec.to_string().as_bytes());
                    AccountRecord {
                        channel: channel.id.clone(),
                        account: account.normalized.clone(),
                        spec,
                        hash,
                    }
                })
            })
            .collect();

        let source = config.sources.get(FileKind::Bindings);
        let root = source.and_then(|f| f.root.as_ref());
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let bindings = config
            .bindings
            .iter()
            .map(|b| {
                let base = binding_key(&b.spec);
                let n = seen.entry(base.clone()).or_default();
                *n += 1;
                let key = if *n == 1 { base } else { format!("{base}#{n}") };
                let mut spec = serde_json::to_value(&b.spec).unwrap_or(Value::Null);
                strip_nulls(&mut spec);
                DesiredBinding {
                    describe: describe_binding(&b.spec),
                    line: root
                        .and_then(|r| r.pointer(&b.pointer()))
                        .map_or(0, |n| n.span.start.line),
                    record: BindingRecord {
                        key,
                        agent_id: crate::routing::normalize::agent_id(&b.spec.agent_id)
                            .into_owned(),
                        spec,
                        position: b.index as u64,
                    },
                }
            })
            .collect();

        let mut desired = Desired {
            config_hash: config.sources.hash(),
            agents,
            accounts,
            bindings,
            routing: RoutingPlan::compile(config),
            routing_hash: String::new(),
            routing_accounts: crate::access::plan::stored_accounts(config),
            bindings_file: source
                .map_or_else(|| config.dir.join("bindings.yaml"), |f| f.path.clone()),
        };
        desired.routing_hash = desired.routing_document(0).content_hash;
        desired
    }

    /// The routing plan document to publish as `generation`: the compiled plan plus the
    /// accounts the Access layer needs.
    pub fn routing_document(&self, generation: u64) -> PlanDocument {
        let mut doc = self.routing.to_document(generation, &self.config_hash);
        doc.plan.accounts = self.routing_accounts.clone();
        // The file as an absolute path: `--config hub` and `--config /srv/hub` publish the same
        // plan (the hash would otherwise change with the spelling).
        if let Ok(path) = std::path::absolute(&self.bindings_file) {
            doc.plan.bindings_file = path.display().to_string();
        }
        doc.content_hash = doc.plan.hash();
        doc
    }
}

/// A binding's identity: its type and normalized match (the agent is what it maps to).
pub fn binding_key(spec: &BindingSpec) -> String {
    let scope = Scope::from_spec(&spec.matcher);
    let kind = match spec.kind {
        BindingType::Route => "route",
        BindingType::Acp => "acp",
    };
    let account = match &scope.account {
        crate::routing::scope::AccountPattern::Any => "*".to_string(),
        crate::routing::scope::AccountPattern::Exact(a) => a.clone(),
    };
    let peer = scope.peer.as_ref().map_or(String::new(), |p| {
        let class = p.kind.class().map_or(p.kind.as_str(), |c| c.as_str());
        format!("{class}:{}", p.id.as_deref().unwrap_or("*"))
    });
    serde_json::json!([
        kind,
        scope.channel,
        account,
        peer,
        scope.guild,
        scope.team,
        scope.roles
    ])
    .to_string()
}

/// `telegram:personal`, `discord guild 123 roles [456]`, `slack:default peer channel:C1`.
pub fn describe_binding(spec: &BindingSpec) -> String {
    let m = &spec.matcher;
    let mut out = m.channel.trim().to_lowercase();
    if let Some(account) = &m.account_id {
        out.push(':');
        out.push_str(account.trim());
    }
    if let Some(peer) = &m.peer {
        out.push_str(&format!(" peer {}:{}", peer.kind.trim(), peer.id.trim()));
    }
    if let Some(guild) = &m.guild_id {
        out.push_str(&format!(" guild {guild}"));
    }
    if let Some(team) = &m.team_id {
        out.push_str(&format!(" team {team}"));
    }
    if let Some(roles) = m.roles.as_ref().filter(|r| !r.is_empty()) {
        out.push_str(&format!(" roles [{}]", roles.join(", ")));
    }
    if spec.kind == BindingType::Acp {
        out.insert_str(0, "acp ");
    }
    out
}

/// Nulls are how serde writes unset options; leaving them out keeps stored specs and field
/// diffs about what the operator wrote.
pub fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
