//! Who hands an envelope in, and whether it may: the channel account's `X-Deepcli-Signature`
//! (HMAC-SHA256 of the body with its webhook secret, compared in constant time), the operator,
//! or a platform adapter the controller runs.

use super::plan::{self, AccessPlan};
use super::{AccessError, Unauthenticated};
use crate::ids;
use crate::ids::AccountKey;
use crate::routing::RouteInput;

/// Who hands an envelope in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HandedInBy<'a> {
    /// A platform (or its adapter), with the `X-Deepcli-Signature` header it sent, if any.
    Signed(Option<&'a str>),
    /// The operator, authenticated by the operator token (`deepcli inbound send`): speaks for
    /// any declared, enabled account without its secret.
    Operator,
    /// A platform adapter the controller runs for the account (`crate::adapters`): the
    /// platform authenticated the event (Slack's signature, Telegram's secret token, or the
    /// adapter's own connection), so no `X-Deepcli-Signature` is asked for.
    Adapter,
}

/// Lets an envelope in: its channel account (the one the route names) is declared, verifies
/// the signature (unless the operator hands it in), and is enabled.
pub(super) fn authenticate(
    plan: &AccessPlan,
    input: &RouteInput,
    result: &crate::routing::RouteResult,
    body: &[u8],
    caller: HandedInBy<'_>,
) -> Result<(), AccessError> {
    let channel = ids::channel(&input.channel).into_owned();
    let account_id = result.account_id.to_string();
    let Some(account) = plan.accounts.get(&AccountKey::new(&channel, &account_id)) else {
        // The built-in `cli` channel is the operator's own: it needs no account to be declared
        // (config.md), and only the operator speaks on it.
        if matches!(caller, HandedInBy::Operator) && channel == ids::CLI_CHANNEL {
            return Ok(());
        }
        return Err(AccessError::Unauthenticated(
            Unauthenticated::UnknownAccount {
                channel,
                account: account_id,
            },
        ));
    };
    if let HandedInBy::Signed(signature) = caller {
        verify_signature(account, (&channel, &account_id), body, signature)
            .map_err(AccessError::Unauthenticated)?;
    }
    if !account.enabled {
        return Err(AccessError::Disabled {
            channel,
            account: account_id,
        });
    }
    Ok(())
}

/// Checks `X-Deepcli-Signature: sha256=<hex HMAC-SHA256 of the body>` against the webhook
/// secret of `account` (`channel/account_id`), in constant time.
fn verify_signature(
    account: &plan::AccountAccess,
    (channel, account_id): (&str, &str),
    body: &[u8],
    signature: Option<&str>,
) -> Result<(), Unauthenticated> {
    use hmac::Mac;
    let names = || (channel.to_string(), account_id.to_string());
    let secret = account.webhook_secret.as_ref().map_err(|why| {
        let (channel, account) = names();
        Unauthenticated::NoSecret {
            channel,
            account,
            why: why.clone(),
        }
    })?;
    let given = signature.ok_or(Unauthenticated::MissingSignature)?;
    let bytes = given
        .trim()
        .strip_prefix("sha256=")
        .and_then(|digits| hex::decode(digits).ok())
        .ok_or(Unauthenticated::MalformedSignature)?;
    let wrong = || {
        let (channel, account) = names();
        Unauthenticated::WrongSignature { channel, account }
    };
    // HMAC takes a key of any length: this cannot fail.
    let key = secrecy::ExposeSecret::expose_secret(secret).as_bytes();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).map_err(|_| wrong())?;
    mac.update(body);
    mac.verify_slice(&bytes).map_err(|_| wrong())
}

/// `sha256=<hex>` of `body` with `secret`: what a caller sends (and the reply sink signs with).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = match hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The header a platform's (or bridge's) HMAC-SHA256 of the body comes in.
pub(crate) const SIGNATURE_HEADER: &str = "x-deepcli-signature";

/// Compares in constant time (tokens, signatures); a length that differs is told at once.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(secret: &str) -> plan::AccountAccess {
        plan::AccountAccess {
            enabled: true,
            webhook_secret: Ok(secret.into()),
            reply_url: None,
        }
    }

    #[test]
    fn a_signature_made_by_sign_verifies_and_any_other_does_not() {
        let body = br#"{"channel":"slack","messageId":"1","text":"hi"}"#;
        let signed = sign(b"secret", body);
        assert!(signed.starts_with("sha256="), "{signed}");
        assert_eq!(signed.len(), 7 + 64);
        let check = |signature: Option<&str>| {
            verify_signature(&account("secret"), ("slack", "default"), body, signature)
        };
        assert_eq!(check(Some(&signed)), Ok(()));
        assert_eq!(
            check(Some(&signed.to_uppercase().replace("SHA256=", "sha256="))),
            Ok(())
        );
        assert_eq!(check(None), Err(Unauthenticated::MissingSignature));
        assert_eq!(
            check(Some("sha256=zz")),
            Err(Unauthenticated::MalformedSignature)
        );
        assert_eq!(
            check(Some(&signed[..signed.len() - 1])),
            Err(Unauthenticated::MalformedSignature)
        );
        assert!(matches!(
            check(Some(&sign(b"other", body))),
            Err(Unauthenticated::WrongSignature { .. })
        ));
    }
}
