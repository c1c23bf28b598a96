//! `deepcli import openclaw` and `deepcli export openclaw`: arguments → `manage::openclaw` →
//! the report (human or `--json`).

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::emit::{fail, print_json};
use super::{ExitStatus, GlobalSettings, Output};
use crate::manage::openclaw::{ExportResult, ImportResult, export_openclaw, import_openclaw};
use crate::openclaw::agree;
use crate::plural::plural;

pub(crate) const IMPORT_EXIT_CODES: &str = "\
Exit codes:
  0  imported: the files validate, every route agrees and the inbound policy decides every
     probed message as OpenClaw does (warnings and unsupported keys are reported, not failures)
  1  the imported files do not validate, a route disagrees with OpenClaw's, or the inbound
     policy decides a message differently (the files are written so you can fix them; the
     findings say where)
  2  could not run: the input is not JSON5 or too large, a file exists (use --force), bad flags";

#[derive(Debug, Subcommand)]
pub(super) enum ImportCommand {
    /// Convert an openclaw.json (JSON5) into agents.yaml, channels.yaml and bindings.yaml.
    ///
    /// The files go into the config directory (--config, or DEEPCLI_CONFIG), unless --out
    /// names another, with the schemas their modelines name. They are validated as `deepcli
    /// validate` would validate them there, with --state-dir: the default workspaces and
    /// agentDirs lie in the state directory, and the rules check them.
    #[command(after_help = IMPORT_EXIT_CODES)]
    Openclaw(ImportArgs),
}

#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// The openclaw.json to import, or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    file: PathBuf,
    /// Where to write the three files (created if missing) [default: the config directory,
    /// --config].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Overwrite agents.yaml, channels.yaml and bindings.yaml if they exist.
    #[arg(long)]
    force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) const EXPORT_EXIT_CODES: &str = "\
Exit codes:
  0  exported: OpenClaw would route every probed message and let the same ones through its
     inbound policy as deepcli does with the config (left-out keys are notes, not failures)
  1  OpenClaw would route or gate a message differently (the fragment is written all the
     same; the errors name the messages), or the config does not validate (nothing written)
  2  could not run: bad flags, an unreadable config directory";

#[derive(Debug, Subcommand)]
pub(super) enum ExportCommand {
    /// Print the config (--config DIR) as an openclaw.json fragment for OpenClaw 2026.9.
    ///
    /// The config is validated first, as `deepcli validate` would with --state-dir (the
    /// default workspaces and agentDirs lie in the state directory); an invalid one is not
    /// exported. Then OpenClaw's routing and inbound gate on the fragment are held to
    /// deepcli's on the config, and every difference is an error.
    #[command(after_help = EXPORT_EXIT_CODES)]
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
    let out = args.out.as_ref().unwrap_or(&global.config_dir);
    let result = match import_openclaw(&global.load, &bytes, &source, out, args.force) {
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
        s.push_str(&format!(
            "Wrote {} in {} (and the schemas their modelines name, in {}).\n",
            r.files.join(", "),
            r.dir,
            r.schema_dir
        ));
    }
    s.push_str(&agreement(&r.routes, &r.policy));
    if !r.no_runtime.is_empty() {
        const SHOWN: usize = 10;
        let mut names = r
            .no_runtime
            .iter()
            .take(SHOWN)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if r.no_runtime.len() > SHOWN {
            names.push_str(&format!(", and {} more", r.no_runtime.len() - SHOWN));
        }
        let (them, each) = match r.no_runtime.len() {
            1 => ("it", "it"),
            _ => ("them", "each"),
        };
        s.push_str(&format!(
            "\nNo runtime for {} (`deepcli up` starts nothing for {them}): {names}\n",
            plural(r.no_runtime.len(), "agent", "agents")
        ));
        s.push_str(&format!(
            "  OpenClaw ran {them} itself; deepcli starts the ACP agent you name. Give {each} a runtime in\n  agents.yaml, e.g. `runtime: {{kind: acp, command: [codex-acp]}}` (docs/controller.md,\n  \"Running real agents\"), or add agents with `deepcli agents add NAME -- COMMAND`.\n",
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

/// The agreement with OpenClaw, routes then the inbound policy: the counts, each disagreement
/// as an error, what OpenClaw refuses to route and what was not compared as notes.
fn agreement(routes: &agree::Agreement, policy: &agree::PolicyAgreement) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "routes agree: {}/{}\n",
        routes.agreed, routes.total
    ));
    for d in &routes.disagreements {
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
    for refused in &routes.refused {
        s.push_str(&format!(
            "note: {}: {}; deepcli sends it to {}\n",
            refused.probe, refused.why, refused.deepcli.agent_id
        ));
    }
    s.push_str(&format!(
        "policy agrees: {}/{}\n",
        policy.agreed, policy.total
    ));
    for d in &policy.disagreements {
        let rule = d
            .rule
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let deepcli = d.deepcli.map_or("has no such account", |a| a.as_str());
        s.push_str(&format!(
            "error: {}: OpenClaw answers {}, deepcli {deepcli}{rule}\n",
            d.probe,
            d.openclaw.as_str()
        ));
    }
    for n in &policy.not_compared {
        s.push_str(&format!("note: {}: not compared: {}\n", n.probes, n.why));
    }
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
    let mut err = anstream::stderr();
    if !global.output.quiet {
        for l in &result.left_out {
            let _ = writeln!(err, "note: left out {}: {}", l.path, l.why);
        }
        if let Some(path) = &args.out {
            let _ = writeln!(err, "Wrote {}.", path.display());
        }
    }
    if !args.json {
        let _ = err.write_all(agreement(&result.routes, &result.policy).as_bytes());
    }
    if result.failed() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    }
}
