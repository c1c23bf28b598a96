//! The [`Guard`]: the paths deepcli must never move, whoever asks (the plan refuses a
//! workspace or agentDir with it, `apply` checks every path again before moving, `manage`
//! before it bootstraps a directory). It reads the mount table and resolves symlinks; it moves
//! nothing and knows nothing of entries or manifests.

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::TrashError;
use crate::mounts;

/// Why the [`Guard`] refused a path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    #[error("it is a relative path, and deepcli only moves absolute paths")]
    Relative,
    /// `dir` is the path itself, lexically or resolved, so the message does not repeat it.
    #[error("it is {what}")]
    Is { what: &'static str, dir: PathBuf },
    #[error("it contains {what} `{}`", dir.display())]
    Contains { what: &'static str, dir: PathBuf },
    #[error("it lies inside deepcli's trash `{}`", dir.display())]
    InTrash { dir: PathBuf },
    /// A tree the system owns whole (`/etc`, `/usr`, …): nothing in it is an agent's.
    #[error("it lies inside the system directory `{}`", tree.display())]
    InSystemTree { tree: PathBuf },
    #[error("it is a mount point (a filesystem is mounted on it)")]
    MountPoint,
    #[error("it contains the mount point `{}`", dir.display())]
    ContainsMountPoint { dir: PathBuf },
}

impl PathRefusal {
    /// Whether a mount is what stands in the way: unmounting it lifts the refusal.
    pub fn is_mount(&self) -> bool {
        matches!(
            self,
            PathRefusal::MountPoint | PathRefusal::ContainsMountPoint { .. }
        )
    }
}

/// A path the [`Guard`] refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{}`{} cannot be moved: {reason}", path.display(), self.note())]
pub struct RefusedPath {
    pub path: PathBuf,
    /// The path with symlinks resolved, when that is what the guard refused.
    pub resolved: Option<PathBuf>,
    pub reason: PathRefusal,
}

impl RefusedPath {
    /// The path in backticks, with what it resolves to when that is what was refused.
    pub fn subject(&self) -> String {
        format!("`{}`{}", self.path.display(), self.note())
    }

    pub(super) fn note(&self) -> String {
        match &self.resolved {
            Some(real) => format!(" (which resolves to `{}`)", real.display()),
            None => String::new(),
        }
    }
}

/// The paths deepcli must never move: `/`, home directories, system trees, mount points, its
/// config, state and trash directories, and anything containing one of them.
#[derive(Clone, Debug)]
pub struct Guard {
    protected: Vec<Protected>,
    trash: Vec<PathBuf>,
    /// The mount table, read when a directory is first checked.
    mounts: std::sync::OnceLock<Vec<PathBuf>>,
}

/// What is about to move: a directory (whole) or one file deepcli wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moving {
    Dir,
    /// A file deepcli wrote into a directory that stays. Only the rules about what the path
    /// *is* apply: taking deepcli's own file out of `/etc` moves nothing of the system's.
    File,
}

#[derive(Clone, Debug)]
struct Protected {
    what: &'static str,
    /// The lexical form, and the canonical one when it differs: a symlinked state directory
    /// is protected under both names.
    forms: Vec<PathBuf>,
}

impl Guard {
    /// `home` is the user's home directory; `/root` and every `/home/<name>` are protected
    /// whatever it is. The trash root is `<state_dir>/trash`.
    pub fn new(config_dir: &Path, state_dir: &Path, home: Option<&Path>) -> Guard {
        let trash_root = state_dir.join("trash");
        let mut protected = Vec::new();
        if let Some(home) = home {
            protected.push(Protected {
                what: "a home directory",
                forms: forms(home),
            });
        }
        protected.push(Protected {
            what: "a home directory",
            forms: forms(Path::new("/root")),
        });
        protected.push(Protected {
            what: "deepcli's config directory",
            forms: forms(config_dir),
        });
        protected.push(Protected {
            what: "deepcli's state directory",
            forms: forms(state_dir),
        });
        let trash = forms(&trash_root);
        protected.push(Protected {
            what: "deepcli's trash directory",
            forms: trash.clone(),
        });
        Guard {
            protected,
            trash,
            mounts: std::sync::OnceLock::new(),
        }
    }

    /// Refuses, as a directory to move whole or to bootstrap: `/`, a home directory (the given
    /// home, `/root` and any direct child of `/home`), a system tree or anything inside one
    /// ([`system_tree`]), a mount point or a directory with one inside it, the config dir, the
    /// state dir, the trash root, anything inside the trash root, or an ancestor of any of
    /// them; also refuses relative paths. Both the lexically normalized path and the path with
    /// symlinks resolved are checked.
    pub fn check(&self, path: &Path) -> Result<(), TrashError> {
        match self.refusal(path, Moving::Dir) {
            None => Ok(()),
            Some(refused) => Err(TrashError::Refused(refused)),
        }
    }

    /// Refuses, as one file deepcli wrote and now moves out of a directory that stays: a
    /// relative path, a path inside the trash, or one that *is* a protected directory. Where
    /// the file lies does not matter: it is deepcli's.
    pub fn check_file(&self, path: &Path) -> Result<(), TrashError> {
        match self.refusal(path, Moving::File) {
            None => Ok(()),
            Some(refused) => Err(TrashError::Refused(refused)),
        }
    }

