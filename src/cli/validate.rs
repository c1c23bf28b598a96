//! `deepcli validate`: the CI gate.

use std::io::Write;

use clap::{Args, ValueEnum};

use super::{ExitStatus, GlobalSettings};
use crate::report;
use crate::validate::validate_dir_lean;

#[derive(Debug, Args)]
pub(super) struct ValidateArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
    /// Treat warnings as errors.
    #[arg(long)]
    strict: bool,
    /// Pass a config directory that holds none of the three files (a hub of only the implicit
    /// agent `main`); without it that fails, as a CI job pointed at the wrong directory should.
    #[arg(long)]
    allow_empty: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Diagnostics with source snippets and hints, for people.
    Human,
    /// A versioned JSON document.
    Json,
    /// GitHub Actions workflow commands that annotate pull requests.
    Github,
    /// SARIF 2.1.0, for code scanning.
    Sarif,
}

pub(super) fn run(global: &GlobalSettings, args: ValidateArgs) -> ExitStatus {
    huge_pages_for_a_large_config(&global.config_dir);
    let mut report = match validate_dir_lean(&global.config_dir, &global.load) {
        Ok(report) => report,
        Err(e) => {
            let mut err = anstream::stderr();
            let _ = writeln!(err, "error: {e}");
            let _ = writeln!(
                err,
                "hint: pass the config directory with --config DIR (or DEEPCLI_CONFIG)"
            );
            return ExitStatus::Error;
        }
    };
    if args.strict {
        report.make_strict();
    }
    let text = match args.format {
        Format::Human => report::human(&report),
        Format::Json => report::json(&report),
        Format::Github => report::github(&report),
        Format::Sarif => report::sarif(&report),
    };
    let written = if args.format == Format::Human {
        anstream::stdout().write_all(text.as_bytes())
    } else {
        std::io::stdout().lock().write_all(text.as_bytes())
    };
    if written.is_err() {
        return ExitStatus::Error;
    }
    let empty = report.declares_nothing();
    let status = if report.is_valid() && (args.allow_empty || !empty) {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    };
    // The process ends right after this: freeing millions of nodes one by one would only add
    // to the wall time of a large validation.
    std::mem::forget(report);
    status
}

/// From this much config on (the three files together, about 10,000 bindings), `validate`
/// gives transparent huge pages back to its process (`main` turns them off for every command):
/// a large config's load faults in far fewer pages, for a peak that lasts as long as the
/// command (docs/ci.md#large-configs). Below it, zeroing 2 MiB at a time costs more than it
/// saves.
const HUGE_PAGES_FROM: u64 = 1024 * 1024;

fn huge_pages_for_a_large_config(dir: &std::path::Path) {
    let bytes: u64 = crate::config::FileKind::ALL
        .iter()
        .filter_map(|kind| std::fs::metadata(dir.join(kind.file_name())).ok())
        .map(|meta| meta.len())
        .sum();
    if bytes >= HUGE_PAGES_FROM {
        #[cfg(target_os = "linux")]
        let _ = nix::sys::prctl::set_thp_disable(false);
    }
}
