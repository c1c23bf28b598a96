//! `routing-plan.json`: a compiled plan written out so that a standalone Access process can
//! serve it without the YAML (reconcile.md, state directory).
//!
//! ```json
//! {"formatVersion": "2.0", "generation": 8, "contentHash": "sha256:…",
//!  "configHash": "sha256:…", "plan": {"defaultAgent": …, "agents": […], "session": {…},
//!  "bindingsFile": "bindings.yaml", "bindings": […], "acp": […]}}
//! ```
//!
//! Format 1 spelled the four keys around `plan` in snake_case (`format_version`,
//! `content_hash`, `config_hash`); 2 spells them in camelCase like every other JSON deepcli
//! writes. The `plan` object, and so the content hash, is the same in both; both are read.
//!
//! Bindings are stored in index form: each names its agent by position in `agents`, carries
//! its normalized match and the tier it sits in. Loading checks the format version (an unknown
//! major version is refused), the content hash, every agent reference and every tier, then
//! rebuilds the index: a document that loads routes exactly as the plan that wrote it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::binding::{BindingRef, CompiledBinding};
use super::index::IndexError;
use super::plan::{AcpBinding, PlanAgent, PlanParts, RoutingPlan};
use super::scope::{AccountPattern, PeerPattern, Scope};
use super::session::SessionSettings;
use crate::config::model::{DmScope, GroupScope};
use crate::ids::{self, PeerKind};

/// The format this build writes. Readers accept any `1.x` and `2.x`.
pub const FORMAT_VERSION: &str = "2.0";
/// The major versions this build reads: 1 (snake_case keys around `plan`) and 2.
const MAJORS: std::ops::RangeInclusive<u64> = 1..=2;

/// The document as stored (format 1's key spellings are read too).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanDocument {
    #[serde(alias = "format_version")]
    pub format_version: String,
    /// Increases by one with every published plan (the state store assigns it).
    pub generation: u64,
    /// `sha256:` of the `plan` object as serialized: equal hashes, equal routing.
    #[serde(alias = "content_hash")]
    pub content_hash: String,
    /// The hash of the config files the plan was compiled from.
    #[serde(alias = "config_hash")]
    pub config_hash: String,
    pub plan: PlanBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanBody {
    pub default_agent: String,
    pub agents: Vec<PlanAgent>,
    pub session: SessionSettings,
    /// The file every binding's `line` and `index` refer to.
    pub bindings_file: String,
    pub bindings: Vec<StoredBinding>,
    #[serde(default)]
    pub acp: Vec<StoredAcp>,
    /// The channel accounts the Access layer lets messages in from (secret references only),
    /// so that a standalone `deepcli access serve --plan` needs nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<StoredAccount>,
}

/// A channel account as the Access layer needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredAccount {
    /// Normalized channel and account ids.
    pub channel: String,
    pub account_id: String,
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<crate::config::model::SecretRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_url: Option<String>,
}

impl StoredAccount {
    /// The accounts section of the document: every channel account `config` declares, with
    /// its webhook secret as a reference.
    pub fn all_of(config: &crate::config::Config) -> Vec<StoredAccount> {
        let mut out = Vec::new();
        for channel in &config.channels {
            let channel_on = channel.spec.enabled != Some(false);
            for account in channel.accounts() {
                out.push(StoredAccount {
                    channel: ids::channel(&channel.id).into_owned(),
                    account_id: account.normalized.clone(),
                    enabled: channel_on && account.spec.enabled != Some(false),
                    webhook_secret: match account.spec.secrets.get("webhookSecret") {
                        Some(crate::config::model::Secret::Ref(r)) => Some(r.clone()),
                        _ => None,
                    },
                    reply_url: account.spec.reply_url.clone(),
                });
            }
        }
        out
    }
}

/// A route binding in index form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredBinding {
    /// Position in `agents`.
    pub agent: usize,
    pub channel: String,
    /// A normalized account id, or `*`.
    pub account_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<StoredPeer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dm_scope: Option<DmScope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_scope: Option<GroupScope>,
    /// The tier this binding sits in (routing.md §4): checked on load.
    pub tier: String,
    pub line: u32,
    pub index: usize,
}

/// A peer: `id` is `*` for the wildcard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredPeer {
    pub kind: String,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoredAcp {
    pub agent: usize,
    pub channel: String,
    pub account_id: String,
    pub peer: StoredPeer,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub line: u32,
    pub index: usize,
}

/// Why a routing-plan document was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("not a routing plan: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "routing plan format {found} is newer than this deepcli understands (it reads {}.x to {}.x); upgrade deepcli",
        MAJORS.start(),
        MAJORS.end()
    )]
    UnknownMajor { found: String },
    #[error("`formatVersion` must look like `{FORMAT_VERSION}`, found `{0}`")]
    BadVersion(String),
    #[error("content hash mismatch: the document says {stated}, its plan hashes to {actual}")]
    HashMismatch { stated: String, actual: String },
    #[error("{what} {index}: {problem}")]
    Invalid {
        what: &'static str,
        index: usize,
        problem: String,
    },
    #[error("{0}")]
    Plan(String),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// A document as written to disk: pretty JSON with a final newline.
