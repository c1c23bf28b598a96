//! The config files as a management command reads and writes them: read once, edited in memory,
//! validated as a whole, checked for outside changes, written atomically.

use std::path::PathBuf;

use super::edit::{Doc, EditError};
use super::{ManageContext, ManageError, Result, Written};
use crate::config::{self, Config, FileKind};

/// The three files as read at the start of a command, and their edits.
#[derive(Debug, Clone)]
pub struct Change {
    dir: PathBuf,
    /// Per file: its path, the text as read (`None`: the file did not exist), the edited text.
    files: Vec<(FileKind, PathBuf, Option<String>, Doc)>,
    /// Which files were edited, in the order they are to be written.
    order: Vec<FileKind>,
}

impl Change {
    /// Reads the three files of the config directory.
    pub fn read(ctx: &ManageContext) -> Result<Change> {
        let dir = ctx.config_dir.clone();
        match std::fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(config::LoadError::NotADirectory(dir).into()),
            Err(_) => return Err(config::LoadError::NotFound(dir).into()),
        }
        let mut files = Vec::new();
        for kind in FileKind::ALL {
            let path = dir.join(kind.file_name());
            let original = read_text(&path)?;
            let doc = Doc::new(original.clone().unwrap_or_default());
            files.push((kind, path, original, doc));
        }
        Ok(Change {
            dir,
            files,
            order: Vec::new(),
        })
    }

    /// The config as it is now (as read), loaded without semantic validation.
    pub fn current(&self, ctx: &ManageContext) -> Config {
        let texts = self
            .files
            .iter()
            .filter_map(|(kind, path, original, _)| {
                original.as_ref().map(|t| (*kind, path.clone(), t.clone()))
            })
            .collect();
        config::load_texts(&self.dir, texts, &ctx.load).config
    }

    /// The text of one file as edited so far.
    pub fn doc(&self, kind: FileKind) -> &Doc {
        &self.files[Self::slot(kind)].3
    }

    fn slot(kind: FileKind) -> usize {
        match kind {
            FileKind::Agents => 0,
            FileKind::Channels => 1,
            FileKind::Bindings => 2,
        }
    }

    /// Edits one file. Files are written in the order they were first edited, so a command
    /// edits what others refer to first (a new agent before its bindings) and references
    /// before what they refer to (bindings before a deleted agent): a crash between two files
    /// leaves a valid config.
    pub fn edit(
        &mut self,
        kind: FileKind,
        f: impl FnOnce(&mut Doc) -> std::result::Result<(), EditError>,
    ) -> Result<()> {
        let doc = &mut self.files[Self::slot(kind)].3;
        f(doc).map_err(|source| ManageError::Edit {
            file: kind.file_name().to_string(),
            source,
        })?;
        if !self.order.contains(&kind) {
            self.order.push(kind);
        }
        Ok(())
    }

    fn changed(&self) -> Vec<FileKind> {
        self.order
            .iter()
            .copied()
            .filter(|kind| {
                let (_, _, original, doc) = &self.files[Self::slot(*kind)];
                original.as_deref().unwrap_or("") != doc.text
                    || (original.is_none() && !doc.text.is_empty())
            })
            .collect()
    }

    /// The would-be config, with every diagnostic (schema and semantic).
    pub fn validate(&self, ctx: &ManageContext) -> crate::validate::Report {
        let texts = self
            .files
            .iter()
            .filter(|(_, _, original, doc)| original.is_some() || !doc.text.is_empty())
            .map(|(kind, path, _, doc)| (*kind, path.clone(), doc.text.clone()))
            .collect();
        crate::validate::finish(config::load_texts(&self.dir, texts, &ctx.load))
    }

    /// Validates, then writes the edited files (or, with `dry_run`, describes them). Refuses
    /// to write an invalid config or over a file that changed since it was read.
    pub fn commit(&self, ctx: &ManageContext, dry_run: bool) -> Result<Written> {
        let changed = self.changed();
        let names = changed.iter().map(|k| k.file_name().to_string()).collect();
        if changed.is_empty() {
            return Ok(Written {
                files: Vec::new(),
                dry_run,
                diff: dry_run.then(String::new),
            });
        }
        let report = self.validate(ctx);
        if !report.is_valid() {
            return Err(ManageError::invalid(&report, names));
        }
        if dry_run {
            let mut diff = String::new();
            for kind in &changed {
                let (_, _, original, doc) = &self.files[Self::slot(*kind)];
                let name = kind.file_name();
                diff.push_str(
                    &similar::TextDiff::from_lines(original.as_deref().unwrap_or(""), &doc.text)
                        .unified_diff()
                        .context_radius(3)
                        .header(&format!("a/{name}"), &format!("b/{name}"))
                        .to_string(),
                );
            }
            return Ok(Written {
                files: names,
                dry_run,
                diff: Some(diff),
            });
        }
        for kind in &changed {
            let (_, path, _, _) = &self.files[Self::slot(*kind)];
            if let Some(hook) = &ctx.before_write {
                hook(path);
            }
            #[cfg(feature = "failpoints")]
            test_edit_before_write(path);
        }
        // Every file is checked before any is written: an outside edit to one of them stops
        // the whole change.
        for kind in &changed {
            let (_, path, original, _) = &self.files[Self::slot(*kind)];
            if read_text(path)? != *original {
                return Err(ManageError::Stale(path.clone()));
            }
        }
        for kind in &changed {
            let (_, path, _, doc) = &self.files[Self::slot(*kind)];
            crate::durable::write_atomic(path, doc.text.as_bytes()).map_err(|source| {
                ManageError::Io {
                    context: format!("cannot write `{}`", path.display()),
                    source,
                }
            })?;
        }
        Ok(Written {
            files: names,
            dry_run,
            diff: None,
        })
    }
}

/// With the `failpoints` feature, `DEEPCLI_MANAGE_EDIT_BEFORE_WRITE=FILE` appends a comment to
/// that config file (by name) just before the outside-change check: the binary-level test of
/// that check.
#[cfg(feature = "failpoints")]
fn test_edit_before_write(path: &std::path::Path) {
    let Ok(name) = std::env::var("DEEPCLI_MANAGE_EDIT_BEFORE_WRITE") else {
        return;
    };
    if path
        .file_name()
        .is_some_and(|n| n.to_string_lossy() == name)
    {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let _ = std::fs::write(path, format!("{text}# edited meanwhile\n"));
    }
}

fn read_text(path: &std::path::Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| ManageError::Io {
                context: format!("cannot edit `{}`", path.display()),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the file is not UTF-8 text",
                ),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ManageError::Io {
            context: format!("cannot read `{}`", path.display()),
            source,
        }),
    }
}
