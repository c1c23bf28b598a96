//! Moving an agent's items into a trash entry, resumable after a crash at any step.

use std::fs;
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::guard::{Moving, lexical};
use super::manifest::{
    FORMAT_VERSION, KeptItem, MANIFEST_FILE, MANIFEST_TMP, Manifest, ManifestFile, ManifestItem,
    WHOLE_ITEMS_FORMAT, read_manifest, write_manifest,
};
use super::transfer::{
    Transfer, exists, is_dir, move_path, read_dir_sorted, settle_both, sync_dir,
};
use super::{
    Guard, Kept, TrashError, TrashItem, check_entry_name, check_file_name, check_label, io_err,
};
use crate::failpoint;

/// Moves an agent's items into `<trash_root>/<entry>/` and returns the finished manifest.
///
/// Every item is checked with `guard` before anything moves, and one refusal refuses the
/// whole call. An item whose original does not exist is recorded (`existed: false`) and
/// skipped; so is a file of an item that moves file by file. Calling again with the same
/// `entry` after a crash finishes the job (see the module documentation); the existing
/// manifest, with its `created_at` and `serial`, is reused.
pub fn move_to_trash(
    trash_root: &Path,
    entry: &str,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
    guard: &Guard,
) -> Result<Manifest, TrashError> {
    move_to_trash_with(
        trash_root,
        entry,
        agent_id,
        serial,
        items,
        kept,
        guard,
        Transfer::Auto,
    )
}

/// [`move_to_trash`] with an explicit [`Transfer`].
#[expect(
    clippy::too_many_arguments,
    reason = "move_to_trash's arguments plus the transfer mode"
)]
pub fn move_to_trash_with(
    trash_root: &Path,
    entry: &str,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
    guard: &Guard,
    transfer: Transfer,
) -> Result<Manifest, TrashError> {
    check_entry_name(entry)?;
    for (i, item) in items.iter().enumerate() {
        check_label(&item.label)?;
        if items[..i].iter().any(|other| other.label == item.label) {
            return Err(TrashError::BadLabel {
                label: item.label.clone(),
                problem: "is given twice",
            });
        }
        for (j, name) in item.files.iter().flatten().enumerate() {
            check_file_name(&item.label, name)?;
            if item
                .files
                .iter()
                .flatten()
                .take(j)
                .any(|other| other == name)
            {
                return Err(TrashError::BadFileName {
                    label: item.label.clone(),
                    name: name.clone(),
                    problem: "is given twice",
                });
            }
        }
    }
    for item in items {
        let refused = match &item.files {
            None => guard.refusal(&item.path, Moving::Dir),
            Some(files) => files
                .iter()
                .find_map(|name| guard.refusal(&item.path.join(name), Moving::File)),
        };
        if let Some(refused) = refused {
            return Err(TrashError::ItemRefused {
                agent_id: agent_id.to_string(),
                label: item.label.clone(),
                refused: Box::new(refused),
            });
        }
    }
    check_overlap(agent_id, items)?;

    let dir = trash_root.join(entry);
    let mut manifest = open_entry(trash_root, &dir, agent_id, serial, items, kept)?;

    for index in 0..manifest.items.len() {
        let item = &manifest.items[index];
        if item.moved {
            continue;
        }
        if item.files.is_some() {
            move_files(&dir, &mut manifest, index, transfer)?;
            continue;
        }
        let label = item.label.clone();
        let original = item.original.clone();
        let stored = dir.join(&item.stored);
        if !move_one(&label, &original, &stored, transfer)? {
            continue;
        }
        failpoint::hit(&format!("trash.moved:{label}"));
        let item = &mut manifest.items[index];
        item.existed = true;
        item.moved = true;
        write_manifest(&dir, &manifest)?;
    }
    Ok(manifest)
}

/// Moves `original` to `stored` unless that already happened; `false` when neither exists
/// (never existed, or vanished since the manifest was written: nothing to move).
fn move_one(
    label: &str,
    original: &Path,
    stored: &Path,
    transfer: Transfer,
) -> Result<bool, TrashError> {
    match (exists(original)?, exists(stored)?) {
        (false, false) => return Ok(false),
        // Moved before a crash stopped the manifest from saying so.
        (false, true) => {}
        (true, false) => move_path(original, stored, transfer)?,
        (true, true) => settle_both(label, original, stored, transfer)?,
    }
    Ok(true)
}

/// Moves the files of an item that moves file by file into its stored directory, one by one,
/// rewriting the manifest after each.
fn move_files(
    dir: &Path,
    manifest: &mut Manifest,
    index: usize,
    transfer: Transfer,
) -> Result<(), TrashError> {
    let item = &manifest.items[index];
    let label = item.label.clone();
    let original = item.original.clone();
    let stored = dir.join(&item.stored);
    let count = item.files.as_ref().map_or(0, Vec::len);
    for file in 0..count {
        let Some(entry) = manifest.items[index]
            .files
            .as_ref()
            .and_then(|files| files.get(file))
        else {
            break;
        };
        if entry.moved {
            continue;
        }
        let name = entry.name.clone();
        let from = original.join(&name);
        let to = stored.join(&name);
        if is_dir(&from)? {
            // A directory where deepcli wrote a file is the user's now, like the rest of the
            // directory around it: it stays (the plan saw no file there either).
            continue;
        }
        if exists(&from)? && !exists(&stored)? {
            fs::create_dir(&stored).map_err(|e| io_err("create", &stored, e))?;
            sync_dir(dir)?;
            failpoint::hit(&format!("trash.stored:{label}"));
        }
        if !move_one(&label, &from, &to, transfer)? {
            continue;
        }
        failpoint::hit(&format!("trash.moved:{label}/{name}"));
        if let Some(entry) = manifest.items[index]
            .files
            .as_mut()
            .and_then(|files| files.get_mut(file))
        {
            entry.existed = true;
            entry.moved = true;
        }
        write_manifest(dir, manifest)?;
    }
    manifest.items[index].moved = true;
    write_manifest(dir, manifest)
}