fn pretty(document: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(document).expect("a plan always serializes");
    text.push('\n');
    text
}

fn peer_kind_name(kind: &PeerKind) -> String {
    kind.as_str().to_string()
}

impl RoutingPlan {
    /// The plan in its stored form, with the generation and config hash it is published with.
    pub fn to_document(&self, generation: u64, config_hash: &str) -> PlanDocument {
        let plan = self.to_body();
        PlanDocument {
            format_version: FORMAT_VERSION.to_string(),
            generation,
            content_hash: plan.hash(),
            config_hash: config_hash.to_string(),
            plan,
        }
    }

    /// The `plan` object of the stored form (no accounts: those come from channels.yaml).
    pub fn to_body(&self) -> PlanBody {
        let mut agents = self.agents.clone();
        let mut positions: std::collections::HashMap<String, usize> = agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.id.clone(), i))
            .collect();
        // A binding may name an agent that is not listed only in a config that failed
        // validation; keep the plan self-contained anyway.
        let mut agent_of = |id: &str| match positions.get(id) {
            Some(&i) => i,
            None => {
                agents.push(PlanAgent {
                    id: id.to_string(),
                    name: None,
                    workspace: String::new(),
                    runtime: Default::default(),
                });
                positions.insert(id.to_string(), agents.len() - 1);
                agents.len() - 1
            }
        };
        let bindings: Vec<StoredBinding> = self
            .bindings
            .iter()
            .map(|b| StoredBinding {
                agent: agent_of(&b.agent_id),
                channel: b.scope.channel.clone(),
                account_id: match &b.scope.account {
                    AccountPattern::Any => "*".to_string(),
                    AccountPattern::Exact(a) => a.clone(),
                },
                peer: b.scope.peer.as_ref().map(|p| StoredPeer {
                    kind: peer_kind_name(&p.kind),
                    id: p.id.clone().unwrap_or_else(|| "*".to_string()),
                }),
                guild_id: b.scope.guild.clone(),
                team_id: b.scope.team.clone(),
                roles: b.scope.roles.clone(),
                dm_scope: b.dm_scope,
                group_scope: b.group_scope,
                tier: b.scope.tier().as_str().to_string(),
                line: b.source.line,
                index: b.source.index,
            })
            .collect();
        let acp = self
            .acp
            .iter()
            .map(|a| StoredAcp {
                agent: agent_of(&a.agent_id),
                channel: a.channel.clone(),
                account_id: a.account.clone(),
                peer: StoredPeer {
                    kind: peer_kind_name(&a.peer_kind),
                    id: a.peer_id.clone(),
                },
                mode: a.mode.clone(),
                label: a.label.clone(),
                line: a.source.line,
                index: a.source.index,
            })
            .collect();
        let bindings_file = self
            .bindings
            .first()
            .map(|b| &b.source.file)
            .or(self.acp.first().map(|a| &a.source.file))
            .map_or_else(|| "bindings.yaml".to_string(), |f| f.to_string());
        PlanBody {
            default_agent: self.default_agent.clone(),
            agents,
            session: self.session.clone(),
            bindings_file,
            bindings,
            acp,
            accounts: Vec::new(),
        }
    }
}

impl PlanBody {
    pub fn hash(&self) -> String {
        let mut hasher = crate::hash::Writer::default();
        serde_json::to_writer(&mut hasher, self).expect("a plan always serializes");
        hasher.finish()
    }

    /// The document of this body as published (what [`PlanDocument::to_json`] writes), without
    /// copying the body.
    pub fn document_json(&self, generation: u64, content_hash: &str, config_hash: &str) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Document<'a> {
            format_version: &'a str,
            generation: u64,
            content_hash: &'a str,
            config_hash: &'a str,
            plan: &'a PlanBody,
        }
        pretty(&Document {
            format_version: FORMAT_VERSION,
            generation,
            content_hash,
            config_hash,
            plan: self,
        })
    }
}

impl PlanDocument {
    pub fn to_json(&self) -> String {
        pretty(self)
    }

