//! `deepcli state export|backup|restore|check`, `deepcli history` and `deepcli trash
//! list|restore`.

use std::io::Write;

use clap::{Args, Subcommand};

use super::{ExitStatus, GlobalSettings, state_error};
use crate::state::{StateDir, StateStore, backup};
use crate::trash;

#[derive(Debug, Subcommand)]
pub(super) enum StateCommand {
    /// Print the live state as JSON (secrets as references), for `deepcli plan --live`.
    Export,
    /// Copy the state database, consistently, while a controller runs: one private file with
    /// the trash's manifests in it.
    #[command(after_help = "\
The copy is one read of the database: what the controller commits meanwhile is in it whole or
not at all. The trash's moved files are not in it (copy <state>/trash with your file backups).

Exit codes:
  0  written
  1  refused: FILE exists, or there is no state to back up
  2  could not run (an unreadable or damaged state, a directory that cannot be written)")]
    Backup {
        /// The file to write; it must not exist.
        file: std::path::PathBuf,
        /// Print what was written as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put a backup in place as the state of an empty --state-dir, verified first.
    #[command(after_help = "\
The backup is checked before anything is written: SQLite's integrity check, a deepcli state
with its lineage, a schema no newer than this deepcli's (an older one is migrated). A state
directory that already holds a state is refused: restore into a new one, then point
`deepcli up --state-dir` at it.

Exit codes:
  0  restored
  1  refused: the state directory holds a state, or the file is not a usable backup
  2  could not run (a directory that cannot be written)")]
    Restore {
        /// The backup `deepcli state backup` wrote.
        file: std::path::PathBuf,
        /// Print what was restored as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Apply agents.yaml's `state.retention` now: delete what is older than each kind's days,
    /// in small batches (a running controller does it every hour by itself).
    #[command(after_help = "\
Exit codes:
  0  pruned (or, with --dry-run, counted); nothing to prune is no error
  1  the config has no state.retention, or is invalid
  2  could not run (no state, a damaged one)")]
    Prune {
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the counts as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check the state database: SQLite's integrity and foreign keys, rows whose session is
    /// gone, trash entries whose manifest cannot be read.
    #[command(after_help = "\
Exit codes:
  0  nothing found
  1  something was found: each finding is printed
  2  could not run (no state, a damaged one)")]
    Check {
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(super) struct HistoryArgs {
    /// Print the history as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub(super) enum TrashCommand {
    /// List what deleting agents moved to trash.
    List {
        /// Print the entries as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put a trash entry's directories back where they were.
    Restore {
        /// The entry name, as `deepcli trash list` shows it.
        entry: String,
    },
}

/// `formatVersion` of `history --json`. 2: `formatVersion` (it was `format_version`).
const HISTORY_FORMAT: &str = "2";
/// `formatVersion` of `trash list --json`. 2: every key camelCase (`formatVersion`, and the
/// manifests' `formatVersion`, `agentId`, `createdAt`).
const TRASH_LIST_FORMAT: &str = "2";

/// A manifest as `trash list --json` shows it: in camelCase like every JSON deepcli prints.
/// `manifest.json` itself keeps its snake_case keys: it is the entry's own record, and a
/// deepcli of manifest format 1 must still restore what a newer one wrote in that format.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ListedManifest<'a> {
    format_version: u32,
    agent_id: &'a str,
    created_at: &'a str,
    serial: u64,
    items: &'a [trash::ManifestItem],
    kept: &'a [trash::KeptItem],
}

impl<'a> ListedManifest<'a> {
    fn of(manifest: &'a trash::Manifest) -> ListedManifest<'a> {
        ListedManifest {
            format_version: manifest.format_version,
            agent_id: &manifest.agent_id,
            created_at: &manifest.created_at,
            serial: manifest.serial,
            items: &manifest.items,
            kept: &manifest.kept,
        }
    }
}

fn fail(message: impl std::fmt::Display) -> ExitStatus {
    let _ = writeln!(anstream::stderr(), "error: {message}");
    ExitStatus::Failure
}

/// The state database, which must already exist: reading commands never create one.
fn open_existing(global: &GlobalSettings) -> Result<StateStore, ExitStatus> {
    let dir = global.state();
    match StateStore::open_existing(&dir) {
        Ok(Some(store)) => Ok(store),
        Ok(None) => Err(no_state(&dir)),
        Err(e) => Err(state_error(&e)),
    }
}

fn no_state(dir: &StateDir) -> ExitStatus {
    fail(format!(
        "no deepcli state in `{}`; run `deepcli apply` first, or pass --state-dir",
        dir.root().display()
    ))
}

/// `deepcli state <command>` refused for a state in PostgreSQL: it reads and writes `state.db`.
fn sqlite_only(dir: &StateDir, command: &str) -> Option<ExitStatus> {
    let url = dir.postgres()?;
    Some(fail(format!(
        "`deepcli state {command}` works on a state.db; the state at `{url}` is in PostgreSQL, which pg_dump backs up and restores and amcheck checks (docs/scale-out.md)"
    )))
}

pub(super) fn state(global: &GlobalSettings, command: StateCommand) -> ExitStatus {
    match command {
        StateCommand::Export => {
            let store = match open_existing(global) {
                Ok(store) => store,
                Err(status) => return status,
            };
            match store.snapshot() {
                Ok(live) => {
                    let text = serde_json::to_string_pretty(&live).unwrap_or_default();
                    let _ = writeln!(std::io::stdout().lock(), "{text}");
                    ExitStatus::Success
                }
                Err(e) => state_error(&e),
            }
        }
        StateCommand::Backup { file, json } => {
            let dir = global.state();
            if let Some(refused) = sqlite_only(&dir, "backup") {
                return refused;
            }
            let trash = match trash_manifests(&dir.trash()) {
                Ok(trash) => trash,
                Err(e) => {
                    eprintln!("error: cannot read the trash's manifests: {e}");
                    return ExitStatus::Error;
                }
            };
            match backup::backup(&dir, &file, &trash) {
                Ok(info) => {
                    print_info(&info, json, "Backed up");
                    ExitStatus::Success
                }
                Err(e) => backup_error(&e),
            }
        }
        StateCommand::Restore { file, json } => {
            let dir = global.state();
            if let Some(refused) = sqlite_only(&dir, "restore") {
                return refused;
            }
            let restored = match backup::restore(&file, &dir) {
                Ok(restored) => restored,
                Err(e) => return backup_error(&e),
            };
            for (entry, manifest) in &restored.trash {
                if let Err(e) = trash::put_back_manifest(&dir.trash(), entry, manifest) {
                    eprintln!("error: the state is restored, but a trash manifest is not: {e}");
                    return ExitStatus::Error;
                }
            }
            print_info(&restored.info, json, "Restored");
            if !json && !restored.trash.is_empty() {
                let _ = writeln!(
                    global.output.note(),
                    "The trash's manifests are back in {}; its moved files come from your file backups.",
                    dir.trash().display()
                );
            }
            ExitStatus::Success
        }
        StateCommand::Prune { dry_run, json } => prune(global, dry_run, json),
        StateCommand::Check { json } => {
            let dir = global.state();
            if let Some(refused) = sqlite_only(&dir, "check") {
                return refused;
            }
            let mut findings = match backup::check(&dir) {
                Ok(findings) => findings,
                Err(e) => return backup_error(&e),
            };
            // The artifact store against its rows: files no row names removed (as a prune
            // does), rows whose file is missing named.
            let mut removed = None;
            match crate::state::artifact_files::check(&dir) {
                Ok((swept, missing)) => {
                    removed = (swept.files > 0).then_some(swept);
                    findings.extend(missing.into_iter().map(|what| backup::Finding {
                        kind: "artifact",
                        what,
                    }));
                }
                Err(e) => findings.push(backup::Finding {
                    kind: "artifact",
                    what: e.to_string(),
                }),
            }
            if let Ok(listing) = trash::scan(&dir.trash()) {
                findings.extend(listing.unreadable.iter().map(|u| backup::Finding {
                    kind: "trash",
                    what: format!("trash entry `{}`: {}", u.name, u.error),
                }));
            }
            let mut out = std::io::stdout().lock();
            if json {
                let doc = serde_json::json!({"ok": findings.is_empty(), "findings": findings, "removed": removed.clone().unwrap_or_default()});
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&doc).unwrap_or_default()
                );
            } else {
                if let Some(removed) = &removed {
                    let _ = writeln!(
                        global.output.note(),
                        "Removed {} stored artifact files no row named ({} bytes).",
                        removed.files,
                        removed.bytes
                    );
                }
                if findings.is_empty() {
                    let _ = writeln!(out, "The state in {} is sound.", dir.root().display());
                }
                for f in &findings {
                    let _ = writeln!(out, "{}: {}", f.kind, f.what);
                }
            }
            if findings.is_empty() {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            }
        }
    }
}

fn prune(global: &GlobalSettings, dry_run: bool, json: bool) -> ExitStatus {
    let (_, rules) = match super::load_valid_with(global, "nothing was pruned", |config| {
        config
            .state
            .retention
            .map(|r| crate::state::retention::Rules {
                by_age: r.by_age(),
                keep_per_session: r.keep_per_session(),
            })
    }) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let Some(rules) = rules.filter(|r| !r.is_empty()) else {
        eprintln!(
            "error: {} sets no state.retention: everything is kept",
            global.config_dir.join("agents.yaml").display()
        );
        eprintln!("hint: docs/state.md#retention shows the block");
        return ExitStatus::Failure;
    };
    let mut store = match open_existing(global) {
        Ok(store) => store,
        Err(status) => return status,
    };
    let report = match store.prune(
        &rules,
        crate::clock::timestamp(),
        dry_run,
        std::time::Duration::ZERO,
        "cli",
    ) {
        Ok(report) => report,
        Err(e) => return state_error(&e),
    };
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
        return ExitStatus::Success;
    }
    let verb = if dry_run { "would delete" } else { "deleted" };
    for p in &report.pruned {
        let _ = writeln!(out, "{:<12} {verb} {} rows", p.kind, p.rows);
    }
    if !dry_run {
        let _ = writeln!(
            global.output.note(),
            "Pruned in {} ms (the longest batch {} ms); {} stored artifact files no row named removed ({} bytes).",
            report.elapsed_ms,
            report.longest_batch_ms,
            report.files.files,
            report.files.bytes
        );
    }
    ExitStatus::Success
}

/// Each trash entry's name and `manifest.json` text, as the trash reads them: an entry whose
/// manifest does not read is left out (a restore could not put it back; `state check` names it).
fn trash_manifests(root: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let entries = trash::list(root).map_err(|e| e.to_string())?;
    entries
        .into_iter()
        .map(|e| {
            let path = e.dir.join(trash::MANIFEST_FILE);
            std::fs::read_to_string(&path)
                .map(|text| (e.name, text))
                .map_err(|err| format!("{}: {err}", path.display()))
        })
        .collect()
}

fn print_info(info: &backup::BackupInfo, json: bool, done: &str) {
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(info).unwrap_or_default()
        );
        return;
    }
    let _ = writeln!(
        out,
        "{done} {} ({} bytes): lineage {}, serial {}, schema {}, {} in {} ms.",
        info.file.display(),
        info.bytes,
        info.lineage,
        info.serial,
        info.schema_version,
        crate::plural::plural(
            info.trash_entries.len(),
            "trash manifest",
            "trash manifests"
        ),
        info.elapsed_ms
    );
}

fn backup_error(e: &backup::BackupError) -> ExitStatus {
    match e {
        backup::BackupError::State(e) => state_error(e),
        backup::BackupError::Io { .. } => {
            eprintln!("error: {e}");
            ExitStatus::Error
        }
        _ => {
            eprintln!("error: {e}");
            ExitStatus::Failure
        }
    }
}

pub(super) fn history(global: &GlobalSettings, args: HistoryArgs) -> ExitStatus {
    let store = match open_existing(global) {
        Ok(store) => store,
        Err(status) => return status,
    };
    let records = match store.history() {
        Ok(records) => records,
        Err(e) => return state_error(&e),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({"formatVersion": HISTORY_FORMAT, "applies": records});
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
        return ExitStatus::Success;
    }
    if records.is_empty() {
        let _ = writeln!(out, "No applies yet.");
    }
    for h in &records {
        let commit = h
            .git_commit
            .as_deref()
            .map_or_else(String::new, |c| format!(" @{}", &c[..c.len().min(12)]));
        let _ = writeln!(
            out,
            "#{:<4} {}  {:<10} {}@{} via {}  +{} ~{} -{}{commit}{}",
            h.serial,
            h.started_at,
            h.outcome,
            h.user,
            h.host,
            h.source,
            h.added,
            h.changed,
            h.removed,
            h.error
                .as_deref()
                .map_or_else(String::new, |e| format!("  error: {e}"))
        );
    }
    ExitStatus::Success
}

pub(super) fn trash(global: &GlobalSettings, command: TrashCommand) -> ExitStatus {
    let dir = global.state();
    match command {
        TrashCommand::List { json } => {
            // The trash outlives a lost state.db: only a directory with neither is no state.
            if !dir.has_database() && !dir.trash().exists() {
                return no_state(&dir);
            }
            let listing = match trash::scan(&dir.trash()) {
                Ok(listing) => listing,
                Err(e) => return fail(e),
            };
            let mut out = std::io::stdout().lock();
            if json {
                let entries: Vec<_> = listing
                    .entries
                    .iter()
                    .map(|e| serde_json::json!({"entry": e.name, "dir": e.dir, "manifest": ListedManifest::of(&e.manifest)}))
                    .collect();
                let doc =
                    serde_json::json!({"formatVersion": TRASH_LIST_FORMAT, "entries": entries});
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&doc).unwrap_or_default()
                );
                return ExitStatus::Success;
            }
            if listing.entries.is_empty() {
                let _ = writeln!(out, "The trash is empty.");
            }
            for e in &listing.entries {
                let items: Vec<String> = e
                    .manifest
                    .items
                    .iter()
                    .filter(|i| i.moved)
                    .filter_map(moved_item)
                    .collect();
                let state = if e.manifest.is_complete() {
                    ""
                } else {
                    " (incomplete)"
                };
                let _ = writeln!(
                    out,
                    "{}  agent {}  {}{state}\n    {}",
                    e.name,
                    e.manifest.agent_id,
                    e.manifest.created_at,
                    items.join("\n    ")
                );
            }
            for u in &listing.unreadable {
                let _ = writeln!(out, "{}  unreadable: {}", u.name, u.error);
            }
            ExitStatus::Success
        }
        TrashCommand::Restore { entry } => {
            let guard = crate::plan::guard(&global.config_dir, &global.load);
            let restored = match StateStore::open_existing(&dir) {
                Ok(Some(mut store)) => crate::apply::restore(&mut store, &entry, &guard)
                    .map(|r| (r.manifest, r.conversations)),
                // No state.db (lost, see state.md): no lease to take and no record to mark;
                // the entry's manifest is all there is (its conversations were in the lost
                // database). None is created for it.
                Ok(None) => trash::restore(&dir.trash(), &entry, &guard)
                    .map(|m| (m, 0))
                    .map_err(Into::into),
                Err(e) => return state_error(&e),
            };
            let (manifest, conversations) = match restored {
                Ok(restored) => restored,
                Err(crate::apply::ApplyError::State(e)) => return state_error(&e),
                Err(e) => return fail(e),
            };
            let mut notes = global.output.note();
            for item in manifest.items.iter().filter(|i| i.moved) {
                if let Some(line) = moved_item(item) {
                    let _ = writeln!(notes, "restored {line}");
                }
            }
            if conversations > 0 {
                let _ = writeln!(
                    notes,
                    "restored {} (session map, transcripts, delivery records)",
                    crate::plural::plural(conversations, "conversation", "conversations")
                );
            }
            let _ = writeln!(
                notes,
                "Agent `{}` is not in the live state: list it in agents.yaml again and apply to manage it.",
                manifest.agent_id
            );
            ExitStatus::Success
        }
    }
}

/// `workspace /path` for an item that moved whole, `workspace /path: AGENTS.md, SOUL.md` for
/// one whose directory stayed and only deepcli's files moved; `None` when none of them did.
fn moved_item(item: &trash::ManifestItem) -> Option<String> {
    let place = format!("{} {}", item.label, item.original.display());
    let Some(files) = &item.files else {
        return Some(place);
    };
    let names: Vec<&str> = files
        .iter()
        .filter(|f| f.moved)
        .map(|f| f.name.as_str())
        .collect();
    (!names.is_empty()).then(|| format!("{place}: {}", names.join(", ")))
}
