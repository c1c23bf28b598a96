//! The operator's methods (`approvals/*` on the operator JSON-RPC; `GET /v1/approvals`;
//! `deepcli approvals`): one service, the same JSON everywhere.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::service::Decider;
use super::{ApprovalError, Approvals};
use crate::state::ApprovalState;
use crate::state::approvals::ApprovalFilter;

/// The methods, without the JSON-RPC prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorMethod {
    List,
    Show,
    Approve,
    Deny,
    Rules,
    Revoke,
}

impl OperatorMethod {
    pub const ALL: [(&'static str, OperatorMethod); 6] = [
        ("approvals/list", OperatorMethod::List),
        ("approvals/show", OperatorMethod::Show),
        ("approvals/approve", OperatorMethod::Approve),
        ("approvals/deny", OperatorMethod::Deny),
        ("approvals/rules", OperatorMethod::Rules),
        ("approvals/revoke", OperatorMethod::Revoke),
    ];

    pub fn parse(method: &str) -> Option<OperatorMethod> {
        Self::ALL
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, m)| *m)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListParams {
    pub state: Option<String>,
    pub agent_id: Option<String>,
    /// Every state, not only the pending ones.
    #[serde(default)]
    pub all: bool,
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IdParams {
    id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DecideParams {
    id: String,
    #[serde(default)]
    always: bool,
    /// With `always`: the rule's title is this pattern (`*`: any run of characters), written
    /// by the operator on purpose, rather than the exact title.
    #[serde(default)]
    pattern: Option<String>,
    /// With `always`: only the rule that would be saved; nothing decided.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RulesParams {
    agent_id: Option<String>,
    /// Revoked rules too.
    #[serde(default)]
    all: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RevokeParams {
    rule_id: String,
}

fn params<T: serde::de::DeserializeOwned>(method: &str, p: Value) -> Result<T, ApprovalError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p)
        .map_err(|e| ApprovalError::Params(format!("invalid params for `{method}`: {e}")))
}

impl Approvals {
    /// One operator method (`approvals/list`, …) with its params.
    pub async fn operator(
        self: &Arc<Self>,
        method: OperatorMethod,
        p: Value,
    ) -> Result<Value, ApprovalError> {
        match method {
            OperatorMethod::List => self.list(params("approvals/list", p)?).await,
            OperatorMethod::Show => {
                let p: IdParams = params("approvals/show", p)?;
                self.show(&p.id).await
            }
            OperatorMethod::Approve | OperatorMethod::Deny => {
                let p: DecideParams = params("approvals/approve", p)?;
                let allow = method == OperatorMethod::Approve;
                if p.dry_run {
                    if !(allow && p.always) {
                        return Err(ApprovalError::Params(
                            "`dryRun` previews the rule of approve with `always`; nothing else has one".to_string(),
                        ));
                    }
                    let (record, rule) = self.preview_rule(&p.id, p.pattern.as_deref()).await?;
                    return Ok(json!({"approval": record, "rule": rule, "dryRun": true}));
                }
                let (record, rule) = self
                    .decide(
                        &p.id,
                        allow,
                        p.always,
                        p.pattern.as_deref(),
                        Decider::Operator,
                    )
                    .await?;
                let mut doc = json!({"approval": record});
                if let Some(rule) = rule {
                    doc["rule"] = json!(rule);
                }
                Ok(doc)
            }
            OperatorMethod::Rules => {
                let p: RulesParams = params("approvals/rules", p)?;
                let rules = self
                    .db(move |s| s.rules(p.agent_id.as_deref(), p.all))
                    .await?;
                Ok(json!({"rules": rules}))
            }
            OperatorMethod::Revoke => {
                let p: RevokeParams = params("approvals/revoke", p)?;

                let id = p.rule_id.clone();
                match self.db(move |s| s.revoke_rule(&id, "operator")).await? {
                    Some(rule) => {
                        tracing::info!(rule = %rule.id, agent = %rule.agent_id, "approval rule revoked");
                        Ok(json!({"rule": rule}))
                    }
                    None => Err(ApprovalError::NoRule(p.rule_id)),
                }
            }
        }
    }

    /// Approvals, newest first: the pending ones, or (`all`, `state`) others.
    pub async fn list(&self, p: ListParams) -> Result<Value, ApprovalError> {
        let state = match &p.state {
            None => None,
            Some(s) => Some(ApprovalState::parse(s).ok_or_else(|| {
                ApprovalError::Params(format!(
                    "unknown approval state `{s}`; the states are pending, approved, denied, expired, void"
                ))
            })?),
        };
        let filter = ApprovalFilter {
            state: state.or((!p.all).then_some(ApprovalState::Pending)),
            agent_id: p.agent_id,
            limit: Some(p.limit.unwrap_or(100).min(1000)),
        };
        let list = self.db(move |s| s.list(&filter)).await?;
        Ok(json!({"approvals": list}))
    }

    /// One approval with its events.
    pub async fn show(&self, id: &str) -> Result<Value, ApprovalError> {
        let key = id.to_string();
        let (record, events) = self
            .db(move |s| Ok((s.get(&key)?, s.events(&key)?)))
            .await?;
        let record = record.ok_or_else(|| ApprovalError::NotFound(id.to_string()))?;
        Ok(json!({"approval": record, "events": events}))
    }
}
