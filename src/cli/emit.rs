//! What `agents …` and `channels …` share: the management context, the flags of the commands
//! that write, and [`emit`], the one way a management result reaches the terminal (the JSON
//! document with `--json`, else the command's own few lines; a failure printed the same way for
//! every command).

use std::io::Write;

use clap::Args;
use serde::Serialize;

use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::{self, ManageContext, ManageError, agents, channel_policy, channels, pairing};

pub(crate) const MANAGE_EXIT_CODES: &str = "\
Exit codes:
  0  done (or, with --dry-run, the diff printed)
  1  refused or failed: a conflict, an unknown agent, an edit that would make the config
     invalid, a file changed by someone else meanwhile; nothing was written
  2  could not run: bad flags (a malformed --bind), unreadable config directory";

pub(crate) const PAIRING_EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  refused: no pending request has the code (or too many wrong codes: approve pauses),
     the sender is not paired
  2  could not run: bad flags, a code that cannot be one, a damaged state database";

#[derive(Debug, Args)]
pub(super) struct WriteArgs {
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Show the diff of the files instead of writing them.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// The management context of the CLI: live status from a running controller over HTTP.
pub(crate) fn context(global: &GlobalSettings) -> ManageContext {
    let mut ctx = ManageContext::new(&global.config_dir, global.load.clone());
    let dir = ctx.state_dir();
    ctx.live = Some(std::sync::Arc::new(move || {
        let store = crate::state::StateStore::open_existing(&dir).ok()??;
        serde_json::to_value(crate::controller::client::controller_status(&dir, &store)?).ok()
    }));
    ctx
}

/// A management result, as the command line ends on it.
pub(crate) trait Outcome: Serialize {
    /// The call returned a result that is a failure in itself: a bind conflict (nothing was
    /// written) exits 1, with or without `--json`.
    fn refused(&self) -> bool {
        false
    }
}

impl Outcome for agents::ListResult {}
impl Outcome for agents::BindingsResult {}
impl Outcome for agents::SetIdentityResult {}
impl Outcome for agents::DeleteResult {}
impl Outcome for channels::ChannelsList {}
/// An enabled account that cannot work fails the command (exit 1), as `status` does for a
/// degraded hub: a credential missing, its adapter refused, or `--probe` refused or not
/// reaching the platform.
impl Outcome for channels::StatusResult {
    fn refused(&self) -> bool {
        self.accounts.iter().any(|a| {
            let adapter_refused = a
                .live
                .as_ref()
                .is_some_and(|l| l["adapter"]["state"] == "auth_failed");
            let probe_failed = a
                .probe
                .as_ref()
                .is_some_and(|p| matches!(p.result.as_str(), "refused" | "unreachable" | "failed"));
            a.enabled && (!a.configured || adapter_refused || probe_failed)
        })
    }
}
impl Outcome for channels::CapabilitiesResult {}
impl Outcome for channels::AddResult {}
impl Outcome for channels::RemoveResult {}
impl Outcome for channel_policy::SetResult {}
impl Outcome for channels::LogsResult {}
impl Outcome for channels::LoginResult {}
impl Outcome for channels::LogoutResult {}

/// A name not found, or ambiguous, fails the command (exit 1): a script cannot bind it.
impl Outcome for channels::ResolveResult {
    fn refused(&self) -> bool {
        self.names.iter().any(|n| n.status != "found")
    }
}
impl Outcome for pairing::PairingList {}
impl Outcome for pairing::Approved {}
impl Outcome for pairing::Revoked {}

impl Outcome for agents::AddResult {
    fn refused(&self) -> bool {
        self.bindings.refused()
    }
}

impl Outcome for agents::BindResult {
    fn refused(&self) -> bool {
        !self.conflicts.is_empty()
    }
}

impl Outcome for agents::UnbindResult {
    fn refused(&self) -> bool {
        !self.conflicts.is_empty()
    }
}

/// Prints a management call's result — its JSON document with `--json`, else what `human`
/// writes to `out` — or its failure, and says how the command ends.
pub(crate) fn emit<T: Outcome>(
    out: Output,
    result: manage::Result<T>,
    json: bool,
    human: impl FnOnce(&T, Output),
) -> ExitStatus {
    let result = match result {
        Ok(result) => result,
        Err(e) => return fail(&e),
    };
    if json {
        print_json(&result);
    } else {
        human(&result, out);
    }
    if result.refused() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    }
}

/// Prints a failure (diagnostics of an invalid edit included) and maps it to an exit status.
pub(crate) fn fail(e: &ManageError) -> ExitStatus {
    let mut err = anstream::stderr();
    if let ManageError::Invalid {
        rendered, edited, ..
    } = e
    {
        let _ = err.write_all(rendered.as_bytes());
        // The diagnostics point into the would-be text: a line the edit added may be past the
        // end of the file on disk.
        let _ = match edited.as_slice() {
            [] => Ok(()),
            [file] => writeln!(
                err,
                "note: line numbers in {file} are those of the file as this command would have written it, not as it is on disk"
            ),
            [files @ .., last] => writeln!(
                err,
                "note: line numbers in {} and {last} are those of the files as this command would have written them, not as they are on disk",
                files.join(", ")
            ),
        };
    }
    let _ = writeln!(err, "error: {e}");
    if let Some(hint) = e.hint() {
        let _ = writeln!(err, "hint: {hint}");
    }
    match e.exit_code() {
        2 => ExitStatus::Error,
        _ => ExitStatus::Failure,
    }
}

pub(super) fn print_json<T: Serialize>(value: &T) {
    let _ = writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Prints what a write did: with --dry-run, the diff (the answer) and the files it would
/// write; else the files written.
pub(crate) fn print_written(written: &manage::Written, out: Output) {
    let mut notes = out.note();
    match &written.diff {
        Some(diff) if diff.is_empty() => {
            let _ = writeln!(notes, "Nothing would change: the files already say so.");
        }
        Some(diff) => {
            let _ = out.answer().write_all(diff.as_bytes());
            let _ = writeln!(
                notes,
                "Would write {}; nothing was written (--dry-run).",
                written.files.join(", ")
            );
        }
        None if written.files.is_empty() => {
            let _ = writeln!(notes, "No changes: the files already say so.");
        }
        None => {
            let _ = writeln!(notes, "Wrote {}.", written.files.join(", "));
        }
    }
}
