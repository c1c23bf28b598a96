//! The bubblewrap backend: the runtime is started as `bwrap <args> -- <command>`, in new user,
//! PID, IPC, UTS and cgroup namespaces (and a network namespace unless `network: host`), with
//! no capabilities, in a file system view built from nothing: the system read-only, then
//! [`Layout::mounts`]. bubblewrap's own init is the namespace's PID 1, and bubblewrap dies with
//! the controller's runtime task (`--die-with-parent`): when it goes, the kernel kills every
//! process left in the namespace, a `setsid` one included.

use std::ffi::OsString;
use std::path::Path;

use super::{Layout, Mount, RUN_DIR, SYSTEM};

/// `bwrap`'s arguments for `layout`, up to and including `--`: the command follows.
/// `run_dir`: the host directory with the sandbox's sockets, mounted at [`RUN_DIR`].
pub(crate) fn args(layout: &Layout, cwd: &Path, run_dir: Option<&Path>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |parts: &[&std::ffi::OsStr]| out.extend(parts.iter().map(|p| p.to_os_string()));
    push(&[
        "--die-with-parent".as_ref(),
        "--new-session".as_ref(),
        "--unshare-user".as_ref(),
        "--unshare-pid".as_ref(),
        "--unshare-ipc".as_ref(),
        "--unshare-uts".as_ref(),
        "--unshare-cgroup-try".as_ref(),
        "--cap-drop".as_ref(),
        "ALL".as_ref(),
    ]);
    if layout.network.is_private() {
        push(&["--unshare-net".as_ref()]);
    }
    for dir in SYSTEM {
        push(&["--ro-bind-try".as_ref(), dir.as_ref(), dir.as_ref()]);
    }
    push(&[
        "--dev".as_ref(),
        "/dev".as_ref(),
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--tmpfs".as_ref(),
        "/tmp".as_ref(),
    ]);
    for mount in layout.mounts() {
        match &mount {
            Mount::Bind {
                path,
                writable,
                optional,
            } => {
                let flag = match (writable, optional) {
                    (true, true) => "--bind-try",
                    (true, false) => "--bind",
                    (false, true) => "--ro-bind-try",
                    (false, false) => "--ro-bind",
                };
                push(&[flag.as_ref(), path.as_os_str(), path.as_os_str()]);
            }
            Mount::Empty { path } => push(&["--tmpfs".as_ref(), path.as_os_str()]),
            Mount::Unreadable { path } => {
                push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), path.as_os_str()]);
            }
        }
    }
    if let Some(run_dir) = run_dir {
        push(&["--ro-bind".as_ref(), run_dir.as_os_str(), RUN_DIR.as_ref()]);
    }
    push(&["--chdir".as_ref(), cwd.as_os_str(), "--".as_ref()]);
    out
}
