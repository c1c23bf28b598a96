//! Rules over channels.yaml: default accounts, account ids, secrets. The inbound policy's rules
//! are `policy.rs`'s.

use std::collections::HashMap;

use super::Context;
use crate::config::model::{SECRET_FIELDS, Secret};
use crate::config::yaml::escape_pointer_token;
use crate::config::{Channel, FileKind};
use crate::diagnostic::{Diagnostic, rules};
use crate::ids::{self, DEFAULT_ACCOUNT};

const FILE: FileKind = FileKind::Channels;

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    for channel in &cx.config.channels {
        default_account(cx, channel, out);
        let mut seen: HashMap<String, String> = HashMap::new();
        for account in channel.accounts() {
            if let Some(first) = seen.get(&account.normalized) {
                out.push(
                    Diagnostic::new(
                        rules::DUPLICATE_ACCOUNT,
                        format!(
                            "accounts `{first}` and `{}` of `{}` are the same account to the router (`{}`)",
                            account.id, channel.id, account.normalized
                        ),
                    )
                    .hint("account ids are compared normalized (trimmed, lowercased): merge or rename one")
                    .at(cx.at_key(FILE, &account.pointer()))
                    .related(
                        cx.at_key(FILE, &format!("{}/accounts/{}", channel.pointer(), escape_pointer_token(first))),
                        "the first spelling",
                    ),
                );
            } else {
                seen.insert(account.normalized.clone(), account.id.to_string());
            }
            let base = account.pointer();
            if account.normalized != account.id {
                out.push(
                    Diagnostic::new(
                        rules::NON_CANONICAL_ID,
                        format!(
                            "account id `{}` is not canonical; the router knows it as `{}`",
                            account.id, account.normalized
                        ),
                    )
                    .hint(format!("rename the key to `{}`", account.normalized))
                    .at(cx.at_key(FILE, &base)),
                );
            }
            let spec = account.spec;
            for field in SECRET_FIELDS {
                let Some(Secret::Inline(text)) = spec.secrets.get(*field) else {
                    continue;
                };
                if text.trim().is_empty() {
                    out.push(empty_secret(cx, channel, account.id, field, &base));
                } else {
                    out.push(
                        Diagnostic::new(
                            rules::INLINE_SECRET,
                            format!(
                                "`{field}` of {}:{} holds an inline secret",
                                channel.id, account.id
                            ),
                        )
                        .hint(format!(
                            "write `{field}: {{source: env, id: VAR}}`, `\"${{VAR}}\"` or `{{source: file, path: PATH}}`, and rotate the secret: it is in your git history"
                        ))
                        .at(cx.at(FILE, &format!("{base}/{field}")))
                        .redacted(),
                    );
                }
            }
        }
    }
}

/// An empty secret holds nothing to leak, but it is no credential either: an empty
/// `webhookSecret` would let anyone sign with the empty key.
fn empty_secret(
    cx: &Context<'_>,
    channel: &Channel,
    account: &str,
    field: &str,
    base: &str,
) -> Diagnostic {
    let why = if field == "webhookSecret" {
        ": anybody can sign with the empty key, so this account would take no messages"
    } else {
        ""
    };
    Diagnostic::new(
        rules::EMPTY_SECRET,
        format!("`{field}` of {}:{account} is empty{why}", channel.id),
    )
    .hint(format!(
        "reference the secret: `{field}: {{source: env, id: VAR}}`, `\"${{VAR}}\"` or `{{source: file, path: PATH}}`; or remove the key"
    ))
    .at(cx.at(FILE, &format!("{base}/{field}")))
}

/// A channel with several accounts must say which is the default: bindings without an
/// `accountId` and messages without one go to the `default` account.
fn default_account(cx: &Context<'_>, channel: &Channel, out: &mut Vec<Diagnostic>) {
    let normalized: Vec<String> = channel.accounts().map(|a| a.normalized).collect();
    if let Some(named) = &channel.spec.default_account {
        let named_id = ids::account_id(named);
        // A channel without accounts has exactly its implicit `default` account.
        let implicit = normalized.is_empty() && named_id == DEFAULT_ACCOUNT;
        if !implicit && !normalized.contains(&named_id.into_owned()) {
            let ids = channel.spec.accounts.keys().map(String::as_str);
            let d = Diagnostic::new(
                rules::UNKNOWN_ACCOUNT,
                format!(
                    "`defaultAccount: {named}` names no account of channel `{}`",
                    channel.id
                ),
            )
            .at(cx.at(FILE, &format!("{}/defaultAccount", channel.pointer())));
            out.push(match crate::suggest::closest(named, ids) {
                Some(near) => d.hint(format!("did you mean `{near}`?")),
                None => d.hint("name one of the accounts declared under `accounts`"),
            });
        }
        return;
    }
    if normalized.len() >= 2 && !normalized.iter().any(|a| a == DEFAULT_ACCOUNT) {
        let first = channel
            .spec
            .accounts
            .keys()
            .next()
            .cloned()
            .unwrap_or_default();
        out.push(
            Diagnostic::new(
                rules::MISSING_DEFAULT_ACCOUNT,
                format!(
                    "channel `{}` has {} accounts but no default: messages and bindings without an account id fall through silently",
                    channel.id,
                    normalized.len()
                ),
            )
            .hint(format!(
                "add `defaultAccount: {first}` to the channel, or name one account `default`"
            ))
            .at(cx.at_key(FILE, &format!("{}/accounts", channel.pointer()))),
        );
    }
}
