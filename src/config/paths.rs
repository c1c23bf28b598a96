//! Path resolution for workspace, agentDir and sandbox binds: `~` is the home directory, a
//! relative path lives under the state directory (a bind must not be relative), and the result
//! is lexically normalized (`.` and `..` folded) so that two spellings of one directory compare
//! equal. No filesystem access: symlinks are not followed, which keeps validation pure and
//! repeatable in CI.

use std::path::{Component, Path, PathBuf};

/// Resolves a configured path.
pub fn resolve(raw: &str, state_dir: &Path, home: Option<&Path>) -> PathBuf {
    let expanded = expand_home(raw, home);
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        state_dir.join(expanded)
    };
    normalize(&absolute)
}

/// Resolves a host path named by the config that must not depend on the state directory
/// (`sandbox.binds[].path`): absolute, or `~` / `~/…` under `home`, normalized as [`resolve`]
/// does. `None` for a relative path, and for a `~` path when there is no home to expand it to.
pub fn absolute(raw: &str, home: Option<&Path>) -> Option<PathBuf> {
    let expanded = expand_home(raw, home);
    expanded.is_absolute().then(|| normalize(&expanded))
}

/// `~` and `~/…` under `home`; anything else (`~user/…` included) as written.
fn expand_home(raw: &str, home: Option<&Path>) -> PathBuf {
    match (raw.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home.to_path_buf(),
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(&rest[1..]),
        _ => PathBuf::from(raw),
    }
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

    #[test]
    fn absolute_paths_take_no_state_directory() {
        let home = Some(Path::new("/home/op"));
        assert_eq!(absolute("/data/./x/", home), Some(PathBuf::from("/data/x")));
        assert_eq!(
            absolute("~/data", home),
            Some(PathBuf::from("/home/op/data"))
        );
        assert_eq!(absolute("~", home), Some(PathBuf::from("/home/op")));
        assert_eq!(absolute("data", home), None);
        assert_eq!(absolute("./data", home), None);
        assert_eq!(absolute("~other/data", home), None);
        assert_eq!(absolute("~/data", None), None);
    }
}
