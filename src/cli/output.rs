//! How much deepcli says and in what colours: `--quiet` and `--color`.
//!
//! A command's *answer* (a list, a table, a plan, a route, a `--dry-run` diff, JSON) always
//! prints. What it says *about* what it did or would do — `Wrote bindings.yaml.`, `No
//! changes.`, `Added agent …`, apply's progress — is a *note*, and `--quiet` silences notes.
//! Errors go to stderr either way.

use std::ffi::OsString;
use std::io::{self, Write};

use clap::ValueEnum;

/// `--color`: when to colour human output. (The values have no doc comments on purpose: clap
/// then lists them on one line instead of turning every command's help into its long form.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Color {
    Auto,
    Always,
    Never,
}

impl Color {
    /// Makes every `anstream` stream (ours, and clap's help and errors) follow the choice.
    pub(crate) fn apply(self) {
        anstream::ColorChoice::write_global(match self {
            Color::Auto => anstream::ColorChoice::Auto,
            Color::Always => anstream::ColorChoice::Always,
            Color::Never => anstream::ColorChoice::Never,
        });
    }

    /// The value of `--color` among raw arguments, for what clap prints before the arguments
    /// are parsed (`--help`, `--version`, usage errors); `None` when absent or not a value.
    pub(crate) fn among(args: impl IntoIterator<Item = OsString>) -> Option<Color> {
        let mut args = args.into_iter().skip(1);
        let mut found = None;
        while let Some(arg) = args.next() {
            let Some(arg) = arg.to_str() else { continue };
            let value = match arg {
                "--" => break,
                "--color" => args.next().and_then(|v| v.into_string().ok()),
                _ => arg.strip_prefix("--color=").map(str::to_string),
            };
            if let Some(value) = value {
                found = Color::from_str(&value, false).ok().or(found);
            }
        }
        found
    }
}

/// Where human text goes, after `--quiet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Output {
    pub(crate) quiet: bool,
}

impl Output {
    /// The command's answer: always printed.
    pub(crate) fn answer(self) -> anstream::Stdout {
        anstream::stdout()
    }

    /// What the command did or would do, and notes: stdout, or nowhere with `--quiet`.
    pub(crate) fn note(self) -> Note {
        if self.quiet {
            Note::Quiet
        } else {
            Note::Out(anstream::stdout())
        }
    }
}

/// A stream of notes: stdout, or nothing.
pub(crate) enum Note {
    Out(anstream::Stdout),
    Quiet,
}

impl Write for Note {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Note::Out(out) => out.write(buf),
            Note::Quiet => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Note::Out(out) => out.flush(),
            Note::Quiet => Ok(()),
        }
    }
}

/// ` (applied)`, ` → gpt-4.1 (a fallback: …)` or ` (model not applied: why)`.
pub(super) fn model_status(status: Option<&crate::manage::live::ModelStatus>) -> String {
    let Some(status) = status else {
        return String::new();
    };
    let why = status.why.as_deref();
    match (status.applied.as_deref(), why) {
        (Some(applied), _) if applied != status.wanted => match why {
            Some(why) => format!(" → {applied} ({why})"),
            None => format!(" → {applied}"),
        },
        (Some(_), _) => " (applied)".to_string(),
        (None, why) => format!(" (model not applied: {})", why.unwrap_or("unknown")),
    }
}
