//! A [`Plan`] for people (`deepcli plan`) and machines (`--json`). Returns strings; prints
//! nothing.

use std::fmt::Write as _;
use std::path::Path;

use anstyle::{AnsiColor, Style};
use serde_json::{Value, json};

use super::{Action, FieldChange, FileState, Plan, RuntimeOp};
use crate::plural::plural;
use crate::shown::shown;

const ADD: Style = AnsiColor::Green.on_default();
const CHANGE: Style = AnsiColor::Yellow.on_default();
const REMOVE: Style = AnsiColor::Red.on_default();
const DRIFT: Style = AnsiColor::Magenta.on_default();
const BOLD: Style = Style::new().bold();

/// Shows `home` as `~`.
pub(crate) struct Paths<'a> {
    pub home: Option<&'a Path>,
}

impl Paths<'_> {
    pub(crate) fn show(&self, path: &Path) -> String {
        match self.home.and_then(|h| path.strip_prefix(h).ok()) {
            Some(rest) if rest.as_os_str().is_empty() => "~".to_string(),
            Some(rest) => format!("~/{}", rest.display()),
            None => path.display().to_string(),
        }
    }
}

/// `3 to add, 1 to change, 1 to remove (to trash)` or `no changes`.
pub(crate) fn summary(plan: &Plan) -> String {
    let (add, change, remove) = plan.counts();
    if add + change + remove == 0 {
        return "no changes".to_string();
    }
    let trash = plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::DeleteAgent { .. }));
    format!(
        "{add} to add, {change} to change, {remove} to remove{}",
        if trash { " (to trash)" } else { "" }
    )
}

