//! Mount points: which directories have a filesystem mounted on them, for the trash
//! [`Guard`](crate::trash::Guard). Moving a mount point, or a tree with one inside, could only
//! fail half way or empty the mounted filesystem, so deepcli refuses both.
//!
//! Two sources, because each misses something: a directory whose device differs from its
//! parent's is a mount point (this catches every mount, in any namespace view, but not a bind
//! mount of a directory of the same filesystem); `/proc/self/mountinfo` lists every mount point
//! of this process's mount namespace, bind mounts included. Reads the system; decides nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mount points of this process's mount namespace, from `/proc/self/mountinfo`; empty where
/// it cannot be read (then [`is_mount_point`] still compares devices).
pub(crate) fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| parse_mountinfo(&text))
        .unwrap_or_default()
}

/// The mount point column (the fifth) of each line of a `mountinfo` file, with the kernel's
/// octal escapes (`\040` for a space, `\011`, `\012`, `\134`) undone. Lines it cannot read are
/// skipped.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsString::from_vec(unescape(field.as_bytes()))))
        .collect()
}

fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|d| {
            field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Whether `path` (absolute, symlinks resolved) has a filesystem mounted on it: it is listed in
/// `table`, its device differs from its parent's, or it is the root. A path that cannot be
/// inspected is not one: whoever then moves it gets that error.
pub(crate) fn is_mount_point(path: &Path, table: &[PathBuf]) -> bool {
    if table.iter().any(|m| m == path) {
        return true;
    }
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if !meta.is_dir() {
        return false;
    }
    let Some(parent) = path.parent() else {
        return true;
    };
    match std::fs::metadata(parent) {
        Ok(up) => up.dev() != meta.dev() || up.ino() == meta.ino(),
        Err(_) => false,
    }
}

/// The first mount point of `table` strictly inside `path` (absolute, symlinks resolved).
pub(crate) fn mount_inside<'a>(path: &Path, table: &'a [PathBuf]) -> Option<&'a Path> {
    table
        .iter()
        .find(|m| m.as_path() != path && m.starts_with(path))
        .map(PathBuf::as_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_their_mount_points_unescaped() {
        let text = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
66 46 0:40 / /srv/my\\040disk\\134x rw,relatime shared:5 - tmpfs tmpfs rw
short line
";
        assert_eq!(
            parse_mountinfo(text),
            [
                PathBuf::from("/proc"),
                PathBuf::from("/"),
                PathBuf::from("/srv/my disk\\x")
            ]
        );
        // A backslash not followed by three octal digits stays as it is.
        assert_eq!(unescape(b"a\\9b\\04"), b"a\\9b\\04");
    }

    #[test]
    fn a_mount_point_is_told_from_a_plain_directory() {
        let dir = tempfile::tempdir().unwrap();
        let plain = std::fs::canonicalize(dir.path()).unwrap().join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert!(!is_mount_point(&plain, &[]));
        assert!(!is_mount_point(&plain.join("missing"), &[]));
        assert!(is_mount_point(Path::new("/"), &[]), "the root always is");
        // Listed in the table (a bind mount has its parent's device).
        assert!(is_mount_point(&plain, std::slice::from_ref(&plain)));
        // A different device from its parent: /proc, where it is mounted.
        if std::fs::metadata("/proc/self").is_ok() {
            assert!(is_mount_point(Path::new("/proc"), &[]));
        }
        let table = [PathBuf::from("/"), plain.join("disk")];
        assert_eq!(
            mount_inside(&plain, &table),
            Some(plain.join("disk").as_path())
        );
        assert_eq!(mount_inside(&plain.join("disk"), &table), None);
    }
}
