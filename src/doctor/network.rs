//! Each Slack and Telegram account `deepcli up` would connect (enabled, not `mode: bridge`):
//! its API host (`apiBase`, else the platform's) reached step by step — name, TCP, TLS and an
//! HTTP answer ([`crate::http_client::reach`]) — then, only when the bot token resolves, the
//! platform's credential check (`getMe` / `auth.test`, [`crate::platform::probe::check`]).
//! A network that does not reach the platform is said as such, never as credentials refused.

use std::time::Duration;

use super::{Area, Check, Status};
use crate::config::Config;
use crate::http_client::{self, Unreachable};
use crate::platform::probe::{self, CheckError};
use crate::platform::{self, AdapterSpec};

pub(super) fn check(config: &Config, timeout: Duration) -> Vec<Check> {
    let specs = platform::specs(config);
    if specs.is_empty() {
        return vec![Check::ok(
            Area::Network,
            "-",
            "no Slack or Telegram account for deepcli to connect",
        )];
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return vec![
                Check::new(
                    Area::Network,
                    "-",
                    Status::Fail,
                    format!("cannot run the network checks: {e}"),
                )
                .fix("run `deepcli doctor` again"),
            ];
        }
    };
    runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, spec) in specs.into_iter().enumerate() {
            tasks.spawn(async move { (i, account(spec, timeout).await) });
        }
        let mut done = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            if let Ok(one) = joined {
                done.push(one);
            }
        }
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().flat_map(|(_, checks)| checks).collect()
    })
}

async fn account(spec: AdapterSpec, timeout: Duration) -> Vec<Check> {
    let subject = format!("{}/{}", spec.channel, spec.account);
    if !spec.enabled {
        return vec![Check::ok(
            Area::Network,
            subject,
            "the account is disabled: not checked",
        )];
    }
    let reached = match http_client::reach(&spec.api_base, timeout).await {
        Ok(reached) => reached,
        Err(unreachable) => {
            let fix = match &unreachable {
                Unreachable::NoHost(_) => {
                    "write the account's `apiBase` as a URL (`https://api.telegram.org`), or leave it out"
                }
                Unreachable::Dns { .. } => {
                    "check this host's DNS and network (`getent hosts` the name), or the host name in the account's `apiBase`"
                }
                Unreachable::Connect { .. } => {
                    "check this host's network, firewall and proxy (deepcli honours HTTPS_PROXY), or that something listens at the account's `apiBase`"
                }
                Unreachable::Answer { .. } => {
                    "check the proxy, or TLS interception on the way (its certificate must be among the system's roots)"
                }
            };
            return vec![
                Check::new(
                    Area::Network,
                    subject.clone(),
                    Status::Fail,
                    unreachable.to_string(),
                )
                .fix(fix),
                Check::new(
                    Area::Credentials,
                    subject,
                    Status::Warn,
                    "not checked: the platform was not reached (nothing is known of the credentials)",
                )
                .fix("fix the network first"),
            ];
        }
    };
    let through = reached
        .proxy
        .as_deref()
        .map(|proxy| format!(", through the proxy {}", redact_proxy(proxy)))
        .unwrap_or_default();
    let mut out = vec![Check::ok(
        Area::Network,
        subject.clone(),
        format!(
            "{}:{} answers (HTTP {}{through})",
            reached.host, reached.port, reached.status
        ),
    )];
    if let Err(why) = &spec.bot_token {
        out.push(
            Check::new(
                Area::Credentials,
                subject,
                Status::Warn,
                format!(
                    "not checked: `{}` {why}; nothing was sent",
                    spec.platform.token_field()
                ),
            )
            .fix("make the reference resolve (the secret check above says how)"),
        );
        return out;
    }
    let checked = match http_client::builder().timeout(timeout).build() {
        Ok(http) => tokio::time::timeout(timeout, probe::check(&http, &spec))
            .await
            .unwrap_or_else(|_| {
                Err(CheckError::Failed(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                )))
            }),
        Err(e) => Err(CheckError::Failed(format!(
            "cannot build the HTTP client: {e}"
        ))),
    };
    let method = match spec.platform {
        platform::Platform::Telegram => "getMe",
        platform::Platform::Slack => "auth.test",
        platform::Platform::Discord => "GET /users/@me",
    };
    out.push(match checked {
        Ok(identity) => Check::ok(
            Area::Credentials,
            subject,
            format!(
                "accepted ({method}): bot {} ({})",
                identity.bot_user_id,
                identity.name.as_deref().unwrap_or("no name")
            ),
        ),
        Err(CheckError::Refused(why)) => Check::new(
            Area::Credentials,
            subject,
            Status::Fail,
            format!("credentials refused by the platform ({method}): {why}"),
        )
        .fix(match spec.platform {
            platform::Platform::Telegram => {
                "the token is wrong or revoked: take the bot's token from @BotFather (/token) into the variable or file the reference names"
            }
            platform::Platform::Slack => {
                "the token is wrong or revoked: take the Bot User OAuth Token (xoxb-…) from the Slack app's OAuth & Permissions page"
            }
            platform::Platform::Discord => {
                "the token is wrong or was reset: take the bot's token from its Bot page in the Discord Developer Portal (Reset Token)"
            }
        }),
        Err(CheckError::Unreachable(unreached)) => Check::new(
            Area::Credentials,
            subject,
            Status::Fail,
            format!("not checked: {unreached} (the network, not the credentials)"),
        )
        .fix("the host answered a moment ago: try again, and check the proxy"),
        Err(e @ (CheckError::NoToken(_) | CheckError::Failed(_))) => Check::new(
            Area::Credentials,
            subject,
            Status::Fail,
            format!("the platform did not answer {method} as its API: {e}"),
        )
        .fix("check the account's `apiBase`, or try again later"),
    });
    out
}

/// A proxy URL without its password, if it has one.
fn redact_proxy(proxy: &str) -> String {
    match reqwest::Url::parse(proxy) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("…"));
            url.to_string()
        }
        _ => proxy.to_string(),
    }
}