fn value(v: &Option<Value>) -> String {
    match v {
        None => "(unset)".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn changes_inline(changes: &[FieldChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| format!("{}: {} → {}", c.path, value(&c.from), value(&c.to)))
        .collect()
}

fn runtime_word(op: Option<RuntimeOp>) -> Option<&'static str> {
    op.map(|op| match op {
        RuntimeOp::Start => "runtime start",
        RuntimeOp::Restart => "runtime restart",
        RuntimeOp::Stop => "runtime stop",
    })
}

/// One line per object: (sign, object, detail, location).
fn line(action: &Action, paths: &Paths<'_>, bindings_file: &str) -> (char, String, String) {
    match action {
        Action::CreateAgent {
            id,
            workspace,
            files,
            runtime,
            ..
        } => {
            let mut detail = format!(
                "workspace {} ({})",
                paths.show(workspace),
                plural(files.len() as u64, "bootstrap file", "bootstrap files")
            );
            if let Some(r) = runtime_word(*runtime) {
                detail.push_str("; ");
                detail.push_str(r);
            }
            ('+', format!("agent {id}"), detail)
        }
        Action::UpdateAgent {
            id,
            changes,
            dirs,
            files,
            runtime,
            left_behind,
        } => {
            let mut parts = changes_inline(changes);
            if !dirs.is_empty() {
                parts.push(format!(
                    "recreate {}",
                    dirs.iter()
                        .map(|d| paths.show(d))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if !files.is_empty() {
                let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
                parts.push(format!("write {}", names.join(", ")));
            }
            parts.extend(runtime_word(*runtime).map(str::to_string));
            for old in left_behind {
                parts.push(format!(
                    "old workspace {} is left in place",
                    paths.show(old)
                ));
            }
            ('~', format!("agent {id}"), parts.join("; "))
        }
        Action::DeleteAgent { id, moves, runtime } => {
            // Directories that move whole, then the files deepcli wrote into each directory
            // that stays: `from workspace ~/project: AGENTS.md, SOUL.md (edited)`.
            let mut moved: Vec<String> = moves
                .iter()
                .filter(|m| m.kept.is_none())
                .map(|m| m.label.clone())
                .collect();
            let whole = moved.len();
            for m in moves.iter().filter(|m| m.kept.is_some()) {
                let files: Vec<String> = m
                    .files
                    .iter()
                    .filter_map(|f| match f.state {
                        FileState::Written => Some(f.name.clone()),
                        FileState::Edited => Some(format!("{} (edited)", f.name)),
                        FileState::Missing => None,
                    })
                    .collect();
                if !files.is_empty() {
                    moved.push(format!(
                        "from {} {}: {}",
                        m.label,
                        paths.show(&m.path),
                        files.join(", ")
                    ));
                }
            }
            let mut detail = if moved.is_empty() {
                "nothing to move".to_string()
            } else {
                let (dirs, files) = moved.split_at(whole);
                let mut text = format!("→ trash: {}", dirs.join(", "));
                for (i, part) in files.iter().enumerate() {
                    text.push_str(if i == 0 && dirs.is_empty() { "" } else { "; " });
                    text.push_str(part);
                }
                text
            };
            let kept: Vec<String> = moves
                .iter()
                .filter_map(|m| {
                    m.kept
                        .as_ref()
                        .map(|why| format!("{} {why}: kept", m.label))
                })
                .collect();
            if !kept.is_empty() {
                detail.push_str(&format!(" ({})", kept.join("; ")));
            }
            if let Some(r) = runtime_word(*runtime) {
                detail.push_str("; ");
                detail.push_str(r);
            }
            ('-', format!("agent {id}"), detail)
        }
        Action::AddAccount { channel, account } => {
            ('+', format!("account {channel}:{account}"), String::new())
        }
        Action::ChangeAccount {
            channel,
            account,
            changes,
        } => (
            '~',
            format!("account {channel}:{account}"),
            changes_inline(changes).join("; "),
        ),
        Action::RemoveAccount { channel, account } => {
            ('-', format!("account {channel}:{account}"), String::new())
        }
        Action::AddBinding {
            describe,
            agent_id,
            line,
            ..
        } => (
            '+',
            format!("binding {describe} → {agent_id}"),
            format!("{bindings_file}:{line}"),
        ),
        Action::ChangeBinding {
            describe,
            from_agent,
            agent_id,
            changes,
            line,
            ..
        } => {
            let detail = if from_agent == agent_id {
                changes_inline(changes).join("; ")
            } else {
                format!("agent {from_agent} → {agent_id}")
            };
            (
                '~',
                format!("binding {describe} → {agent_id}"),
                format!("{detail}  {bindings_file}:{line}"),
            )
        }
        Action::RemoveBinding {
            describe, agent_id, ..
        } => (
            '-',
            format!("binding {describe} → {agent_id}"),
            String::new(),
        ),
        Action::ForgetTrash { entry, .. } => (
            '-',
            format!("trash entry {entry}"),
            "forget (its directory is gone)".to_string(),
        ),
        Action::PublishRouting {
            from,
            to,
            bindings_changed,
            ..
        } => {
            let from = from.map_or_else(|| "none".to_string(), |g| g.to_string());
            (
                '~',
                "routing plan".to_string(),
                format!(
                    "generation {from} → {to} ({} changed)",
                    plural(*bindings_changed, "binding", "bindings")
                ),
            )
        }
    }
}

/// A file's change as a unified diff (`similar`), indented under its action.
pub(crate) fn file_diff(old: &str, new: &str, path: &Path) -> String {
    let name = path.display().to_string();
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header(
            &format!("{name} (on disk)"),
            &format!("{name} (after apply)"),
        )
        .to_string();
    let mut out = String::new();
    for line in text.lines() {
        let style = match line.chars().next() {
            Some('+') if !line.starts_with("+++") => ADD,
            Some('-') if !line.starts_with("---") => REMOVE,
            _ => Style::new(),
        };
        let line = shown(line);
        let _ = writeln!(out, "        {style}{line}{style:#}");
    }
    out
}

/// Text diffs of the files an action rewrites, keyed by path (`--diff`); the caller reads the
/// files, so rendering stays free of I/O.
pub(crate) type FileDiffs = std::collections::HashMap<std::path::PathBuf, String>;

/// The plan as reconcile.md shows it. `diff` adds field-level lines under each action, and the
/// text diffs in `files`.
pub(crate) fn human(
    plan: &Plan,
    paths: &Paths<'_>,
    bindings_file: &str,
    diff: Option<&FileDiffs>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{BOLD}deepcli plan — {}{BOLD:#}", summary(plan));
    if !plan.actions.is_empty() {
        out.push('\n');
    }
    for action in &plan.actions {
        let (sign, object, detail) = line(action, paths, bindings_file);
        // Ids and values come from the files: shown escaped, so none can forge a line.
        let (object, detail) = (shown(&object), shown(&detail));
        let style = match sign {
            '+' => ADD,
            '-' => REMOVE,
            _ => CHANGE,
        };
        if detail.is_empty() {
            let _ = writeln!(out, "  {style}{sign} {object}{style:#}");
        } else {
            let _ = writeln!(out, "  {style}{sign} {object:<26}{style:#} {detail}");
        }
        if let Some(files) = diff {
            diff_lines(&mut out, action, paths, files);
        }
    }
    if !plan.drift.is_empty() {
        let _ = writeln!(out, "\nChanged outside deepcli:");
        for d in &plan.drift {
            let _ = writeln!(
                out,
                "  {DRIFT}! {:<26}{DRIFT:#} {}",
                shown(&d.object),
                shown(&d.what.join("; "))
            );
        }
    }
    if !plan.blocked.is_empty() {
        let _ = writeln!(out, "\n{REMOVE}Blocked:{REMOVE:#}");
        for b in &plan.blocked {
            let _ = writeln!(out, "  {}", shown(&b.for_cli()));
        }
    }
    out
}

fn diff_lines(out: &mut String, action: &Action, paths: &Paths<'_>, diffs: &FileDiffs) {
    let changes: &[FieldChange] = match action {
        Action::UpdateAgent { changes, .. }
        | Action::ChangeAccount { changes, .. }
        | Action::ChangeBinding { changes, .. } => changes,
        _ => &[],
    };
    for c in changes {
        if let Some(from) = &c.from {
            let _ = writeln!(
                out,
                "      {REMOVE}- {}: {}{REMOVE:#}",
                shown(&c.path),
                shown(&value(&Some(from.clone())))
            );
        }
        if let Some(to) = &c.to {
            let _ = writeln!(
                out,
                "      {ADD}+ {}: {}{ADD:#}",
                shown(&c.path),
                shown(&value(&Some(to.clone())))
            );
        }
    }
    if let Action::CreateAgent { files, .. } | Action::UpdateAgent { files, .. } = action {
        for f in files {
            let _ = writeln!(
                out,
                "      {ADD}+ {} ({}){ADD:#}",
                paths.show(&f.path),
                f.why
            );
            if let Some(text) = diffs.get(&f.path) {
                out.push_str(text);
            }
        }
    }
}

/// The versioned JSON document.
pub(crate) fn json(plan: &Plan) -> String {
    let (add, change, remove) = plan.counts();
    let doc = json!({
        "formatVersion": super::FORMAT_VERSION,
        "lineage": plan.lineage,
        "serial": plan.serial,
        "configHash": plan.config_hash,
        "summary": {"add": add, "change": change, "remove": remove},
        "actions": plan.actions,
        "drift": plan.drift,
        "blocked": plan.blocked,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