    /// Parses and checks a stored document. The version is read first, so that a newer
    /// format is refused as such rather than as a shape error.
    pub fn parse(text: &str) -> Result<PlanDocument, PlanError> {
        #[derive(Deserialize)]
        struct Version {
            #[serde(rename = "formatVersion", alias = "format_version")]
            format_version: String,
        }
        let Version { format_version } = serde_json::from_str(text)?;
        let major = format_version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u64>().ok())
            .ok_or_else(|| PlanError::BadVersion(format_version.clone()))?;
        if !MAJORS.contains(&major) {
            return Err(PlanError::UnknownMajor {
                found: format_version,
            });
        }
        let doc: PlanDocument = serde_json::from_str(text)?;
        let actual = doc.plan.hash();
        if actual != doc.content_hash {
            return Err(PlanError::HashMismatch {
                stated: doc.content_hash,
                actual,
            });
        }
        Ok(doc)
    }

    /// Rebuilds the routing plan, checking every reference.
    pub fn into_plan(self) -> Result<RoutingPlan, PlanError> {
        let PlanBody {
            default_agent,
            agents,
            session,
            bindings_file,
            bindings,
            acp,
            accounts: _,
        } = self.plan;
        let mut seen = std::collections::HashSet::new();
        for (index, agent) in agents.iter().enumerate() {
            if ids::agent_id(&agent.id) != agent.id.as_str() {
                return Err(invalid(
                    "agent",
                    index,
                    format!("`{}` is not a normalized agent id", agent.id),
                ));
            }
            if !seen.insert(agent.id.as_str()) {
                return Err(invalid(
                    "agent",
                    index,
                    format!("`{}` is listed twice", agent.id),
                ));
            }
        }
        if !seen.contains(default_agent.as_str()) {
            return Err(PlanError::Plan(format!(
                "the default agent `{default_agent}` is not among the plan's agents"
            )));
        }
        let file: Arc<str> = bindings_file.into();
        let agent_id = |what: &'static str, index: usize, agent: usize| {
            agents.get(agent).map(|a| a.id.clone()).ok_or_else(|| {
                invalid(
                    what,
                    index,
                    format!(
                        "agent {agent} does not exist (the plan has {})",
                        agents.len()
                    ),
                )
            })
        };
        let mut compiled = Vec::with_capacity(bindings.len());
        for (i, b) in bindings.into_iter().enumerate() {
            let agent_id = agent_id("binding", i, b.agent)?;
            if b.channel.is_empty() || ids::channel(&b.channel) != b.channel.as_str() {
                return Err(invalid(
                    "binding",
                    i,
                    format!("channel `{}` is not normalized", b.channel),
                ));
            }
            let account = match b.account_id.as_str() {
                "*" => AccountPattern::Any,
                id if ids::account_id(id) == id => AccountPattern::Exact(id.to_string()),
                id => {
                    return Err(invalid(
                        "binding",
                        i,
                        format!("account `{id}` is not normalized"),
                    ));
                }
            };
            let mut roles = b.roles;
            roles.sort();
            roles.dedup();
            let scope = Scope {
                channel: b.channel,
                account,
                peer: b.peer.map(|p| PeerPattern {
                    kind: PeerKind::parse(&p.kind),
                    id: (p.id != "*").then_some(p.id),
                }),
                guild: b.guild_id,
                team: b.team_id,
                roles,
            };
            if scope.tier().as_str() != b.tier {
                return Err(invalid(
                    "binding",
                    i,
                    format!(
                        "stored in tier `{}` but its match puts it in `{}`",
                        b.tier,
                        scope.tier().as_str()
                    ),
                ));
            }
            if u32::try_from(b.index).is_err() {
                return Err(invalid(
                    "binding",
                    i,
                    format!("index {} is out of range", b.index),
                ));
            }
            compiled.push(CompiledBinding {
                agent_id,
                scope,
                dm_scope: b.dm_scope,
                group_scope: b.group_scope,
                source: BindingRef {
                    file: file.clone(),
                    line: b.line,
                    index: b.index,
                },
            });
        }
        let mut acp_bindings = Vec::with_capacity(acp.len());
        for (i, a) in acp.into_iter().enumerate() {
            let agent_id = agent_id("acp binding", i, a.agent)?;
            let peer_kind = PeerKind::parse(&a.peer.kind);
            if peer_kind.class().is_none() || a.peer.id.is_empty() || a.peer.id == "*" {
                return Err(invalid(
                    "acp binding",
                    i,
                    "needs one concrete conversation".to_string(),
                ));
            }
            acp_bindings.push(AcpBinding {
                agent_id,
                channel: a.channel,
                account: a.account_id,
                peer_kind,
                peer_id: a.peer.id,
                mode: a.mode,
                label: a.label,
                source: BindingRef {
                    file: file.clone(),
                    line: a.line,
                    index: a.index,
                },
            });
        }
        Ok(RoutingPlan::from_parts(
            compiled,
            PlanParts {
                agents,
                default_agent,
                session,
                acp: acp_bindings,
            },
        )?)
    }
}

fn invalid(what: &'static str, index: usize, problem: String) -> PlanError {
    PlanError::Invalid {
        what,
        index,
        problem,
    }
}

/// What a stored plan says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanMeta {
    pub format_version: String,
    pub generation: u64,
    pub content_hash: String,
    pub config_hash: String,
}

/// Loads a stored plan: parse, check, rebuild the index.
pub fn load(text: &str) -> Result<(PlanMeta, RoutingPlan), PlanError> {
    let doc = PlanDocument::parse(text)?;
    let meta = PlanMeta {
        format_version: doc.format_version.clone(),
        generation: doc.generation,
        content_hash: doc.content_hash.clone(),
        config_hash: doc.config_hash.clone(),
    };
    Ok((meta, doc.into_plan()?))
}
