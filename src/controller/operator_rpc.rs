//! The operator's JSON-RPC at `POST /rpc` (management.md, hub.md, approvals.md): one body read
//! once by [`crate::rpc`], each call — alone or in a batch — answered by its own area's
//! service with a typed request: the Hub (`sessions/*`, `runs/*`), the approvals
//! (`approvals/*`) or management (everything else). Each area's errors get their JSON-RPC
//! codes here, at the edge.

use std::sync::Arc;

use serde_json::Value;

use super::Shared;
use crate::approvals::{ApprovalError, ApprovalRequest};
use crate::hub::operator::{HubRequest, OperatorError};
use crate::rpc::{self, Call};

/// Answers one body; `None` when nothing is to be sent back (only notifications).
pub(super) async fn handle(shared: &Arc<Shared>, body: &[u8]) -> Option<Value> {
    rpc::handle_async(body, |call| answer(shared, call)).await
}

/// Every method `/rpc` answers, with its prefix.
fn methods() -> Vec<String> {
    let areas = crate::hub::operator::METHODS
        .iter()
        .chain(&ApprovalRequest::METHODS)
        .map(|m| format!("{}{m}", rpc::PREFIX));
    crate::manage::rpc::METHODS
        .iter()
        .map(|m| m.to_string())
        .chain(areas)
        .collect()
}

fn not_found(method: &str) -> rpc::Error {
    let methods = methods();
    let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
    rpc::Error::method_not_found(method, &methods)
}

/// Which service answers a method (without its prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Area {
    Hub,
    Approvals,
    Manage,
}

impl Area {
    fn of(name: &str) -> Area {
        match name.split_once('/').map(|(area, _)| area) {
            Some("sessions" | "runs" | "tasks") => Area::Hub,
            Some("approvals") => Area::Approvals,
            _ => Area::Manage,
        }
    }
}

async fn answer(shared: &Arc<Shared>, call: Call) -> Result<Value, rpc::Error> {
    let Some(name) = call.method.strip_prefix(rpc::PREFIX) else {
        return Err(not_found(&call.method));
    };
    match Area::of(name) {
        Area::Hub => {
            let request = match HubRequest::parse(name, call.params) {
                Err(OperatorError::NoMethod(_)) => return Err(not_found(&call.method)),
                other => other.map_err(|e| hub_error(&e))?,
            };
            let show = match &request {
                HubRequest::SessionsShow(p) => Some(p.session_key.clone()),
                _ => None,
            };
            let answer = shared
                .hub
                .operator(request)
                .await
                .map_err(|e| hub_error(&e))?;
            let mut result = serde_json::to_value(answer).map_err(rpc::Error::internal)?;
            // A platform thread's discussion (adapters.md) is the adapters' to tell.
            if let Some(key) = show {
                let adapters = shared.adapters.clone();
                let threads = tokio::task::spawn_blocking(move || {
                    crate::adapters::discussions(&adapters, &key)
                })
                .await
                .unwrap_or_default();
                if !threads.is_empty() {
                    result["discussions"] =
                        serde_json::to_value(threads).map_err(rpc::Error::internal)?;
                }
            }
            Ok(result)
        }
        Area::Approvals => {
            let request = ApprovalRequest::parse(name, call.params)
                .ok_or_else(|| not_found(&call.method))?
                .map_err(|e| approval_error(&e))?;
            let answer = shared
                .approvals
                .operator(request)
                .await
                .map_err(|e| approval_error(&e))?;
            serde_json::to_value(answer).map_err(rpc::Error::internal)
        }
        Area::Manage => {
            if !crate::manage::rpc::METHODS.contains(&call.method.as_str()) {
                return Err(not_found(&call.method));
            }
            let cx = shared.manage.clone();
            tokio::task::spawn_blocking(move || {
                crate::manage::rpc::answer(&cx, &call.method, call.params)
            })
            .await
            .map_err(rpc::Error::internal)?
        }
    }
}

/// The Hub's operator errors as JSON-RPC errors.
fn hub_error(e: &OperatorError) -> rpc::Error {
    let code = match e {
        OperatorError::NoMethod(_) => rpc::METHOD_NOT_FOUND,
        OperatorError::Params(_) => rpc::INVALID_PARAMS,
        OperatorError::NotFound(_) => -32004,
        OperatorError::Internal(_) => rpc::INTERNAL_ERROR,
    };
    rpc::Error::new(code, e.to_string())
}

/// The approvals' errors as JSON-RPC errors: refusals in the management service's range.
fn approval_error(e: &ApprovalError) -> rpc::Error {
    let code = match e {
        ApprovalError::Params(_) => rpc::INVALID_PARAMS,
        ApprovalError::Internal(_) => rpc::INTERNAL_ERROR,
        ApprovalError::NotFound(_)
        | ApprovalError::NotPending { .. }
        | ApprovalError::Voided { .. }
        | ApprovalError::Refused(_)
        | ApprovalError::NoRule(_) => -32000,
    };
    rpc::Error::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_goes_to_its_area() {
        assert_eq!(Area::of("sessions/list"), Area::Hub);
        assert_eq!(Area::of("runs/show"), Area::Hub);
        assert_eq!(Area::of("approvals/approve"), Area::Approvals);
        assert_eq!(Area::of("agents/list"), Area::Manage);
        assert_eq!(Area::of("pairing/list"), Area::Manage);
        assert_eq!(Area::of("nope"), Area::Manage);
    }

    #[test]
    fn an_unknown_method_lists_every_area() {
        let e = not_found("_mustang.agent/sessions/fly");
        assert_eq!(e.code, rpc::METHOD_NOT_FOUND);
        let listed = e.data.unwrap()["methods"].clone();
        for m in [
            "_mustang.agent/agents/list",
            "_mustang.agent/sessions/list",
            "_mustang.agent/approvals/list",
        ] {
            assert!(
                listed.as_array().unwrap().iter().any(|l| l == m),
                "{m}: {listed}"
            );
        }
    }

    #[test]
    fn domain_errors_keep_their_codes() {
        assert_eq!(hub_error(&OperatorError::NotFound("x".into())).code, -32004);
        assert_eq!(hub_error(&OperatorError::Params("x".into())).code, -32602);
        assert_eq!(
            approval_error(&ApprovalError::NoRule("r".into())).code,
            -32000
        );
        assert_eq!(
            approval_error(&ApprovalError::Params("p".into())).code,
            -32602
        );
        assert_eq!(
            approval_error(&ApprovalError::Internal("i".into())).code,
            -32603
        );
    }
}
