//! The operator's methods (`approvals/*` on the operator JSON-RPC; `GET /v1/approvals`;
//! `deepcli approvals`): one service taking a typed [`ApprovalRequest`] and giving a typed
//! [`ApprovalAnswer`], the same JSON everywhere. Which HTTP status or JSON-RPC code an
//! [`ApprovalError`] gets is the transport's to say.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::service::Decider;
use super::{ApprovalError, Approvals};
use crate::state::ApprovalState;
use crate::state::approvals::{ApprovalEvent, ApprovalFilter, ApprovalRecord, ApprovalRule};

/// One operator call, typed: the method and its params.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ApprovalRequest {
    List(ListParams),
    Show(IdParams),
    Approve(DecideParams),
    Deny(DecideParams),
    Rules(RulesParams),
    Revoke(RevokeParams),
}

impl ApprovalRequest {
    /// The methods, without the JSON-RPC prefix.
    pub(crate) const METHODS: [&'static str; 6] = [
        "approvals/list",
        "approvals/show",
        "approvals/approve",
        "approvals/deny",
        "approvals/rules",
        "approvals/revoke",
    ];

    /// The request `method` (without the prefix) with `params` names; `None` when `method` is
    /// not one of [`ApprovalRequest::METHODS`].
    pub(crate) fn parse(method: &str, p: Value) -> Option<Result<ApprovalRequest, ApprovalError>> {
        fn params<T: serde::de::DeserializeOwned>(
            method: &str,
            p: Value,
        ) -> Result<T, ApprovalError> {
            let p = if p.is_null() {
                Value::Object(Default::default())
            } else {
                p
            };
            serde_json::from_value(p)
                .map_err(|e| ApprovalError::Params(format!("invalid params for `{method}`: {e}")))
        }
        Some(match method {
            "approvals/list" => params(method, p).map(ApprovalRequest::List),
            "approvals/show" => params(method, p).map(ApprovalRequest::Show),
            "approvals/approve" => params(method, p).map(ApprovalRequest::Approve),
            "approvals/deny" => params(method, p).map(ApprovalRequest::Deny),
            "approvals/rules" => params(method, p).map(ApprovalRequest::Rules),
            "approvals/revoke" => params(method, p).map(ApprovalRequest::Revoke),
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ListParams {
    pub state: Option<String>,
    pub agent_id: Option<String>,
    /// Every state, not only the pending ones.
    #[serde(default)]
    pub all: bool,
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct IdParams {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DecideParams {
    pub id: String,
    #[serde(default)]
    pub always: bool,
    /// With `always`: the rule's title is this pattern (`*`: any run of characters), written
    /// by the operator on purpose, rather than the exact title.
    #[serde(default)]
    pub pattern: Option<String>,
    /// With `always`: only the rule that would be saved; nothing decided.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RulesParams {
    pub agent_id: Option<String>,
    /// Revoked rules too.
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct RevokeParams {
    pub rule_id: String,
}

/// What an operator call gives back.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub(crate) enum ApprovalAnswer {
    /// `approvals/list`: newest first.
    List { approvals: Vec<ApprovalRecord> },
    /// `approvals/show`: one approval with its events.
    Show {
        approval: Box<ApprovalRecord>,
        events: Vec<ApprovalEvent>,
    },
    /// `approvals/approve|deny`: the decided approval and the rule it saved (or, with
    /// `dryRun`, would save).
    Decided(Decided),
    /// `approvals/rules`.
    Rules { rules: Vec<ApprovalRule> },
    /// `approvals/revoke`: the rule revoked.
    Revoked { rule: ApprovalRule },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Decided {
    pub approval: Box<ApprovalRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<ApprovalRule>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

impl Approvals {
    /// One operator call.
    pub(crate) async fn operator(
        self: &Arc<Self>,
        request: ApprovalRequest,
    ) -> Result<ApprovalAnswer, ApprovalError> {
        match request {
            ApprovalRequest::List(p) => self.list(p).await,
            ApprovalRequest::Show(p) => self.show(&p.id).await,
            ApprovalRequest::Approve(p) => self.decide_as_operator(p, true).await,
            ApprovalRequest::Deny(p) => self.decide_as_operator(p, false).await,
            ApprovalRequest::Rules(p) => {
                let rules = self
                    .db(move |s| s.rules(p.agent_id.as_deref(), p.all))
                    .await?;
                Ok(ApprovalAnswer::Rules { rules })
            }
            ApprovalRequest::Revoke(p) => {
                let id = p.rule_id.clone();
                match self.db(move |s| s.revoke_rule(&id, "operator")).await? {
                    Some(rule) => {
                        tracing::info!(rule = %rule.id, agent = %rule.agent_id, "approval rule revoked");
                        Ok(ApprovalAnswer::Revoked { rule })
                    }
                    None => Err(ApprovalError::NoRule(p.rule_id)),
                }
            }
        }
    }

    async fn decide_as_operator(
        &self,
        p: DecideParams,
        allow: bool,
    ) -> Result<ApprovalAnswer, ApprovalError> {
        if p.dry_run {
            if !(allow && p.always) {
                return Err(ApprovalError::Params(
                    "`dryRun` previews the rule of approve with `always`; nothing else has one"
                        .to_string(),
                ));
            }
            let (approval, rule) = self.preview_rule(&p.id, p.pattern.as_deref()).await?;
            return Ok(ApprovalAnswer::Decided(Decided {
                approval: Box::new(approval),
                rule: Some(rule),
                dry_run: true,
            }));
        }
        let (approval, rule) = self
            .decide(
                &p.id,
                allow,
                p.always,
                p.pattern.as_deref(),
                Decider::Operator,
            )
            .await?;
        Ok(ApprovalAnswer::Decided(Decided {
            approval: Box::new(approval),
            rule,
            dry_run: false,
        }))
    }

    /// Approvals, newest first: the pending ones, or (`all`, `state`) others.
    pub(crate) async fn list(&self, p: ListParams) -> Result<ApprovalAnswer, ApprovalError> {
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
        let approvals = self.db(move |s| s.list(&filter)).await?;
        Ok(ApprovalAnswer::List { approvals })
    }

    /// One approval with its events.
    pub(crate) async fn show(&self, id: &str) -> Result<ApprovalAnswer, ApprovalError> {
        let key = id.to_string();
        let (record, events) = self
            .db(move |s| Ok((s.get(&key)?, s.events(&key)?)))
            .await?;
        let approval = record.ok_or_else(|| ApprovalError::NotFound(id.to_string()))?;
        Ok(ApprovalAnswer::Show {
            approval: Box::new(approval),
            events,
        })
    }
}
