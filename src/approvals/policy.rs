//! What an agent's `permissions` say, and the decisions that need no person: a mode's answer,
//! an `allow_always` rule's, which ACP option carries a decision, and the content hash a
//! decision is bound to. Pure.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::Config;
use crate::config::model::{ApprovalRoute, PermissionMode, Permissions};
use crate::state::approvals::ApprovalRule;

/// `permissions.timeoutSeconds` when unset.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Tool kinds `approve-reads` allows: ACP's `read` and `search`, which change nothing.
pub const READ_KINDS: [&str; 2] = ["read", "search"];

/// One agent's `permissions`, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub mode: PermissionMode,
    pub timeout: Duration,
    /// `<channel>:<senderId>`, as written (the channel lower-cased).
    pub approvers: Vec<String>,
    pub route: ApprovalRoute,
    /// What a pending approval is bound to: a change of any of the above voids it.
    pub hash: String,
}

impl Policy {
    pub fn of(permissions: Option<&Permissions>) -> Policy {
        let p = permissions.cloned().unwrap_or_default();
        let approvers = p
            .approvers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|a| match a.split_once(':') {
                Some((channel, sender)) => format!("{}:{sender}", crate::ids::channel(channel)),
                None => a,
            })
            .collect();
        let mut policy = Policy {
            mode: p.mode.unwrap_or_default(),
            timeout: p
                .timeout_seconds
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            approvers,
            route: p.route.unwrap_or_default(),
            hash: String::new(),
        };
        let text = json!({
            "mode": policy.mode.as_str(),
            "timeoutSeconds": policy.timeout.as_secs(),
            "approvers": policy.approvers,
            "route": policy.route.as_str(),
        })
        .to_string();
        policy.hash = crate::hash::Hasher::default()
            .part(text.as_bytes())
            .finish();
        policy
    }

    /// Whether `sender` (`<channel>:<senderId>`) may answer from a chat.
    pub fn is_approver(&self, sender: &str) -> bool {
        self.approvers.iter().any(|a| a == sender)
    }
}

/// Every agent's policy, by id.
pub fn policies(config: &Config) -> HashMap<String, Policy> {
    config
        .agents
        .iter()
        .map(|a| (a.id().to_string(), Policy::of(a.spec.permissions.as_ref())))
        .collect()
}

/// The answer the mode gives a tool call of `kind`, if it gives one.
pub fn by_mode(mode: PermissionMode, kind: &str) -> Option<bool> {
    match mode {
        PermissionMode::Ask => None,
        PermissionMode::ApproveAll => Some(true),
        PermissionMode::DenyAll => Some(false),
        PermissionMode::ApproveReads => READ_KINDS.contains(&kind).then_some(true),
    }
}

/// The first live rule that allows a tool call of `kind` titled `title`.
pub fn matching_rule<'a>(
    rules: &'a [ApprovalRule],
    kind: &str,
    title: &str,
) -> Option<&'a ApprovalRule> {
    rules.iter().find(|r| {
        r.revoked_at.is_none() && r.tool_kind == kind && title_matches(&r.title_pattern, title)
    })
}

/// `pattern` against `title`: exact, except that `*` matches any run of characters.
pub fn title_matches(pattern: &str, title: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = title.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A rule's title pattern for `title`: the title itself, its `*` escaped by nothing (a title
/// holding `*` then matches a little more than itself, never less).
pub fn pattern_for(title: &str) -> String {
    title.to_string()
}

/// The hash a decision is bound to: the action as the agent described it.
pub fn content_hash(action: &Value) -> String {
    crate::hash::Hasher::default()
        .part(action.to_string().as_bytes())
        .finish()
}

/// The option (its `optionId`) that carries a decision: the kind asked for first, then its
/// sibling (`allow_once` ↔ `allow_always`, `reject_once` ↔ `reject_always`). `None`: the
/// agent offered no option of that direction.
pub fn option_for(options: &Value, allow: bool, always: bool) -> Option<(String, String)> {
    let order: [&str; 2] = match (allow, always) {
        (true, false) => ["allow_once", "allow_always"],
        (true, true) => ["allow_always", "allow_once"],
        (false, false) => ["reject_once", "reject_always"],
        (false, true) => ["reject_always", "reject_once"],
    };
    let list = options.as_array()?;
    order.iter().find_map(|kind| {
        list.iter()
            .find(|o| o["kind"] == *kind)
            .and_then(|o| Some((o["optionId"].as_str()?.to_string(), kind.to_string())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_answer_only_what_they_say() {
        assert_eq!(by_mode(PermissionMode::Ask, "read"), None);
        assert_eq!(by_mode(PermissionMode::ApproveReads, "read"), Some(true));
        assert_eq!(by_mode(PermissionMode::ApproveReads, "search"), Some(true));
        assert_eq!(by_mode(PermissionMode::ApproveReads, "edit"), None);
        assert_eq!(by_mode(PermissionMode::ApproveAll, "execute"), Some(true));
        assert_eq!(by_mode(PermissionMode::DenyAll, "read"), Some(false));
    }

    #[test]
    fn titles_match_exactly_or_by_star() {
        assert!(title_matches("rm -rf /tmp/x", "rm -rf /tmp/x"));
        assert!(!title_matches("rm -rf /tmp/x", "rm -rf /tmp/xy"));
        assert!(!title_matches("rm -rf /tmp/x", "rm -rf /tmp/"));
        assert!(title_matches("edit *.rs", "edit src/main.rs"));
        assert!(!title_matches("edit *.rs", "edit src/main.py"));
        assert!(title_matches("a*b*c", "a-x-b-y-c"));
        assert!(!title_matches("a*b*c", "a-x-c"));
        assert!(title_matches("*", ""));
    }

    #[test]
    fn the_option_is_the_kind_asked_for_else_its_sibling_never_the_other_direction() {
        let options = json!([
            {"optionId": "yes", "kind": "allow_once"},
            {"optionId": "no", "kind": "reject_once"},
            {"optionId": "never", "kind": "reject_always"},
        ]);
        assert_eq!(
            option_for(&options, true, false),
            Some(("yes".into(), "allow_once".into()))
        );
        assert_eq!(
            option_for(&options, true, true),
            Some(("yes".into(), "allow_once".into()))
        );
        assert_eq!(
            option_for(&options, false, true),
            Some(("never".into(), "reject_always".into()))
        );
        assert_eq!(
            option_for(
                &json!([{"optionId": "no", "kind": "reject_once"}]),
                true,
                false
            ),
            None
        );
    }

    #[test]
    fn a_policy_hash_changes_with_any_field() {
        let base = Permissions::default();
        let a = Policy::of(Some(&base));
        assert_eq!(a, Policy::of(None));
        let b = Policy::of(Some(&Permissions {
            approvers: Some(vec!["Telegram:111".into()]),
            ..base.clone()
        }));
        assert_ne!(a.hash, b.hash);
        assert!(b.is_approver("telegram:111"));
        let c = Policy::of(Some(&Permissions {
            timeout_seconds: Some(5),
            ..base
        }));
        assert_ne!(a.hash, c.hash);
    }
}
