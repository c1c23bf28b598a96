//! `deepcli doctor`: the config directory and this machine, checked one line at a time
//! (`crate::doctor`), as text or JSON.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anstyle::{AnsiColor, Style};
use clap::Args;
use serde::Serialize;

use super::{ExitStatus, GlobalSettings};
use crate::doctor::{self, Check, Controller, Doctor, Status};
use crate::plural::plural;
use crate::state::{LeasePurpose, StateStore};

/// The most a platform's network checks may take.
const MAX_TIMEOUT_MS: u64 = 30_000;

#[derive(Debug, Args)]
#[command(after_help = "\
Secrets are resolved in this shell's environment and files, as `deepcli up` started from it
would resolve them; values are never printed. The network checks send no credential until the
platform's host answered, and then only to its credential check (getMe, auth.test).

Exit codes:
  0  nothing failed (warnings allowed)
  1  a check failed: its line says what to do
  2  the doctor could not run (unreadable config directory, bad flags)")]
pub(super) struct DoctorArgs {
    /// The address `deepcli up` will listen on (its --listen).
    #[arg(long, default_value = "127.0.0.1:7430", value_name = "ADDR")]
    listen: SocketAddr,
    /// Bound of each Slack or Telegram account's network checks, in milliseconds (at most
    /// 30000).
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// `doctor --json`'s document.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Document<'a> {
    format_version: &'static str,
    config_dir: String,
    state_dir: String,
    /// `ok`, `warn` or `fail`: the worst check.
    status: Status,
    checks: &'a [Check],
    /// The environment variables to export before `deepcli up`.
    export: Vec<&'a str>,
    /// The secret files that cannot be read.
    missing_files: Vec<&'a str>,
}

pub(super) fn run(global: &GlobalSettings, args: DoctorArgs) -> ExitStatus {
    let report = match crate::validate::validate_dir(&global.config_dir, &global.load) {
        Ok(report) => report,
        Err(e) => {
            let mut err = anstream::stderr();
            let _ = writeln!(err, "error: {e}");
            let _ = writeln!(
                err,
                "hint: pass the config directory with --config DIR (or DEEPCLI_CONFIG); `deepcli init DIR` writes a new one"
            );
            return ExitStatus::Error;
        }
    };
    let empty = report
        .diagnostics
        .iter()
        .any(|d| d.rule.id == crate::diagnostic::rules::NOTHING_DECLARED.id);
    let options = doctor::Options {
        state_dir: &global.load.state_dir,
        home: global.load.home.as_deref(),
        listen: args.listen,
        controller: controller(global),
        timeout: Duration::from_millis(args.timeout.clamp(1, MAX_TIMEOUT_MS)),
        errors: report.errors(),
        warnings: report.warnings(),
        empty,
    };
    let doctor = doctor::run(&report.config, &options);
    let written = if args.json {
        let document = Document {
            format_version: "1",
            config_dir: global.config_dir.display().to_string(),
            state_dir: global.load.state_dir.display().to_string(),
            status: doctor.worst(),
            checks: &doctor.checks,
            export: doctor.to_export(),
            missing_files: doctor.missing_files(),
        };
        match serde_json::to_string_pretty(&document) {
            Ok(text) => writeln!(std::io::stdout().lock(), "{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitStatus::Error;
            }
        }
    } else {
        anstream::stdout().write_all(human(&doctor).as_bytes())
    };
    if written.is_err() {
        return ExitStatus::Error;
    }
    match doctor.worst() {
        Status::Fail => ExitStatus::Failure,
        Status::Ok | Status::Warn => ExitStatus::Success,
    }
}

/// The controller holding the state directory's lease, with the address it recorded.
fn controller(global: &GlobalSettings) -> Option<Controller> {
    let dir = global.state();
    let store = StateStore::open_existing(&dir).ok()??;
    let holder = store.lease_holder().ok()??;
    if holder.purpose != LeasePurpose::Controller {
        return None;
    }
    let meta = |key: &str| store.meta_value(key).ok().flatten();
    // An address recorded by an earlier controller is not this one's.
    let addr = (meta(crate::controller::client::PID_KEY) == Some(holder.pid.to_string()))
        .then(|| meta(crate::controller::client::ADDR_KEY)?.parse().ok())
        .flatten();
    Some(Controller {
        pid: holder.pid,
        addr,
    })
}

const OK: Style = AnsiColor::Green.on_default().bold();
const WARN: Style = AnsiColor::Yellow.on_default().bold();
const FAIL: Style = AnsiColor::Red.on_default().bold();
const DIM: Style = Style::new().dimmed();

/// One line per check, each failure and warning with what to do; then what to export and the
/// counts.
fn human(doctor: &Doctor) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for check in &doctor.checks {
        let style = match check.status {
            Status::Ok => OK,
            Status::Warn => WARN,
            Status::Fail => FAIL,
        };
        let status = check.status.as_str();
        let subject = match check.subject.as_str() {
            "-" => String::new(),
            subject => format!("{subject}: "),
        };
        let _ = writeln!(
            out,
            "{style}{status:<4}{style:#}  {:<11}  {subject}{}",
            check.area.as_str(),
            check.message
        );
        if let Some(fix) = &check.fix {
            let _ = writeln!(out, "{:19}{DIM}fix:{DIM:#} {fix}", "");
        }
    }
    let export = doctor.to_export();
    if !export.is_empty() {
        let _ = writeln!(out, "\nExport before `deepcli up`: {}", export.join(" "));
    }
    let files = doctor.missing_files();
    if !files.is_empty() {
        let _ = writeln!(out, "\nSecret files to write: {}", files.join(" "));
    }
    let _ = writeln!(
        out,
        "\n{}, {}, {}",
        plural(doctor.count(Status::Fail), "failure", "failures"),
        plural(doctor.count(Status::Warn), "warning", "warnings"),
        plural(doctor.count(Status::Ok), "check ok", "checks ok")
    );
    out
}
