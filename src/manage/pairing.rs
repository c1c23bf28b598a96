//! `pairing list | approve | revoke` (policy.md, "Pairing"): the operator's answer to senders
//! who asked to pair. The records are the state database's (the config files are not
//! rewritten), so these work the same whether or not `deepcli up` runs: the controller reads
//! approvals from the database with every direct message, and an approval counts from the next
//! one on.
//!
//! Codes are compared in constant time and never logged; wrong codes are limited per channel
//! (`policy::pairing`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{ManageContext, ManageError, Result};
use crate::ids;
use crate::policy::pairing as codes;
use crate::state::StateStore;
use crate::state::pairing::{self as records, Approval, PairedSender, PendingRequest};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PairingList {
    /// Requests waiting for the operator, oldest first per account.
    pub pending: Vec<PendingView>,
    /// Senders the operator approved.
    pub paired: Vec<PairedSender>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    #[serde(flatten)]
    pub request: PendingRequest,
    pub expires_at: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListRequest {
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub account: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApproveRequest {
    pub channel: String,
    pub code: String,
    #[serde(default)]
    pub account: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevokeRequest {
    pub channel: String,
    pub sender: String,
    #[serde(default)]
    pub account: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Approved {
    pub approved: PairedSender,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revoked {
    pub channel: String,
    pub sender: String,
    /// The approvals taken back, one per account.
    pub revoked: Vec<PairedSender>,
}

/// The state database, if there is one (none: nothing was ever asked or approved).
fn open(ctx: &ManageContext) -> Result<Option<StateStore>> {
    Ok(StateStore::open_existing(&ctx.state_dir())?)
}

fn normalized(channel: &str, account: Option<&str>) -> (String, Option<String>) {
    (
        ids::channel(channel).into_owned(),
        account.map(|a| ids::account_id(a).into_owned()),
    )
}

pub fn list(ctx: &ManageContext, request: &ListRequest) -> Result<PairingList> {
    // A mistyped --state-dir must not look like a hub nobody asked to pair with.
    let Some(store) = open(ctx)? else {
        return Err(super::ManageError::usage(
            format!("no deepcli state in `{}`", ctx.state_dir().root().display()),
            "pass the --state-dir (or DEEPCLI_STATE_DIR) the controller runs with",
        ));
    };
    let channel = request
        .channel
        .as_deref()
        .map(|c| ids::channel(c).into_owned());
    let account = request
        .account
        .as_deref()
        .map(|a| ids::account_id(a).into_owned());
    let (pending, paired) =
        store.pairing(channel.as_deref(), account.as_deref(), records::unix_now())?;
    Ok(PairingList {
        pending: pending
            .into_iter()
            .map(|request| PendingView {
                expires_at: records::unix_to_text(request.expires_at),
                request,
            })
            .collect(),
        paired,
    })
}

/// The approved senders by (channel, account), for `channels list`.
pub(super) fn paired_by_account(
    ctx: &ManageContext,
) -> Result<HashMap<(String, String), Vec<String>>> {
    let mut out: HashMap<(String, String), Vec<String>> = HashMap::new();
    if let Some(store) = open(ctx)? {
        let (_, paired) = store.pairing(None, None, records::unix_now())?;
        for p in paired {
            out.entry((p.channel, p.account_id))
                .or_default()
                .push(p.sender_id);
        }
    }
    Ok(out)
}

pub fn approve(ctx: &ManageContext, request: &ApproveRequest) -> Result<Approved> {
    let code = codes::normalize(&request.code);
    if !codes::well_formed(&code) {
        return Err(ManageError::usage(
            format!(
                "`{}` is not a pairing code: codes are {} letters and digits from {}",
                request.code.trim(),
                codes::CODE_LEN,
                std::str::from_utf8(codes::ALPHABET).unwrap_or_default()
            ),
            "copy the code the sender was given; `deepcli pairing list` shows the pending ones",
        ));
    }
    let (channel, account) = normalized(&request.channel, request.account.as_deref());
    let not_pending = || {
        ManageError::not_found(
            format!("no pending pairing request of channel `{channel}` has this code"),
            Some(
                "codes expire after an hour, and an account keeps only its 3 newest requests: `deepcli pairing list` shows the pending ones".into(),
            ),
        )
    };
    let Some(mut store) = open(ctx)? else {
        return Err(not_pending());
    };
    let guesses = records::Guesses {
        max: codes::WRONG_CODES_PER_WINDOW,
        window_secs: codes::WRONG_CODE_WINDOW_SECS,
    };
    match store.pairing_approve(
        &channel,
        account.as_deref(),
        &code,
        records::unix_now(),
        codes::same,
        &guesses,
    )? {
        Approval::Approved(approved) => {
            tracing::info!(
                channel = %approved.channel,
                account = %approved.account_id,
                sender = %approved.sender_id,
                "pairing approved"
            );
            Ok(Approved { approved })
        }
        Approval::Wrong { left } => {
            let mut e = not_pending();
            if let ManageError::NotFound { message, .. } = &mut e {
                message.push_str(&format!(
                    " ({} before `approve` pauses for this channel)",
                    crate::plural::plural(left as usize, "more wrong code", "more wrong codes")
                ));
            }
            Err(e)
        }
        Approval::Locked { until } => Err(ManageError::refused(
            format!(
                "too many wrong pairing codes for channel `{channel}`: no code is tried until {}",
                records::unix_to_text(until)
            ),
            "check the code with `deepcli pairing list`, and try again after that time",
        )),
    }
}

pub fn revoke(ctx: &ManageContext, request: &RevokeRequest) -> Result<Revoked> {
    let (channel, account) = normalized(&request.channel, request.account.as_deref());
    let sender = request.sender.trim().to_string();
    let revoked = match open(ctx)? {
        Some(mut store) => store.pairing_revoke(&channel, account.as_deref(), &sender)?,
        None => Vec::new(),
    };
    if revoked.is_empty() {
        return Err(ManageError::not_found(
            format!("sender `{sender}` is not paired on channel `{channel}`"),
            Some("`deepcli pairing list` shows the paired senders".into()),
        ));
    }
    Ok(Revoked {
        channel,
        sender,
        revoked,
    })
}
