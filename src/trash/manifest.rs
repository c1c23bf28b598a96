//! `manifest.json`: what one trash entry holds and where it came from, read and checked, and
//! written atomically (temporary file, fsync, rename, fsync of the directory).

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::transfer::sync_dir;
use super::{TrashError, io_err};
#[cfg(feature = "failpoints")]
use crate::failpoint;

/// The newest manifest format this build reads and writes. Version 2 added items that move
/// file by file ([`ManifestItem::files`]); an entry without one is still written as version 1,
/// so that an older deepcli can restore it.
pub const FORMAT_VERSION: u32 = 2;
/// The format of an entry whose items all moved whole.
pub(super) const WHOLE_ITEMS_FORMAT: u32 = 1;
/// The manifest's name inside an entry directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Where a manifest is written before it is renamed over [`MANIFEST_FILE`].
pub(super) const MANIFEST_TMP: &str = ".manifest.json.tmp";

/// `manifest.json`: what one trash entry holds and where it came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    pub agent_id: String,
    /// RFC 3339, UTC, whole seconds; set when the entry is first created and kept on resume.
    pub created_at: String,
    /// The serial of the plan that deleted the agent.
    pub serial: u64,
    pub items: Vec<ManifestItem>,
    #[serde(default)]
    pub kept: Vec<KeptItem>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ManifestItem {
    pub label: String,
    pub original: PathBuf,
    /// The item's name inside the entry directory.
    pub stored: String,
    /// True while the item sits in the trash: set once it has moved in, cleared once a restore
    /// has moved it back.
    pub moved: bool,
    /// Whether the original existed when the entry was made; a missing one is recorded, not
    /// an error.
    pub existed: bool,
    /// Present when `original` is a directory that stayed where it was (deepcli did not create
    /// it) and only these files of it moved; `stored` is then a directory holding them, and
    /// `moved` says that every one of them that existed is in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<ManifestFile>>,
}

/// One file of an item that moves file by file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ManifestFile {
    /// Its name, in the original directory and in the item's stored directory alike.
    pub name: String,
    pub moved: bool,
    pub existed: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeptItem {
    pub label: String,
    pub path: PathBuf,
    pub reason: String,
}

impl Manifest {
    /// Whether every item that existed has reached the trash (an interrupted move has not).
    pub fn is_complete(&self) -> bool {
        self.items.iter().all(|item| item.moved || !item.existed)
    }
}

/// Reads and checks `<entry_dir>/manifest.json`.
pub fn read_manifest(entry_dir: &Path) -> Result<Manifest, TrashError> {
    let path = entry_dir.join(MANIFEST_FILE);
    let text = fs::read_to_string(&path).map_err(|e| io_err("read", &path, e))?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|source| TrashError::ManifestUnreadable {
            path: path.clone(),
            source,
        })?;
    if !(WHOLE_ITEMS_FORMAT..=FORMAT_VERSION).contains(&manifest.format_version) {
        return Err(TrashError::ManifestVersion {
            path,
            found: manifest.format_version,
        });
    }
    Ok(manifest)
}

/// Puts back the manifest of entry `name` as a state backup carried it (`deepcli state
/// restore`): the text as it was, in a new entry directory private to its owner. The name must
/// be one plain name, and the text a manifest this build reads: a backup file is input.
pub fn put_back_manifest(trash_root: &Path, name: &str, text: &str) -> Result<(), TrashError> {
    super::check_entry_name(name)?;
    let dir = trash_root.join(name);
    let path = dir.join(MANIFEST_FILE);
    serde_json::from_str::<Manifest>(text).map_err(|source| TrashError::ManifestUnreadable {
        path: path.clone(),
        source,
    })?;
    crate::owner_only::create_dir_all(&dir).map_err(|e| io_err("create", &dir, e))?;
    crate::durable::write_atomic_private(&path, text.as_bytes())
        .map_err(|e| io_err("write", &path, e))
}

/// Temp file in the same directory, fsync, rename, fsync the directory: a reader sees the old
/// manifest or the new one, never half of one.
pub(super) fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), TrashError> {
    let tmp = dir.join(MANIFEST_TMP);
    let path = dir.join(MANIFEST_FILE);
    let mut text =
        serde_json::to_vec_pretty(manifest).map_err(|source| TrashError::ManifestWrite {
            path: path.clone(),
            source,
        })?;
    text.push(b'\n');
    let mut file = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
    file.write_all(&text)
        .map_err(|e| io_err("write", &tmp, e))?;
    file.sync_all().map_err(|e| io_err("sync", &tmp, e))?;
    drop(file);
    // A crash point before an entry's first manifest is in place (the temporary one is).
    #[cfg(feature = "failpoints")]
    if !path.exists() {
        failpoint::hit(&format!("trash.manifest:{}", manifest.agent_id));
    }
    fs::rename(&tmp, &path).map_err(|source| TrashError::Move {
        from: tmp.clone(),
        to: path.clone(),
        source,
    })?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backup file is input: its entry names cannot climb out of the trash, and its text must
    /// be a manifest.
    #[test]
    fn a_manifest_put_back_stays_in_the_trash_and_must_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("trash");
        let text = r#"{"format_version":1,"agent_id":"a","created_at":"2026-12-01T00:00:00Z","serial":1,"items":[]}"#;
        for name in ["../escaped", ".hidden", "a/b", ""] {
            assert!(put_back_manifest(&root, name, text).is_err(), "{name}");
        }
        assert!(!tmp.path().join("escaped").exists());
        assert!(put_back_manifest(&root, "a-1", "{not json").is_err());
        put_back_manifest(&root, "a-1", text).unwrap();
        assert_eq!(read_manifest(&root.join("a-1")).unwrap().agent_id, "a");
    }
}
