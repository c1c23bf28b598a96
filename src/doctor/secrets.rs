//! Every secret reference of the config, resolved here as `deepcli up` would resolve it
//! (`SecretRef::resolve`): set or not, readable or not. The value is dropped at once and never
//! said; a check names the variable or the file only.

use secrecy::ExposeSecret;

use super::{Area, Check, Status};
use crate::config::Config;
use crate::config::model::{AdapterMode, EnvValue, Secret, SecretRef};
use crate::platform::Platform;

/// Who reads a secret, which decides how much its absence matters.
enum Reader {
    /// deepcli itself (the controller, a runtime it starts): the hub does not work without it.
    Deepcli,
    /// Something else (a bridge, another tool), or nothing while it is disabled: said, but not
    /// a failure.
    Other(&'static str),
}

pub(super) fn check(config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    for agent in &config.agents {
        let Some(runtime) = &agent.spec.runtime else {
            continue;
        };
        let reader = if runtime.kind.starts_process() {
            Reader::Deepcli
        } else {
            Reader::Other("its runtime kind starts no process here")
        };
        for (name, value) in &runtime.env {
            if let EnvValue::Secret(reference) = value {
                let subject = format!("agents.{}.runtime.env.{name}", agent.id());
                out.push(one(&subject, &Secret::Ref(reference.clone()), &reader));
            }
        }
        if let Some(token) = &runtime.token {
            let subject = format!("agents.{}.runtime.token", agent.id());
            out.push(one(&subject, token, &Reader::Deepcli));
        }
    }
    for channel in &config.channels {
        let channel_id = crate::ids::channel(&channel.id).into_owned();
        let platform = Platform::of(&channel_id);
        let channel_on = channel.spec.enabled != Some(false);
        for account in channel.accounts() {
            let spec = account.spec;
            let mode = platform.map(|p| spec.mode.unwrap_or(p.default_mode()));
            for (field, secret) in &spec.secrets {
                let reader = if !channel_on || spec.enabled == Some(false) {
                    Reader::Other("the account is disabled")
                } else {
                    read_by(field, platform, mode)
                };
                let subject = format!("channels.{}.accounts.{}.{field}", channel.id, account.id);
                out.push(one(&subject, secret, &reader));
            }
        }
    }
    if let Some(a2a) = &config.a2a {
        for (peer, spec) in &a2a.peers {
            let subject = format!("a2a.peers.{peer}.token");
            out.push(one(&subject, &spec.token, &Reader::Deepcli));
        }
    }
    if out.is_empty() {
        out.push(Check::ok(
            Area::Secret,
            "-",
            "the config references no secret",
        ));
    }
    out
}

/// Who reads an account's secret `field`: the Access layer reads `webhookSecret` of every
/// account; a built-in adapter (Slack, Telegram, Discord, not `mode: bridge`) its bot token
/// (Discord's `token`) and what its mode needs; anything else is the bridge's.
fn read_by(field: &str, platform: Option<Platform>, mode: Option<AdapterMode>) -> Reader {
    let adapter = match (platform, mode) {
        (Some(_), Some(AdapterMode::Bridge)) | (None, _) | (_, None) => None,
        (Some(platform), Some(mode)) => Some((platform, mode)),
    };
    match (field, adapter) {
        ("webhookSecret", _) => Reader::Deepcli,
        ("botToken", Some((Platform::Slack | Platform::Telegram, _))) => Reader::Deepcli,
        ("token", Some((Platform::Discord, _))) => Reader::Deepcli,
        ("appToken", Some((Platform::Slack, AdapterMode::Socket))) => Reader::Deepcli,
        ("signingSecret", Some((Platform::Slack, AdapterMode::Http))) => Reader::Deepcli,
        (_, None) if platform.is_some() => {
            Reader::Other("the account is `mode: bridge`: its bridge reads it, not deepcli")
        }
        (_, None) => Reader::Other("deepcli has no adapter for this channel: its bridge reads it"),
        (_, Some(_)) => Reader::Other("the adapter does not read it in this mode"),
    }
}

fn one(subject: &str, secret: &Secret, reader: &Reader) -> Check {
    let reference = match secret {
        Secret::Ref(reference) => reference,
        Secret::Inline(_) => {
            return Check::new(
                Area::Secret,
                subject,
                Status::Fail,
                "written inline (the value is not shown)",
            )
            .fix("reference it instead: `{source: env, id: NAME}` or `{source: file, path: …}`, and take the value out of the file (and its history)");
        }
    };
    let (what, mut check) = match reference {
        SecretRef::Env { id } => {
            let what = format!("env {id}");
            let check = Check::ok(Area::Secret, subject, "");
            (
                what,
                Check {
                    env: Some(id.clone()),
                    ..check
                },
            )
        }
        SecretRef::File { path } => {
            let what = format!("file {path}");
            let check = Check::ok(Area::Secret, subject, "");
            (
                what,
                Check {
                    file: Some(path.clone()),
                    ..check
                },
            )
        }
    };
    let problem = match reference.resolve() {
        Ok(value) if value.expose_secret().trim().is_empty() => Some((
            format!("{what} is empty"),
            match reference {
                SecretRef::Env { id } => format!("set {id} to the secret"),
                SecretRef::File { path } => format!("write the secret into {path}"),
            },
        )),
        Ok(_) => None,
        Err(crate::config::model::SecretError::Unset { id }) => Some((
            format!("{what} is not set"),
            format!("export {id}=… in the environment `deepcli up` runs in"),
        )),
        Err(crate::config::model::SecretError::File { path, source }) => Some((
            format!("{what} cannot be read: {source}"),
            format!(
                "write the secret alone into {path} (readable by the user `deepcli up` runs as)"
            ),
        )),
    };
    match (problem, reader) {
        (None, _) => {
            check.message = format!("{what} is set");
            if let SecretRef::File { .. } = reference {
                check.message = format!("{what} is readable");
            }
        }
        (Some((message, fix)), Reader::Deepcli) => {
            check.status = Status::Fail;
            check.message = message;
            check.fix = Some(fix);
        }
        (Some((message, fix)), Reader::Other(why)) => {
            check.status = Status::Warn;
            check.message = format!("{message} ({why})");
            check.fix = Some(fix);
        }
    }
    check
}
