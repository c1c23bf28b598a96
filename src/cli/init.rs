//! `deepcli init [DIR]`: a new hub's files (`scaffold`), then the two commands that run it.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;

use super::{ExitStatus, GlobalSettings};
use crate::scaffold::{self, Done, InitError};

#[derive(Debug, Args)]
#[command(after_help = "\
Exit codes:
  0  the hub's files were written
  2  nothing was written: a config file is there already (without --force), or the directory
     cannot be written")]
pub(super) struct InitArgs {
    /// The directory of the new hub (made if missing).
    #[arg(default_value = ".", value_name = "DIR")]
    dir: PathBuf,
    /// Replace agents.yaml, channels.yaml and bindings.yaml when they are there.
    #[arg(long)]
    force: bool,
}

pub(super) fn run(global: &GlobalSettings, args: InitArgs) -> ExitStatus {
    let written = match scaffold::init(&args.dir, args.force) {
        Ok(written) => written,
        Err(e) => {
            let mut err = anstream::stderr();
            let _ = writeln!(err, "error: {e}");
            if let InitError::Exists { .. } = e {
                let _ = writeln!(
                    err,
                    "hint: `deepcli init --force {}` replaces them; or init another directory",
                    shell_word(&args.dir)
                );
            }
            return ExitStatus::Error;
        }
    };
    // The three schemas on one line: they are one thing to a reader.
    let mut lines: Vec<(String, &str, &str)> = Vec::new();
    for w in &written {
        let done = match w.done {
            Done::Created => "wrote",
            Done::Replaced => "replaced",
            Done::Appended => "added to",
            Done::Kept => "kept",
        };
        if w.path.starts_with(scaffold::SCHEMA_DIR) {
            if !lines
                .iter()
                .any(|(path, ..)| path.starts_with(scaffold::SCHEMA_DIR))
            {
                let path = format!("{}/*.schema.json", scaffold::SCHEMA_DIR);
                lines.push((path, done, describe(&w.path)));
            }
            continue;
        }
        lines.push((w.path.display().to_string(), done, describe(&w.path)));
    }
    let width = lines.iter().map(|(path, ..)| path.len()).max().unwrap_or(0);
    let mut out = global.output.note();
    let _ = writeln!(out, "A new hub in {}:", args.dir.display());
    for (path, done, what) in &lines {
        let _ = writeln!(out, "  {done:<9}{path:<width$}  {what}");
    }
    let config = shell_word(&args.dir);
    let state = if args.dir == Path::new(".") {
        shell_word(Path::new(scaffold::STATE_DIR))
    } else {
        shell_word(&args.dir.join(scaffold::STATE_DIR))
    };
    let _ = writeln!(out);
    let _ = writeln!(out, "Run it:");
    let _ = writeln!(out, "  deepcli --config {config} --state-dir {state} up");
    let _ = writeln!(out, "Then, in another terminal, talk to main:");
    let _ = writeln!(
        out,
        "  deepcli --state-dir {state} inbound send --channel cli 'hello'"
    );
    let _ = writeln!(
        out,
        "What the hub needs from this machine: deepcli --config {config} --state-dir {state} doctor"
    );
    ExitStatus::Success
}

/// What a written file is for.
fn describe(path: &Path) -> &'static str {
    match path.to_str().unwrap_or_default() {
        "agents.yaml" => "agent main, answering with the demo agent",
        "channels.yaml" => "the command line; a Telegram bot, commented out",
        "bindings.yaml" => "the command line talks to main",
        ".gitignore" => "ignores the state directory",
        _ => "the schemas the modelines name: editors check the files offline",
    }
}

/// `path` as one shell word: quoted when it holds anything but plain characters.
fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
