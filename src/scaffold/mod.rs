//! `deepcli init`: the files of a new hub that works at once — agents.yaml (`main` running the
//! demo agent), channels.yaml (the command line, a Telegram bot commented out), bindings.yaml,
//! the three JSON Schemas their modelines point at (under [`SCHEMA_DIR`], so editors check the
//! files offline), and a `.gitignore` line for the state directory it suggests
//! ([`STATE_DIR`]). Never replaces a config file unless asked to.

use std::path::{Path, PathBuf};

use crate::config::{FileKind, schema};

/// The state directory `init` suggests, beside the config (and ignored by git).
pub(crate) const STATE_DIR: &str = ".deepcli-state";
/// Where the schemas go, relative to the config directory: the modelines name them there.
pub(crate) const SCHEMA_DIR: &str = ".deepcli/schema";
/// The line `.gitignore` gets.
const IGNORE_LINE: &str = "/.deepcli-state/";

/// The config files, as `init` writes them: the modeline, then the template.
fn template(kind: FileKind) -> String {
    let body = match kind {
        FileKind::Agents => include_str!("agents.yaml"),
        FileKind::Channels => include_str!("channels.yaml"),
        FileKind::Bindings => include_str!("bindings.yaml"),
    };
    format!("# {}\n{body}", modeline(kind))
}

/// A config file's modeline (the comment, without `# `): its schema, at the path
/// [`write_schemas`] puts it relative to the file, so editors with the YAML language server
/// check the file offline. `init` and `import openclaw` both write it.
pub(crate) fn modeline(kind: FileKind) -> String {
    format!(
        "yaml-language-server: $schema={}",
        schema_path(kind).display()
    )
}

/// A schema's path relative to the config directory.
pub(crate) fn schema_path(kind: FileKind) -> PathBuf {
    let name = match kind {
        FileKind::Agents => "agents.schema.json",
        FileKind::Channels => "channels.schema.json",
        FileKind::Bindings => "bindings.schema.json",
    };
    Path::new(SCHEMA_DIR).join(name)
}

/// What `init` did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    Created,
    /// It was there, and `--force` replaced it (a schema is always brought up to date).
    Replaced,
    /// `.gitignore` was there: the line was added.
    Appended,
    /// `.gitignore` ignores the state directory already.
    Kept,
}

/// One file `init` wrote (or left as it was), relative to the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub path: PathBuf,
    pub done: Done,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum InitError {
    /// Config files are there already: nothing was written.
    #[error("{} already in {}; nothing was written", names(.existing), .dir.display())]
    Exists {
        dir: PathBuf,
        existing: Vec<PathBuf>,
    },
    #[error("`{}` is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot write `{}`: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn names(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    match names.len() {
        1 => format!("{} is", names[0]),
        _ => format!("{} are", names.join(", ")),
    }
}

/// `.gitignore`'s new text, or `None` when `text` ignores the state directory already.
fn ignore_text(text: Option<&str>) -> Option<String> {
    let ignored = text.is_some_and(|t| {
        t.lines().any(|l| {
            matches!(
                l.trim(),
                "/.deepcli-state/" | ".deepcli-state/" | "/.deepcli-state" | ".deepcli-state"
            )
        })
    });
    if ignored {
        return None;
    }
    let block = format!(
        "# deepcli's state (database, workspaces, logs, trash), beside the config:\n# deepcli --config . --state-dir {STATE_DIR} up\n{IGNORE_LINE}\n"
    );
    Some(match text {
        None | Some("") => block,
        Some(t) if t.ends_with('\n') => format!("{t}\n{block}"),
        Some(t) => format!("{t}\n\n{block}"),
    })
}

/// Writes the three schemas the modelines name into `dir` (under [`SCHEMA_DIR`], made if
/// missing), replacing what is there: a schema is always brought up to date.
pub(crate) fn write_schemas(dir: &Path) -> Result<Vec<Written>, InitError> {
    std::fs::create_dir_all(dir.join(SCHEMA_DIR)).map_err(|source| InitError::Io {
        path: dir.join(SCHEMA_DIR),
        source,
    })?;
    let mut out = Vec::new();
    for kind in FileKind::ALL {
        out.push(put(dir, schema_path(kind), schema::text(kind))?);
    }
    Ok(out)
}

/// Writes `text` to `dir/relative`, whole, and says whether it was there.
fn put(dir: &Path, relative: PathBuf, text: &str) -> Result<Written, InitError> {
    let path = dir.join(&relative);
    let done = if path.symlink_metadata().is_ok() {
        Done::Replaced
    } else {
        Done::Created
    };
    crate::durable::write_file(&path, text.as_bytes(), true)
        .map_err(|source| InitError::Io { path, source })?;
    Ok(Written {
        path: relative,
        done,
    })
}

/// Writes a new hub into `dir` (made if missing). Refuses, writing nothing, when one of the
/// three config files is there, unless `force`.
pub(crate) fn init(dir: &Path, force: bool) -> Result<Vec<Written>, InitError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| InitError::Io { path, source }
    };
    if dir.exists() && !dir.is_dir() {
        return Err(InitError::NotADirectory(dir.to_path_buf()));
    }
    let existing: Vec<PathBuf> = FileKind::ALL
        .iter()
        .map(|kind| PathBuf::from(kind.file_name()))
        .filter(|name| dir.join(name).symlink_metadata().is_ok())
        .collect();
    if !existing.is_empty() && !force {
        return Err(InitError::Exists {
            dir: dir.to_path_buf(),
            existing,
        });
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut out = Vec::new();
    for kind in FileKind::ALL {
        out.push(put(dir, PathBuf::from(kind.file_name()), &template(kind))?);
    }
    out.extend(write_schemas(dir)?);
    let gitignore = dir.join(".gitignore");
    let current = match std::fs::read_to_string(&gitignore) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(&gitignore)(e)),
    };
    let done = match ignore_text(current.as_deref()) {
        None => Done::Kept,
        Some(text) => {
            crate::durable::write_file(&gitignore, text.as_bytes(), true)
                .map_err(io(&gitignore))?;
            if current.is_some() {
                Done::Appended
            } else {
                Done::Created
            }
        }
    };
    out.push(Written {
        path: PathBuf::from(".gitignore"),
        done,
    });
    crate::durable::sync_fs(dir).map_err(io(dir))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_modeline_names_the_schema_init_writes_beside_it() {
        for kind in FileKind::ALL {
            let text = template(kind);
            let first = text.lines().next().unwrap_or_default();
            assert_eq!(
                first,
                format!(
                    "# yaml-language-server: $schema={}",
                    schema_path(kind).display()
                ),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn gitignore_gets_the_state_directory_once() {
        let new = ignore_text(None).unwrap();
        assert!(new.lines().any(|l| l == IGNORE_LINE), "{new}");
        assert_eq!(ignore_text(Some(&new)), None);
        assert_eq!(ignore_text(Some("target\n.deepcli-state/\n")), None);
        let appended = ignore_text(Some("target")).unwrap();
        assert!(appended.starts_with("target\n\n#"), "{appended}");
        assert!(
            appended.ends_with(&format!("{IGNORE_LINE}\n")),
            "{appended}"
        );
    }
}
