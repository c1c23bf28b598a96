//! What this host can sandbox with, looked at once per process.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The sandbox backends this host has.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    /// bubblewrap's path, once it was seen to make the namespaces a sandbox needs; else why not.
    pub bwrap: Result<PathBuf, String>,
    /// The kernel's Landlock ABI ([`super::landlock::probe`]); else why there is none.
    pub landlock: Result<u8, String>,
    /// Where a Landlock runtime's cgroup is made ([`super::cgroup::base`]); else why nowhere.
    pub cgroup: Result<PathBuf, String>,
}

impl Host {
    /// This host, probed on first use.
    pub(crate) fn get() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(|| Host {
            bwrap: bwrap(),
            landlock: landlock(),
            cgroup: super::cgroup::base(),
        })
    }
}

/// Whether a failpoints build was told this backend is missing
/// (`DEEPCLI_FAILPOINT_SANDBOX=no-bwrap,no-landlock`: the fail-closed and Landlock tests).
#[cfg(feature = "failpoints")]
fn failpoint(name: &str) -> bool {
    std::env::var("DEEPCLI_FAILPOINT_SANDBOX").is_ok_and(|v| v.split(',').any(|p| p == name))
}

fn landlock() -> Result<u8, String> {
    #[cfg(feature = "failpoints")]
    if failpoint("no-landlock") {
        return Err("the kernel has no Landlock (failpoint)".into());
    }
    super::landlock::probe()
}

fn bwrap() -> Result<PathBuf, String> {
    // A failpoints build can be told that bubblewrap is missing (the fail-closed tests).
    #[cfg(feature = "failpoints")]
    if failpoint("no-bwrap") {
        return Err("`bwrap` not found on PATH (failpoint)".into());
    }
    let path = super::on_path("bwrap").ok_or_else(|| "`bwrap` not found on PATH".to_string())?;
    // The namespaces every sandbox asks for: a kernel or container that refuses them (user
    // namespaces turned off, a seccomp profile) is found here, not at the first agent's start.
    // `--as-pid-1`: no init of bubblewrap's in the new namespace, which outlives the `bwrap`
    // waited for here and, orphaned, would be a zombie of the controller (it adopts orphans)
    // for as long as it runs. Its own process group all the same, so the controller reaps
    // whatever else it may leave (`crate::runtime::reap_adopted`).
    let probe = Command::new(&path)
        .args([
            "--unshare-user",
            "--unshare-pid",
            "--as-pid-1",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .output()
        .map_err(|e| format!("`{}` does not run: {e}", path.display()))?;
    if !probe.status.success() {
        let said = String::from_utf8_lossy(&probe.stderr);
        return Err(format!(
            "`{}` cannot make namespaces here: {}",
            path.display(),
            said.trim()
        ));
    }
    Ok(path)
}
