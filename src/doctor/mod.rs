//! `deepcli doctor`: what a hub needs from the machine it runs on, checked one thing at a time —
//! the secrets the config references resolve (names only, never a value), the runtimes'
//! programs are there, a sandbox backend can enforce each runtime's sandbox, the controller's
//! address is free, and each Slack or Telegram account's API host answers, with a network that
//! does not reach it said apart from credentials the platform refuses.
//!
//! Every check is a [`Check`]: ok, warn or fail, with what to do about a failure. Only
//! `network.rs` touches the network; nothing here prints (the command line renders the
//! checks) or writes anything.

mod listen;
mod network;
mod runtimes;
mod secrets;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::config::Config;

pub(crate) use listen::Controller;

/// How a check came out. Ordered: the worst is the greatest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    /// Works, but worth knowing: a secret deepcli does not read is missing, a step was not
    /// checked.
    Warn,
    /// The hub will not work as configured until this is fixed.
    Fail,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// What a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Area {
    /// The config files validate.
    Config,
    /// A secret reference resolves.
    Secret,
    /// A runtime's program is there.
    Runtime,
    /// A sandbox backend can enforce a runtime's sandbox.
    Sandbox,
    /// The controller's address.
    Listen,
    /// A platform account's API host answers from here.
    Network,
    /// The platform takes an account's credentials.
    Credentials,
}

impl Area {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Area::Config => "config",
            Area::Secret => "secret",
            Area::Runtime => "runtime",
            Area::Sandbox => "sandbox",
            Area::Listen => "listen",
            Area::Network => "network",
            Area::Credentials => "credentials",
        }
    }
}

/// One line of the doctor's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Check {
    #[serde(rename = "check")]
    pub area: Area,
    /// What it is about: `channels.telegram.accounts.default.botToken`, an agent's id,
    /// `telegram/default`, an address.
    pub subject: String,
    pub status: Status,
    pub message: String,
    /// What to do about it (warnings and failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// A secret read from the environment: the variable's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A secret read from a file: its path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl Check {
    pub(crate) fn new(
        area: Area,
        subject: impl Into<String>,
        status: Status,
        message: impl Into<String>,
    ) -> Check {
        Check {
            area,
            subject: subject.into(),
            status,
            message: message.into(),
            fix: None,
            env: None,
            file: None,
        }
    }

    pub(crate) fn ok(area: Area, subject: impl Into<String>, message: impl Into<String>) -> Check {
        Check::new(area, subject, Status::Ok, message)
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

/// What the checks need besides the config.
#[derive(Debug, Clone)]
pub(crate) struct Options<'a> {
    /// The state directory `deepcli up` would use.
    pub state_dir: &'a Path,
    /// What `~` means.
    pub home: Option<&'a Path>,
    /// Where `deepcli up` would listen.
    pub listen: SocketAddr,
    /// The controller running on the state directory, if one does.
    pub controller: Option<Controller>,
    /// The bound of each account's network checks together.
    pub timeout: Duration,
    /// How many errors and warnings `validate` found.
    pub errors: usize,
    pub warnings: usize,
    /// The directory holds none of the three files.
    pub empty: bool,
}

/// Every check, in the order they are shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Doctor {
    pub checks: Vec<Check>,
}

impl Doctor {
    /// The worst status of any check.
    pub(crate) fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    pub(crate) fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// The environment variables whose secret deepcli needs and does not resolve, each once,
    /// in order.
    pub(crate) fn to_export(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for c in &self.checks {
            if let Some(env) = c.env.as_deref()
                && c.status == Status::Fail
                && !out.contains(&env)
            {
                out.push(env);
            }
        }
        out
    }

    /// The secret files deepcli needs and cannot read, each once, in order.
    pub(crate) fn missing_files(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for c in &self.checks {
            if let Some(file) = c.file.as_deref()
                && c.status == Status::Fail
                && !out.contains(&file)
            {
                out.push(file);
            }
        }
        out
    }
}

/// Runs every check on `config` (loaded from `config.dir`) and this machine.
pub(crate) fn run(config: &Config, options: &Options<'_>) -> Doctor {
    let mut checks = vec![config_check(config, options)];
    checks.extend(secrets::check(config));
    checks.extend(runtimes::commands(config, options.home));
    checks.extend(runtimes::answerless(config));
    checks.extend(runtimes::sandboxes(config, options.state_dir, options.home));
    checks.push(listen::check(options.listen, options.controller.as_ref()));
    checks.extend(network::check(config, options.timeout));
    Doctor { checks }
}

fn config_check(config: &Config, options: &Options<'_>) -> Check {
    use crate::plural::plural;
    let subject = config.dir.display().to_string();
    let counted = format!(
        "{}, {}",
        plural(options.errors, "error", "errors"),
        plural(options.warnings, "warning", "warnings")
    );
    let validate = format!("deepcli validate --config {subject}");
    if options.empty {
        Check::new(
            Area::Config,
            subject,
            Status::Fail,
            "none of agents.yaml, channels.yaml, bindings.yaml is here",
        )
        .fix("pass the hub's directory with --config DIR, or write a new hub with `deepcli init DIR`")
    } else if options.errors > 0 {
        Check::new(
            Area::Config,
            subject,
            Status::Fail,
            format!("invalid: {counted}"),
        )
        .fix(format!(
            "`{validate}` shows each at file:line:col; `deepcli up` refuses a config with errors"
        ))
    } else if options.warnings > 0 {
        Check::new(
            Area::Config,
            subject,
            Status::Warn,
            format!("valid: {counted}"),
        )
        .fix(format!("`{validate}` shows them"))
    } else {
        Check::ok(Area::Config, subject, format!("valid: {counted}"))
    }
}