    pub(super) fn refusal(&self, path: &Path, moving: Moving) -> Option<RefusedPath> {
        let refused = |resolved, reason| RefusedPath {
            path: path.to_path_buf(),
            resolved,
            reason,
        };
        if !path.is_absolute() {
            return Some(refused(None, PathRefusal::Relative));
        }
        let lexical = lexical(path);
        if let Some(reason) = self.refuse(&lexical, moving) {
            return Some(refused(None, reason));
        }
        // The kernel resolves `link/..` through the link, so canonicalize the path as given;
        // a path that does not exist yet resolves through its deepest existing ancestor.
        let real = fs::canonicalize(path).ok().or_else(|| resolve(&lexical));
        let resolved = real.clone().filter(|real| *real != lexical);
        if let Some(real) = &resolved
            && let Some(reason) = self.refuse(real, moving)
        {
            return Some(refused(resolved.clone(), reason));
        }
        if moving == Moving::File {
            return None;
        }
        // The mount table names mount points with symlinks resolved.
        let real = real.unwrap_or(lexical);
        let table = self.mounts.get_or_init(mounts::mount_points);
        let reason = if mounts::is_mount_point(&real, table) {
            PathRefusal::MountPoint
        } else {
            PathRefusal::ContainsMountPoint {
                dir: mounts::mount_inside(&real, table)?.to_path_buf(),
            }
        };
        Some(refused(resolved, reason))
    }

    fn refuse(&self, candidate: &Path, moving: Moving) -> Option<PathRefusal> {
        let homes = Path::new("/home");
        if candidate.parent().is_none() {
            return Some(PathRefusal::Is {
                what: "the filesystem root",
                dir: candidate.to_path_buf(),
            });
        }
        if candidate == homes {
            return Some(PathRefusal::Contains {
                what: "the home directories",
                dir: homes.to_path_buf(),
            });
        }
        if candidate.parent() == Some(homes) {
            return Some(PathRefusal::Is {
                what: "a home directory",
                dir: candidate.to_path_buf(),
            });
        }
        if moving == Moving::Dir
            && let Some(reason) = system_tree(candidate)
        {
            return Some(reason);
        }
        for protected in &self.protected {
            for form in &protected.forms {
                if candidate == form {
                    return Some(PathRefusal::Is {
                        what: protected.what,
                        dir: form.clone(),
                    });
                }
                if form.starts_with(candidate) {
                    return Some(PathRefusal::Contains {
                        what: protected.what,
                        dir: form.clone(),
                    });
                }
            }
        }
        // Nothing deepcli resolves for an agent lives in the trash; a path there is a
        // mistake that would move one entry into another.
        self.trash
            .iter()
            .find(|trash| candidate.starts_with(trash))
            .map(|trash| PathRefusal::InTrash { dir: trash.clone() })
    }
}

/// Whether an absolute, lexically normal path is a system tree: refused as a workspace or
/// agentDir, and never moved.
///
/// * `/etc`, `/usr`, `/bin`, `/sbin`, `/lib`, `/lib32`, `/lib64`, `/libx32`, `/libexec`,
///   `/boot`, `/proc`, `/sys`, `/dev` and `/run` belong to the system (its packages, its kernel,
///   its boot, its runtime state) with everything inside them: no agent's directory lies there.
/// * `/var`, `/opt`, `/srv`, `/tmp`, `/mnt` and `/media` are refused themselves, and so are the
///   directories directly in `/var` (`/var/lib`, `/var/log`, `/var/tmp`, …), which the system
///   shares out; below those, an operator's own places are fine: `/srv/agents/x`,
///   `/opt/hub/agents/x`, `/var/lib/deepcli/x`, a temporary directory in `/tmp`.
pub fn system_tree(path: &Path) -> Option<PathRefusal> {
    let mut parts = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)));
    let top = parts.next()?.as_os_str().to_str()?;
    let depth = 1 + parts.count();
    let tree = Path::new("/").join(top);
    let lib = top.strip_prefix("lib").is_some_and(|rest| {
        matches!(rest, "" | "x32" | "exec") || rest.bytes().all(|b| b.is_ascii_digit())
    });
    let owned = lib
        || matches!(
            top,
            "etc" | "usr" | "bin" | "sbin" | "boot" | "proc" | "sys" | "dev" | "run"
        );
    let shared = matches!(top, "var" | "opt" | "srv" | "tmp" | "mnt" | "media");
    if depth == 1 && (owned || shared) || depth == 2 && top == "var" {
        Some(PathRefusal::Is {
            what: "a system directory",
            dir: path.to_path_buf(),
        })
    } else if owned {
        Some(PathRefusal::InSystemTree { tree })
    } else {
        None
    }
}

fn forms(path: &Path) -> Vec<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        // Relative config and state directories come from the command line; the guard must
        // compare them as the kernel will see them.
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let lexical = lexical(&absolute);
    let mut out = vec![lexical.clone()];
    if let Some(real) = fs::canonicalize(&absolute)
        .ok()
        .or_else(|| resolve(&lexical))
        && real != lexical
    {
        out.push(real);
    }
    out
}

/// Folds `.` and `..` without touching the filesystem; `..` at the root stays at the root.
pub(super) fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The canonical form of the deepest existing ancestor of a lexical path, with the rest
/// appended.
fn resolve(path: &Path) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut current = path;
    loop {
        if let Ok(real) = fs::canonicalize(current) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Some(out);
        }
        rest.push(current.file_name()?.to_os_string());
        current = current.parent()?;
    }
}