/// Refuses items nested in one another: moving the outer one would take the inner one along,
/// and the manifest could not say where it went. A file of an item that moves file by file
/// counts as a path of its own; the directory around it does not move.
fn check_overlap(agent_id: &str, items: &[TrashItem]) -> Result<(), TrashError> {
    let moving: Vec<(&TrashItem, PathBuf)> = items
        .iter()
        .flat_map(|item| {
            let paths: Vec<PathBuf> = match &item.files {
                None => vec![lexical(&item.path)],
                Some(files) => files.iter().map(|f| lexical(&item.path.join(f))).collect(),
            };
            paths.into_iter().map(move |p| (item, p))
        })
        .collect();
    for (i, (a, pa)) in moving.iter().enumerate() {
        for (b, pb) in &moving[i + 1..] {
            if std::ptr::eq(*a, *b) {
                continue;
            }
            let pair = if pb.starts_with(pa) {
                Some(((a, pa), (b, pb)))
            } else if pa.starts_with(pb) {
                Some(((b, pb), (a, pa)))
            } else {
                None
            };
            if let Some(((outer, outer_path), (inner, inner_path))) = pair {
                return Err(TrashError::Overlap {
                    agent_id: agent_id.to_string(),
                    outer_label: outer.label.clone(),
                    outer: outer_path.clone(),
                    inner_label: inner.label.clone(),
                    inner: inner_path.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The entry's manifest: the one on disk when resuming (it must describe the same items), or
/// a new one written to a new entry directory.
fn open_entry(
    trash_root: &Path,
    dir: &Path,
    agent_id: &str,
    serial: u64,
    items: &[TrashItem],
    kept: &[Kept],
) -> Result<Manifest, TrashError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    if exists(&manifest_path)? {
        let manifest = read_manifest(dir)?;
        type Described<'a> = (&'a str, &'a Path, Option<Vec<&'a str>>);
        let mut on_disk: Vec<Described<'_>> = manifest
            .items
            .iter()
            .map(|i| {
                let files = i
                    .files
                    .as_ref()
                    .map(|f| f.iter().map(|f| f.name.as_str()).collect());
                (i.label.as_str(), i.original.as_path(), files)
            })
            .collect();
        let mut asked: Vec<Described<'_>> = items
            .iter()
            .map(|i| {
                let files = i
                    .files
                    .as_ref()
                    .map(|f| f.iter().map(String::as_str).collect());
                (i.label.as_str(), i.path.as_path(), files)
            })
            .collect();
        on_disk.sort();
        asked.sort();
        if manifest.agent_id != agent_id || on_disk != asked {
            return Err(TrashError::ManifestMismatch {
                dir: dir.to_path_buf(),
                detail: format!(
                    "agent `{}` with {} item(s)",
                    manifest.agent_id,
                    manifest.items.len()
                ),
            });
        }
        for item in &manifest.items {
            check_label(&item.stored)?;
            for file in item.files.iter().flatten() {
                check_file_name(&item.label, &file.name)?;
            }
        }
        return Ok(manifest);
    }

    if exists(dir)? {
        // A crash between creating the directory and renaming the manifest into it leaves at
        // most the temporary manifest; anything else is not ours to write over.
        for found in read_dir_sorted(dir)? {
            if found.file_name().is_some_and(|n| n != MANIFEST_TMP) {
                return Err(TrashError::ForeignEntry {
                    dir: dir.to_path_buf(),
                    found,
                });
            }
        }
    } else {
        // Private: the entries hold transcripts and workspaces of deleted agents.
        crate::owner_only::create_dir_all(trash_root)
            .map_err(|e| io_err("create", trash_root, e))?;
        fs::create_dir(dir).map_err(|e| io_err("create", dir, e))?;
        sync_dir(trash_root)?;
        failpoint::hit(&format!("trash.entry:{agent_id}"));
    }

    let by_file = items.iter().any(|i| i.files.is_some());
    let mut manifest = Manifest {
        format_version: if by_file {
            FORMAT_VERSION
        } else {
            WHOLE_ITEMS_FORMAT
        },
        agent_id: agent_id.to_string(),
        created_at: Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        serial,
        items: Vec::with_capacity(items.len()),
        kept: kept
            .iter()
            .map(|k| KeptItem {
                label: k.label.clone(),
                path: k.path.clone(),
                reason: k.reason.clone(),
            })
            .collect(),
    };
    for item in items {
        let files = match &item.files {
            None => None,
            Some(names) => {
                let mut files = Vec::with_capacity(names.len());
                for name in names {
                    let path = item.path.join(name);
                    files.push(ManifestFile {
                        name: name.clone(),
                        moved: false,
                        existed: exists(&path)? && !is_dir(&path)?,
                    });
                }
                Some(files)
            }
        };
        manifest.items.push(ManifestItem {
            label: item.label.clone(),
            original: item.path.clone(),
            stored: item.label.clone(),
            moved: false,
            existed: exists(&item.path)?,
            files,
        });
    }
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}
