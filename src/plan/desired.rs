//! What the config asks for, in the shape the live state records: agents with their spec
//! hashes, resolved paths and bootstrap contents; channel accounts; bindings by identity; the
//! compiled routing plan.

use std::path::PathBuf;

use serde_json::Value;

use crate::config::model::{BindingSpec, BindingType, RuntimeKind};
use crate::config::{Config, FileKind};
use crate::routing::document::PlanBody;
use crate::routing::scope::Scope;
use crate::routing::{IndexError, RoutingPlan};
use crate::state::{AccountRecord, BindingRecord, JsonText};
use crate::{hash, workspace};

#[derive(Debug, Clone)]
pub(crate) struct DesiredAgent {
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
    pub(crate) fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| c.as_str())
    }
}

/// A binding's place in bindings.yaml, for messages.
#[derive(Debug, Clone)]
pub(crate) struct DesiredBinding {
    pub record: BindingRecord,
    pub describe: String,
    pub line: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct Desired {
    pub config_hash: String,
    pub agents: Vec<DesiredAgent>,
    pub accounts: Vec<AccountRecord>,
    pub bindings: Vec<DesiredBinding>,
    pub routing: RoutingPlan,
    /// The routing plan as it is published (`plan` of routing-plan.json), built once.
    pub routing_body: PlanBody,
    /// Its content hash.
    pub routing_hash: String,
    /// `routing-plan.json` rendered ahead for a generation ([`Desired::routing_json`]).
    pub routing_document: Option<(u64, String)>,
}

impl Desired {
    /// Everything `plan` needs from a config that validated without errors. Refused only for
    /// bindings that outgrow the routing index.
    pub(crate) fn from_config(config: &Config) -> Result<Desired, IndexError> {
        Ok(Desired {
            agents: Desired::agents(config),
            ..Desired::without_agents(config)?
        })
    }

    /// The agents part of [`Desired::from_config`], which is what observing the world needs:
    /// the controller looks at the disk while it builds the rest.
    pub(crate) fn agents(config: &Config) -> Vec<DesiredAgent> {
        config
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
            .collect()
    }

    /// [`Desired::from_config`] with no agents.
    pub(crate) fn without_agents(config: &Config) -> Result<Desired, IndexError> {
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
        let mut seen: rustc_hash::FxHashMap<String, usize> =
            rustc_hash::FxHashMap::with_capacity_and_hasher(
                config.bindings.len(),
                Default::default(),
            );
        let bindings = config
            .bindings
            .iter()
            .map(|b| {
                let base = binding_key(&b.spec);
                let n = seen.entry(base.clone()).or_default();
                *n += 1;
                let key = if *n == 1 { base } else { format!("{base}#{n}") };
                DesiredBinding {
                    describe: describe_binding(&b.spec),
                    line: root
                        .and_then(|r| r.pointer(&b.pointer()))
                        .map_or(0, |n| n.span.start.line),
                    record: BindingRecord {
                        key,
                        agent_id: crate::ids::agent_id(&b.spec.agent_id).into_owned(),
                        // The binding types skip unset options, as `strip_nulls` would.
                        spec: JsonText::of(&b.spec),
                        position: b.index as u64,
                    },
                }
            })
            .collect();

        let routing = RoutingPlan::compile(config)?;
        // The published plan: the compiled one plus the accounts the Access layer needs.
        let mut routing_body = routing.to_body();
        routing_body.accounts = crate::routing::document::StoredAccount::all_of(config);
        // The file as an absolute path: `--config hub` and `--config /srv/hub` publish the same
        // plan (the hash would otherwise change with the spelling).
        let bindings_file =
            source.map_or_else(|| config.dir.join("bindings.yaml"), |f| f.path.clone());
        if let Ok(path) = std::path::absolute(&bindings_file) {
            routing_body.bindings_file = path.display().to_string();
        }
        let routing_hash = routing_body.hash();
        Ok(Desired {
            config_hash: config.sources.hash(),
            agents: Vec::new(),
            accounts,
            bindings,
            routing,
            routing_body,
            routing_hash,
            routing_document: None,
        })
    }

    /// `routing-plan.json` as published as `generation`: the one rendered ahead, if it was
    /// rendered for that generation.
    pub(crate) fn routing_json(&self, generation: u64) -> std::borrow::Cow<'_, str> {
        match &self.routing_document {
            Some((g, text)) if *g == generation => std::borrow::Cow::Borrowed(text),
            _ => std::borrow::Cow::Owned(self.render_routing(generation)),
        }
    }

    /// Renders `routing-plan.json` as `generation`.
    pub(crate) fn render_routing(&self, generation: u64) -> String {
        self.routing_body
            .document_json(generation, &self.routing_hash, &self.config_hash)
    }
}

/// A binding's identity: its type and normalized match (the agent is what it maps to).
pub(crate) fn binding_key(spec: &BindingSpec) -> String {
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
    // A tuple is written as the JSON array it is.
    serde_json::to_string(&(
        kind,
        &scope.channel,
        &account,
        &peer,
        &scope.guild,
        &scope.team,
        &scope.roles,
    ))
    .expect("strings always serialize")
}

/// `telegram:personal`, `discord guild 123 roles [456]`, `slack:default peer channel:C1`.
pub(crate) fn describe_binding(spec: &BindingSpec) -> String {
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
pub(crate) fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{AcpSpec, MatchSpec, PeerSpec, SessionOverride};

    /// A stored binding spec is what `strip_nulls` leaves of it, so specs stored by earlier
    /// builds compare equal as text.
    #[test]
    fn binding_specs_are_stored_without_nulls() {
        let bare = BindingSpec {
            kind: BindingType::Route,
            agent_id: "ops".into(),
            comment: None,
            matcher: MatchSpec {
                channel: "slack".into(),
                ..MatchSpec::default()
            },
            session: Some(SessionOverride::default()),
            acp: None,
        };
        let full = BindingSpec {
            kind: BindingType::Acp,
            comment: Some("c".into()),
            matcher: MatchSpec {
                channel: "slack".into(),
                account_id: Some("a".into()),
                peer: Some(PeerSpec {
                    kind: "direct".into(),
                    id: "u1".into(),
                }),
                guild_id: Some("g".into()),
                team_id: Some("t".into()),
                roles: Some(vec![]),
            },
            acp: Some(Box::new(AcpSpec {
                mode: Some("persistent".into()),
                label: None,
                cwd: Some("/w".into()),
            })),
            ..bare.clone()
        };
        for spec in [bare, full] {
            let mut value = serde_json::to_value(&spec).unwrap();
            strip_nulls(&mut value);
            assert_eq!(JsonText::of(&spec).as_str(), value.to_string());
        }
    }
}
