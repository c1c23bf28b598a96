//! Moving a trash entry's items back to where they came from, then removing the entry.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::guard::Moving;
use super::manifest::{MANIFEST_FILE, MANIFEST_TMP, Manifest, read_manifest, write_manifest};
use super::transfer::{
    Transfer, exists, move_path, read_dir_sorted, remove_tree, staging_path, sync_dir,
};
use super::{Guard, TrashError, check_entry_name, check_file_name, check_label, io_err};

/// Moves every stored item of `entry` back to its original path (creating parent
/// directories), then removes the entry directory. Refuses, moving nothing, when any original
/// path exists again. Returns the manifest as it was before the restore.
pub fn restore(trash_root: &Path, entry: &str, guard: &Guard) -> Result<Manifest, TrashError> {
    restore_with(trash_root, entry, guard, Transfer::Auto)
}

/// [`restore`] with an explicit [`Transfer`].
pub fn restore_with(
    trash_root: &Path,
    entry: &str,
    guard: &Guard,
    transfer: Transfer,
) -> Result<Manifest, TrashError> {
    let no_such = || TrashError::NoSuchEntry {
        name: entry.to_string(),
        trash_root: trash_root.to_path_buf(),
    };
    if check_entry_name(entry).is_err() {
        return Err(no_such());
    }
    let dir = trash_root.join(entry);
    let is_dir = match fs::symlink_metadata(&dir) {
        Ok(meta) => meta.is_dir(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(io_err("inspect", &dir, e)),
    };
    if !is_dir {
        return Err(no_such());
    }
    let before = read_manifest(&dir)?;
    let mut manifest = before.clone();

    // Decide everything before moving anything, so a refusal leaves the entry untouched. A
    // unit is an item that moved whole, or one file of an item that moved file by file.
    let mut to_restore = Vec::new();
    let mut conflicts = Vec::new();
    for (index, item) in manifest.items.iter().enumerate() {
        check_label(&item.stored)?;
        let units: Vec<(Option<usize>, bool, PathBuf, PathBuf)> = match &item.files {
            None => vec![(
                None,
                item.moved,
                dir.join(&item.stored),
                item.original.clone(),
            )],
            Some(files) => {
                let mut units = Vec::with_capacity(files.len());
                for (f, file) in files.iter().enumerate() {
                    check_file_name(&item.label, &file.name)?;
                    units.push((
                        Some(f),
                        file.moved,
                        dir.join(&item.stored).join(&file.name),
                        item.original.join(&file.name),
                    ));
                }
                units
            }
        };
        let moving = if item.files.is_some() {
            Moving::File
        } else {
            Moving::Dir
        };
        for (file, moved, stored, original) in units {
            let in_trash = exists(&stored)?;
            let in_place = exists(&original)?;
            if !in_trash {
                if moved && !in_place {
                    return Err(TrashError::StoredMissing {
                        entry: entry.to_string(),
                        label: item.label.clone(),
                        stored,
                        original,
                    });
                }
                // Never moved, or moved back before a crash stopped the manifest from saying so.
                continue;
            }
            if let Some(refused) = guard.refusal(&original, moving) {
                return Err(TrashError::RestoreRefused {
                    entry: entry.to_string(),
                    label: item.label.clone(),
                    refused: Box::new(refused),
                    manifest: dir.join(MANIFEST_FILE),
                });
            }
            if in_place {
                conflicts.push(original);
            } else {
                to_restore.push((index, file, stored, original));
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(TrashError::Conflicts {
            entry: entry.to_string(),
            paths: conflicts,
        });
    }

    for (index, file, stored, original) in to_restore {
        if let Some(parent) = original.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("create", parent, e))?;
        }
        move_path(&stored, &original, transfer)?;
        let item = &mut manifest.items[index];
        match file.and_then(|f| item.files.as_mut()?.get_mut(f)) {
            Some(file) => file.moved = false,
            None => item.moved = false,
        }
        if item
            .files
            .as_ref()
            .is_some_and(|files| files.iter().all(|f| !f.moved))
        {
            item.moved = false;
        }
        write_manifest(&dir, &manifest)?;
    }

    remove_entry_dir(trash_root, &dir, &manifest)?;
    Ok(before)
}

/// Removes a restored entry: staging leftovers, the emptied directories of items that moved
/// file by file, and the manifest, then the (now empty) directory. Anything else found there
/// is left alone and reported.
fn remove_entry_dir(trash_root: &Path, dir: &Path, manifest: &Manifest) -> Result<(), TrashError> {
    for item in &manifest.items {
        let stored = dir.join(&item.stored);
        let mut leftovers = vec![staging_path(&stored)];
        for file in item.files.iter().flatten() {
            leftovers.push(staging_path(&stored.join(&file.name)));
        }
        for staging in leftovers.into_iter().flatten() {
            if exists(&staging)? {
                remove_tree(&staging)?;
            }
        }
        if item.files.is_some() {
            match fs::remove_dir(&stored) {
                Ok(()) => {}
                // What is still in it is reported below.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
                    ) => {}
                Err(e) => return Err(io_err("remove", &stored, e)),
            }
        }
    }
    let leftover: Vec<PathBuf> = read_dir_sorted(dir)?
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n != MANIFEST_FILE && n != MANIFEST_TMP)
        })
        .collect();
    if !leftover.is_empty() {
        return Err(TrashError::EntryNotEmpty {
            dir: dir.to_path_buf(),
            leftover,
        });
    }
    let tmp = dir.join(MANIFEST_TMP);
    if exists(&tmp)? {
        fs::remove_file(&tmp).map_err(|e| io_err("remove", &tmp, e))?;
    }
    let manifest_path = dir.join(MANIFEST_FILE);
    fs::remove_file(&manifest_path).map_err(|e| io_err("remove", &manifest_path, e))?;
    fs::remove_dir(dir).map_err(|e| io_err("remove", dir, e))?;
    sync_dir(trash_root)
}
