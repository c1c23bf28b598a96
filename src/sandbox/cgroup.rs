//! A cgroup v2 per Landlock runtime: what keeps its processes together without a PID namespace.
//! The controller makes `<its own cgroup>/deepcli-<controller pid>-<agent>` before the start;
//! `deepcli sandbox exec` moves itself into it before it restricts itself and execs the
//! command, so everything the runtime starts is in it, a `setsid` child that cleared
//! `DEEPCLI_AGENT_ID` included (Landlock keeps it from writing itself out: the cgroup file
//! system is not granted). A stop ends with [`Cgroup::kill`]: `cgroup.kill` (Linux 5.14) kills
//! every process in it at once, then the directory goes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long [`Cgroup::kill`] waits for the kernel to report the cgroup empty.
const EMPTY_WAIT: Duration = Duration::from_secs(5);

/// The controller's own cgroup v2 directory, where runtime cgroups can be made and killed;
/// else why not (no cgroup2 mount, no `cgroup.kill`, not allowed to make one).
pub(crate) fn base() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup v2 file system is mounted")?;
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let path = own_cgroup(&own).ok_or("this process is in no cgroup v2 group")?;
    let base = mount.join(path.trim_start_matches('/'));
    let probe = base.join(format!("deepcli-{}-probe", std::process::id()));
    let _ = std::fs::remove_dir(&probe);
    std::fs::create_dir(&probe)
        .map_err(|e| format!("cannot make a cgroup under {}: {e}", base.display()))?;
    let has_kill = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if !has_kill {
        return Err(format!(
            "{} has no `cgroup.kill` (Linux 5.14 or later)",
            base.display()
        ));
    }
    Ok(base)
}

/// Where the cgroup2 file system is mounted, from `/proc/self/mountinfo`.
pub(crate) fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fstype = after.split(' ').next()?;
        let mount_point = before.split(' ').nth(4)?;
        (fstype == "cgroup2").then(|| PathBuf::from(mount_point))
    })
}

/// This process's cgroup v2 path, from `/proc/self/cgroup` (its `0::<path>` line).
pub(crate) fn own_cgroup(text: &str) -> Option<&str> {
    text.lines().find_map(|l| l.strip_prefix("0::"))
}

/// One runtime's cgroup.
#[derive(Debug)]
pub(crate) struct Cgroup {
    pub path: PathBuf,
}

impl Cgroup {
    /// Makes `agent`'s cgroup under `base`, empty: one left by an earlier start is killed first.
    pub(crate) fn create(base: &Path, agent: &str) -> std::io::Result<Cgroup> {
        let cgroup = Cgroup {
            path: base.join(format!("deepcli-{}-{agent}", std::process::id())),
        };
        if cgroup.path.exists() {
            cgroup.kill_blocking();
        }
        std::fs::create_dir(&cgroup.path)?;
        Ok(cgroup)
    }

    /// Kills every process in it and removes it; waits (bounded) for the kernel to empty it.
    pub(crate) async fn kill(&self) {
        let path = self.path.clone();
        let _ = tokio::task::spawn_blocking(move || Cgroup { path }.kill_blocking()).await;
    }

    fn kill_blocking(&self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        let deadline = Instant::now() + EMPTY_WAIT;
        while Instant::now() < deadline {
            let events =
                std::fs::read_to_string(self.path.join("cgroup.events")).unwrap_or_default();
            if !events.lines().any(|l| l == "populated 1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = std::fs::remove_dir(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(cgroup = %self.path.display(), error = %e, "a runtime's cgroup is left");
        }
    }
}

/// Kills the runtimes' cgroups under `base` that a controller no longer running left (one
/// killed with `kill -9` cannot remove them): whatever of its runtimes' trees still runs there,
/// a `setsid` child included, dies now. Cgroups of a controller that runs are not touched.
/// Returns how many were swept.
pub(crate) fn sweep(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut swept = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = left_by(&name.to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        Cgroup { path: entry.path() }.kill_blocking();
        swept += 1;
    }
    swept
}

/// The controller pid in a runtime cgroup's name, `deepcli-<pid>-<agent>`.
fn left_by(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("deepcli-")?;
    let (pid, agent) = rest.split_once('-')?;
    (!agent.is_empty() && agent != "probe").then_some(())?;
    pid.parse().ok()
}

/// Moves this process into the cgroup at `path` (what `sandbox exec` does first).
pub(crate) fn join(path: &Path) -> std::io::Result<()> {
    std::fs::write(path.join("cgroup.procs"), std::process::id().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_cgroup_names_the_controller_that_made_it() {
        assert_eq!(left_by("deepcli-4242-alpha"), Some(4242));
        assert_eq!(left_by("deepcli-4242-my-agent"), Some(4242));
        assert_eq!(left_by("deepcli-4242-probe"), None);
        assert_eq!(left_by("deepcli-x-alpha"), None);
        assert_eq!(left_by("user.slice"), None);
    }

    /// A cgroup left by a controller that no longer runs is killed and removed, its process
    /// with it; one of a running controller stays.
    #[test]
    fn cgroups_left_by_a_dead_controller_are_swept() {
        let Ok(base) = base() else {
            return; // no usable cgroup v2 here: nothing Landlock could have left
        };
        let dead = {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            pid
        };
        // A cgroup named as a dead controller's, with a process in it.
        let renamed = base.join(format!("deepcli-{dead}-sweep"));
        std::fs::create_dir(&renamed).unwrap();
        let mut sleeper = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        std::fs::write(renamed.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        let ours = Cgroup::create(&base, "sweep-ours").unwrap();
        assert!(sweep(&base) >= 1);
        assert!(!renamed.exists());
        let status = sleeper.wait().unwrap();
        assert!(!status.success(), "killed: {status:?}");
        assert!(ours.path.exists(), "a running controller's stays");
        ours.kill_blocking();
    }

    #[test]
    fn the_cgroup2_mount_and_own_group_are_read_from_proc() {
        let mountinfo = "25 30 0:23 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw\n\
                         33 25 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/sda rw\n"), None);
        assert_eq!(
            own_cgroup("4:memory:/x\n0::/user.slice/a.scope\n"),
            Some("/user.slice/a.scope")
        );
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }
}
