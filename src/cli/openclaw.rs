//! `deepcli import openclaw` and `deepcli export openclaw`: arguments → `manage::openclaw` →
//! the report (human or `--json`).

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::emit::{fail, print_json};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::openclaw::{ExportResult, ImportResult, export_openclaw, import_openclaw};
use crate::plural::plural;

pub(crate) const IMPORT_EXIT_CODES: &str = "\
Exit codes:
  0  imported: the files validate and every route agrees (warnings and unsupported keys are
     reported, not failures)
  1  the imported files do not validate, or a route disagrees with OpenClaw's (the files are
     written so you can fix them; the findings say where)
  2  could not run: the input is not JSON5 or too large, a file exists (use --force), bad flags";

#[derive(Debug, Subcommand)]
pub(super) enum ImportCommand {
    /// Convert an openclaw.json (JSON5) into agents.yaml, channels.yaml and bindings.yaml.
    #[command(after_help = IMPORT_EXIT_CODES)]
    Openclaw(ImportArgs),
}

#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// The openclaw.json to import, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    file: PathBuf,
    /// Where to write the three files (created if missing).
    #[arg(long, value_name = "DIR", default_value = ".")]
    out: PathBuf,
    /// Overwrite agents.yaml, channels.yaml and bindings.yaml if they exist.
    #[arg(long)]
    force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub(super) enum ExportCommand {
    /// Print the config (--config DIR) as an openclaw.json fragment for OpenClaw 2026.9.
    Openclaw(ExportArgs),
}

#[derive(Debug, Args)]
pub(super) struct ExportArgs {
    /// Write the fragment to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write JSON5 (unquoted keys) instead of JSON.
    #[arg(long)]
    json5: bool,
    /// Print the result (fragment and what was left out) as JSON.
    #[arg(long)]
    json: bool,
}

pub(super) fn import(global: &GlobalSettings, command: ImportCommand) -> ExitStatus {
    let ImportCommand::Openclaw(args) = command;
    let (bytes, source) = match read_input(&args.file) {
        Ok(read) => read,
        Err(message) => {
            let _ = writeln!(anstream::stderr(), "error: {message}");
            return ExitStatus::Error;
        }
    };
    let result = match import_openclaw(&global.load, &bytes, &source, &args.out, args.force) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if args.json {
        print_json(&result);
    } else {
        let _ = anstream::stderr().write_all(result.rendered.as_bytes());
        let _ = anstream::stdout().write_all(human(&result, global.output).as_bytes());
    }
    if result.failed() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    }
}

/// The input's bytes (at most one byte past the limit: the parser says how large is too
/// large) and how to name it.
fn read_input(file: &PathBuf) -> Result<(Vec<u8>, String), String> {
    let limit = crate::openclaw::json5::MAX_BYTES + 1;
    let mut bytes = Vec::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return Ok((bytes, "openclaw.json (standard input)".into()));
    }
    let size = std::fs::metadata(file)
        .map_err(|e| format!("cannot read `{}`: {e}", file.display()))?
        .len();
    if size >= limit {
        return Err(format!(
            "`{}` is {size} bytes; import reads at most {} bytes (an openclaw.json is a few kilobytes: is this the right file?)",
            file.display(),
            limit - 1
        ));
    }
    std::fs::File::open(file)
        .and_then(|f| f.take(limit).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok((bytes, name))
}

/// The human report: what was written, the agreement, the variables to set, what did not
/// carry over.
pub(crate) fn human(r: &ImportResult, out: Output) -> String {
    let mut s = String::new();
    if !out.quiet {
        s.push_str(&format!("Wrote {} in {}.\n", r.files.join(", "), r.dir));
    }
    let a = &r.routes;
    s.push_str(&format!("routes agree: {}/{}\n", a.agreed, a.total));
    for d in &a.disagreements {
        let key = |k: &Option<String>| k.as_deref().map(|k| format!(" ({k})")).unwrap_or_default();
        s.push_str(&format!(
            "error: {} routes differently: OpenClaw sends it to {}{}, deepcli to {}{}\n",
            d.probe,
            d.openclaw.agent_id,
            key(&d.openclaw.session_key),
            d.deepcli.agent_id,
            key(&d.deepcli.session_key),
        ));
    }
    for refused in &a.refused {
        s.push_str(&format!(
            "note: {}: {}; deepcli sends it to {}\n",
            refused.probe, refused.why, refused.deepcli.agent_id
        ));
    }
    if !r.secrets.is_empty() {
        s.push_str("\nSet these before `deepcli up` (no secret was copied; every variable the files reference):\n");
        let width = r
            .secrets
            .iter()
            .map(|v| v.variable.len())
            .max()
            .unwrap_or(0);
        for v in &r.secrets {
            let was = match &v.kind {
                crate::openclaw::SecretKind::Env => format!("referenced at {}", v.from),
                crate::openclaw::SecretKind::Inline => format!("was inline at {}", v.from),
                crate::openclaw::SecretKind::Exec(r) => format!("was {r} at {}", v.from),
                crate::openclaw::SecretKind::FileJson(r) => format!("was {r} at {}", v.from),
                crate::openclaw::SecretKind::Other(r) => format!("was {r} at {}", v.from),
            };
            s.push_str(&format!("  {:width$}  {}  ({was})\n", v.variable, v.target));
        }
    }
    if !r.unsupported.is_empty() {
        s.push_str(&format!(
            "\nNot carried over ({}):\n",
            plural(r.unsupported.len(), "key", "keys")
        ));
        for u in &r.unsupported {
            s.push_str(&format!("  {} ({}): {}\n", u.path, u.shape, u.why));
        }
    }
    if !r.notes.is_empty() {
        s.push('\n');
        for n in &r.notes {
            s.push_str(&format!("note: {n}\n"));
        }
    }
    s.push_str(&format!(
        "\nvalidate: {}, {}\n",
        plural(r.errors, "error", "errors"),
        plural(r.warnings, "warning", "warnings")
    ));
    s
}

pub(super) fn export(global: &GlobalSettings, command: ExportCommand) -> ExitStatus {
    let ExportCommand::Openclaw(args) = command;
    let ctx = crate::manage::ManageContext::new(&global.config_dir, global.load.clone());
    let result: ExportResult = match export_openclaw(&ctx, args.json5) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    if let Some(path) = &args.out
        && let Err(e) = crate::durable::write_file(path, result.text.as_bytes(), true)
    {
        let _ = writeln!(
            anstream::stderr(),
            "error: cannot write `{}`: {e}",
            path.display()
        );
        return ExitStatus::Failure;
    }
    if args.json {
        print_json(&result);
    } else if args.out.is_none() {
        let _ = anstream::stdout().write_all(result.text.as_bytes());
    }
    // Notes go to stderr: stdout may be the fragment itself.
    if !global.output.quiet {
        let mut err = anstream::stderr();
        for l in &result.left_out {
            let _ = writeln!(err, "note: left out {}: {}", l.path, l.why);
        }
        if let Some(path) = &args.out {
            let _ = writeln!(err, "Wrote {}.", path.display());
        }
    }
    ExitStatus::Success
}
