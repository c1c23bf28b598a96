//! Path resolution for workspace and agentDir: `~` is the home directory, a relative path lives
//! under the state directory, and the result is lexically normalized (`.` and `..` folded) so
//! that two spellings of one directory compare equal. No filesystem access: symlinks are not
//! followed, which keeps validation pure and repeatable in CI.

use std::path::{Component, Path, PathBuf};

/// Resolves a configured path.
pub fn resolve(raw: &str, state_dir: &Path, home: Option<&Path>) -> PathBuf {
    let expanded = match (raw.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home.to_path_buf(),
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(raw),
    };
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        state_dir.join(expanded)
    };
    normalize(&absolute)
}

/// Folds `.` and `..` without touching the filesystem.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_home_relative_and_dots() {
        let state = Path::new("/var/deepcli");
        let home = Some(Path::new("/home/op"));
        assert_eq!(
            resolve("~/agents/a", state, home),
            PathBuf::from("/home/op/agents/a")
        );
        assert_eq!(resolve("~", state, home), PathBuf::from("/home/op"));
        assert_eq!(
            resolve("work/a", state, home),
            PathBuf::from("/var/deepcli/work/a")
        );
        assert_eq!(resolve("/x/./y/../z/", state, home), PathBuf::from("/x/z"));
        assert_eq!(
            resolve("~other/x", state, home),
            PathBuf::from("/var/deepcli/~other/x")
        );
    }
}
