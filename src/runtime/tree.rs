//! A runtime's whole process tree: its process group, and the processes that left it
//! (`setsid`, `setpgid`), found in `/proc` and named by pid and start time.
//!
//! A runtime is its leader and everything the leader started. The leader's process group holds
//! most of that, but a process may leave the group (`setsid`, `setpgid`) and its parent may
//! exit, after which nothing links it to the runtime any more. So:
//!
//! * the controller is the child subreaper of its descendants ([`adopt_orphans`]): an orphan
//!   of a runtime is re-parented to the controller, not to init, and every runtime gets
//!   [`AGENT_ENV`] in its environment, which tells whose orphan it is;
//! * [`Tree::sweep`] finds the runtime's processes (the ppid links down from the leader, its
//!   group, and the groups and sessions of processes that left it, the adopted orphans that
//!   carry its agent id) and records those outside the leader's group by pid and start time.
//!   The runtime task sweeps periodically and before a stop; the records go to the state, so
//!   the controller after a `kill -9` finds them too, even re-parented to init;
//! * every exit path (a stop, a crash, a shutdown, a successor's clean-up) ends with
//!   [`Tree::kill`]: SIGKILL to every live process of the tree until none is left.
//!
//! Not a cgroup: placing the child into one without a race needs `CLONE_INTO_CGROUP` or a
//! `pre_exec` hook (both `unsafe`, which the crate forbids) or an exec shim, and a writable
//! cgroup v2 subtree is rarely delegated to a service or a container. docs/controller.md says
//! what this leaves out.
//!
//! A process with a given pid and start time is one process: pids are reused, the pair is not.
//! A group or session id is an anchor's pid while the kernel keeps it for that group, so an id
//! is trusted only while no other process holds that pid.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::os::ProcStat;
pub(crate) use crate::os::ProcessId;

/// The variable every runtime gets with its agent id; an orphan that still carries it is
/// known to be that runtime's after its parent exited.
pub(super) const AGENT_ENV: &str = "DEEPCLI_AGENT_ID";

/// How long [`Tree::kill`] keeps killing a tree that forks faster than it dies.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Every process `/proc` showed at one moment.
#[derive(Debug, Default)]
struct Procs {
    by_pid: HashMap<u32, ProcStat>,
    /// Whether `/proc` could be read at all (else signals go to the leader's group only).
    readable: bool,
}

impl Procs {
    fn scan() -> Procs {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Procs::default();
        };
        let by_pid = dir
            .filter_map(|entry| {
                let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
                // Gone since the listing: skipped.
                ProcStat::read(pid).map(|s| (pid, s))
            })
            .collect();
        Procs {
            by_pid,
            readable: true,
        }
    }

    /// A scan at most `max_age` old: the periodic sweeps of many runtimes share one.
    fn recent(max_age: Duration) -> Arc<Procs> {
        static LAST: Mutex<Option<(Instant, Arc<Procs>)>> = Mutex::new(None);
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, procs)) = last.as_ref()
            && at.elapsed() < max_age
        {
            return procs.clone();
        }
        let procs = Arc::new(Procs::scan());
        *last = Some((Instant::now(), procs.clone()));
        procs
    }

    /// Whether the process `id` names is still there (a zombie counts: its pid is not free).
    fn holds(&self, id: &ProcessId) -> bool {
        self.by_pid
            .get(&id.pid)
            .is_some_and(|p| p.start == id.start)
    }

    /// Whether `id.pid` may still serve as that process's group or session id: it is that
    /// process, or nobody's (the kernel keeps a group's id from reuse while the group lives).
    fn id_is_theirs(&self, id: &ProcessId) -> bool {
        self.by_pid.get(&id.pid).is_none_or(|p| p.start == id.start)
    }
}

/// Who is asking: the controller's pid and process group, and how to read a process's
/// [`AGENT_ENV`] (injected, so the membership rules are tested on made-up process tables).
struct Observer<'a> {
    me: u32,
    my_group: u32,
    agent_of: &'a (dyn Fn(u32) -> Option<String> + Sync),
}

impl Observer<'static> {
    fn this_process() -> Observer<'static> {
        Observer {
            me: std::process::id(),
            my_group: u32::try_from(nix::unistd::getpgrp().as_raw()).unwrap_or(0),
            agent_of: &adoptee_agent,
        }
    }
}

/// [`AGENT_ENV`] of a child of this process that is not a runtime leader (those are known
/// without reading their environment).
fn adoptee_agent(pid: u32) -> Option<String> {
    let leader = LEADERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&pid);
    if leader { None } else { agent_env(pid) }
}

/// [`AGENT_ENV`] in the environment `pid` was started with.
fn agent_env(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{AGENT_ENV}=");
    environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// One runtime's processes.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    leader: ProcessId,
    /// Whose orphans this controller adopted (`None` for a dead controller's leftovers: its
    /// orphans went to init, not here).
    agent_id: Option<String>,
    /// The processes outside the leader's group, as last swept, and the dead ones among them
    /// whose group or session still has members.
    escaped: BTreeSet<ProcessId>,
}

impl Tree {
    pub(crate) fn new(
        leader: ProcessId,
        agent_id: Option<String>,
        escaped: impl IntoIterator<Item = ProcessId>,
    ) -> Tree {
        Tree {
            leader,
            agent_id,
            escaped: escaped.into_iter().collect(),
        }
    }

    pub(crate) fn leader(&self) -> &ProcessId {
        &self.leader
    }

    pub(crate) fn escaped(&self) -> Vec<ProcessId> {
        self.escaped.iter().cloned().collect()
    }

    /// The tree's processes in `procs`, zombies included (their group and session ids still
    /// count).
    fn members<'p>(&self, procs: &'p Procs, observer: &Observer<'_>) -> Vec<&'p ProcStat> {
        // Pid 0 is "no leader on record"; group and session 0 are the kernel's.
        let anchors = || {
            std::iter::once(&self.leader)
                .chain(&self.escaped)
                .filter(|a| a.pid > 1)
        };
        let ids: BTreeSet<u32> = anchors()
            .filter(|a| procs.id_is_theirs(a))
            .map(|a| a.pid)
            .collect();
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut groups: HashMap<u32, Vec<u32>> = HashMap::new();
        for p in procs.by_pid.values() {
            children.entry(p.ppid).or_default().push(p.pid);
            groups.entry(p.pgrp).or_default().push(p.pid);
            if p.session != p.pgrp {
                groups.entry(p.session).or_default().push(p.pid);
            }
        }
        let mut queue: Vec<u32> = anchors()
            .filter(|a| procs.holds(a))
            .map(|a| a.pid)
            .collect();
        queue.extend(ids.iter().flat_map(|id| groups.get(id)).flatten());
        if let Some(agent) = &self.agent_id {
            // Orphans re-parented to this controller, from this runtime by their environment.
            queue.extend(
                children
                    .get(&observer.me)
                    .into_iter()
                    .flatten()
                    .filter(|pid| {
                        procs.by_pid.get(pid).is_some_and(|p| {
                            !p.zombie
                                && p.pgrp != observer.my_group
                                && (observer.agent_of)(p.pid).as_deref() == Some(agent.as_str())
                        })
                    }),
            );
        }
        let mut seen = BTreeSet::new();
        while let Some(pid) = queue.pop() {
            if pid <= 1 || pid == observer.me || !seen.insert(pid) {
                continue;
            }
            queue.extend(children.get(&pid).into_iter().flatten());
            queue.extend(groups.get(&pid).into_iter().flatten());
        }
        seen.iter()
            .filter_map(|pid| procs.by_pid.get(pid))
            .collect()
    }

    /// Records the processes outside the leader's group as `procs` shows them; true when that
    /// changed.
    fn update(&mut self, procs: &Procs, observer: &Observer<'_>) -> bool {
        if !procs.readable {
            return false;
        }
        let members = self.members(procs, observer);
        let live: Vec<&ProcStat> = members.iter().copied().filter(|p| !p.zombie).collect();
        let mut escaped: BTreeSet<ProcessId> = live
            .iter()
            .filter(|p| p.pgrp != self.leader.pid && p.pid != self.leader.pid)
            .map(|p| ProcessId {
                pid: p.pid,
                start: p.start.clone(),
            })
            .collect();
        // A dead one stays while its group or session lives: it names them.
        escaped.extend(
            self.escaped
                .iter()
                .filter(|e| {
                    procs.id_is_theirs(e)
                        && live.iter().any(|p| p.pgrp == e.pid || p.session == e.pid)
                })
                .cloned(),
        );
        let changed = escaped != self.escaped;
        self.escaped = escaped;
        changed
    }

    /// Looks for the tree's processes (in a scan shared with other runtimes' sweeps, at most
    /// `max_age` old); true when the record of those outside the group changed.
    pub(crate) async fn sweep(&mut self, max_age: Duration) -> bool {
        let procs = tokio::task::spawn_blocking(move || Procs::recent(max_age))
            .await
            .unwrap_or_default();
        let observer = Observer::this_process();
        reap(&procs, &observer);
        self.update(&procs, &observer)
    }

    /// Sends `signal` to every live process of the tree.
    pub(crate) fn signal(&mut self, signal: Signal) {
        let procs = Procs::scan();
        let observer = Observer::this_process();
        self.update(&procs, &observer);
        self.signal_members(&procs, &observer, signal);
    }

    /// The live processes signalled.
    fn signal_members(&self, procs: &Procs, observer: &Observer<'_>, signal: Signal) -> usize {
        let live: Vec<&ProcStat> = self
            .members(procs, observer)
            .into_iter()
            .filter(|p| !p.zombie)
            .collect();
        for p in &live {
            if let Ok(pid) = i32::try_from(p.pid) {
                let _ = kill(Pid::from_raw(pid), signal);
            }
        }
        // Without /proc, the group is all there is to reach.
        let group_lives = live.iter().any(|p| p.pgrp == self.leader.pid);
        if (group_lives || !procs.readable)
            && let Ok(pgrp) = i32::try_from(self.leader.pid)
            && pgrp > 1
        {
            let _ = killpg(Pid::from_raw(pgrp), signal);
        }
        live.len()
    }

    /// Whether any process of the tree is alive.
    pub(crate) fn alive(&self) -> bool {
        let procs = Procs::scan();
        let observer = Observer::this_process();
        self.members(&procs, &observer).iter().any(|p| !p.zombie)
    }

    /// SIGKILL to every live process of the tree until none is left (a process forked
    /// meanwhile is found by the next look), for at most [`KILL_WAIT`]. The orphans among them
    /// that this controller adopted are reaped. Returns how many were still alive at the end.
    pub(crate) async fn kill(&mut self) -> usize {
        let deadline = Instant::now() + KILL_WAIT;
        let observer = Observer::this_process();
        loop {
            let procs = Procs::scan();
            reap(&procs, &observer);
            let signalled = self.signal_members(&procs, &observer, Signal::SIGKILL);
            if signalled == 0 || !procs.readable {
                self.escaped.clear();
                return 0;
            }
            if Instant::now() >= deadline {
                self.update(&procs, &observer);
                return signalled;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Makes this process the child subreaper of its descendants (Linux `PR_SET_CHILD_SUBREAPER`),
/// so an orphan of a runtime is re-parented here rather than to init. False when the system
/// refused.
pub(crate) fn adopt_orphans() -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_child_subreaper(true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The runtime leaders this process spawned and has not dropped: tokio waits for them itself,
/// so [`reap`] must leave them alone.
static LEADERS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// A spawned runtime leader, known to [`reap`] as tokio's to wait for until dropped.
#[derive(Debug)]
pub(crate) struct Leader(u32);

impl Leader {
    /// Spawns `cmd`, known as a leader from the moment it exists.
    pub(crate) fn spawn(
        cmd: &mut tokio::process::Command,
    ) -> std::io::Result<(tokio::process::Child, Leader)> {
        // Held across the spawn: a reap between the fork and the insert could take its exit.
        let mut leaders = LEADERS.lock().unwrap_or_else(|e| e.into_inner());
        let child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        leaders.insert(pid);
        Ok((child, Leader(pid)))
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        LEADERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

/// Reaps the dead orphans this controller adopted as subreaper: its zombie children that are
/// neither runtime leaders (tokio's) nor in its own process group (what it runs itself, such as
/// `git`, is waited for by whoever started it).
fn reap(procs: &Procs, observer: &Observer<'_>) {
    let leaders = LEADERS.lock().unwrap_or_else(|e| e.into_inner());
    for p in procs.by_pid.values() {
        if p.zombie
            && p.ppid == observer.me
            && p.pgrp != observer.my_group
            && !leaders.contains(&p.pid)
            && let Ok(pid) = i32::try_from(p.pid)
        {
            let _ = nix::sys::wait::waitpid(
                Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
}

/// [`reap`] on a fresh look at `/proc`.
pub(crate) fn reap_adopted() {
    reap(&Procs::scan(), &Observer::this_process());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, ppid: u32, pgrp: u32, session: u32) -> ProcStat {
        ProcStat {
            pid,
            zombie: false,
            ppid,
            pgrp,
            session,
            start: format!("{pid}00"),
        }
    }

    fn id(pid: u32) -> ProcessId {
        ProcessId {
            pid,
            start: format!("{pid}00"),
        }
    }

    fn procs(list: &[ProcStat]) -> Procs {
        Procs {
            by_pid: list.iter().map(|s| (s.pid, s.clone())).collect(),
            readable: true,
        }
    }

    const ME: u32 = 10;
    const MY_GROUP: u32 = 5;

    fn pids(
        tree: &Tree,
        procs: &Procs,
        agent_of: &(dyn Fn(u32) -> Option<String> + Sync),
    ) -> Vec<u32> {
        let observer = Observer {
            me: ME,
            my_group: MY_GROUP,
            agent_of,
        };
        let mut pids: Vec<u32> = tree
            .members(procs, &observer)
            .iter()
            .map(|p| p.pid)
            .collect();
        pids.sort();
        pids
    }

    #[test]
    fn stat_lines_parse_with_any_command_name() {
        let line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(
            ProcStat::parse(4242, line),
            Some(ProcStat {
                pid: 4242,
                zombie: false,
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                start: "987654".into(),
            })
        );
        assert_eq!(ProcStat::parse(1, "1 (truncated) S 0"), None);
    }

    #[test]
    fn the_tree_follows_children_groups_sessions_and_adopted_orphans() {
        let table = procs(&[
            stat(ME, 1, MY_GROUP, MY_GROUP),
            stat(11, ME, MY_GROUP, MY_GROUP), // git, run by the controller itself
            stat(20, ME, 20, MY_GROUP),       // the leader
            stat(21, 20, 20, MY_GROUP),       // its child
            stat(22, 20, 22, 22),             // a child that called setsid
            stat(23, 22, 22, 22),             // and its child
            stat(24, ME, 24, 24),             // an orphan of this runtime, in a session of its own
            stat(25, 24, 24, 24),             // and its child
            stat(30, ME, 30, MY_GROUP),       // another runtime's leader
            stat(31, ME, 31, 31),             // another runtime's orphan
            stat(40, 1, 20, MY_GROUP),        // an orphan re-parented to init, still in the group
        ]);
        let agent_of = |pid: u32| match pid {
            20 | 21 | 22 | 23 | 24 | 25 | 40 => Some("a".to_string()),
            30 | 31 => Some("b".to_string()),
            _ => None,
        };
        let tree = Tree::new(id(20), Some("a".into()), []);
        assert_eq!(pids(&tree, &table, &agent_of), [20, 21, 22, 23, 24, 25, 40]);
        // A dead controller's leftovers: its orphans are not this controller's children.
        let tree = Tree::new(id(20), None, []);
        assert_eq!(pids(&tree, &table, &agent_of), [20, 21, 22, 23, 40]);
    }

    #[test]
    fn recorded_escapes_are_found_after_their_parents_are_gone() {
        // The leader is dead and its pid free; what escaped it was re-parented to init.
        let table = procs(&[
            stat(ME, 1, MY_GROUP, MY_GROUP),
            stat(22, 1, 22, 22), // recorded
            stat(26, 1, 22, 22), // in the group of 22, its parent gone
            stat(28, 1, 28, 27), // in the session of 27, recorded and dead since
            stat(40, 1, 20, 5),  // still in the dead leader's group
            stat(50, 1, 50, 50), // unrelated
        ]);
        let mut tree = Tree::new(id(20), None, [id(22), id(27)]);
        let none = |_: u32| None;
        assert_eq!(pids(&tree, &table, &none), [22, 26, 28, 40]);
        let observer = Observer {
            me: ME,
            my_group: MY_GROUP,
            agent_of: &none,
        };
        tree.update(&table, &observer);
        assert_eq!(
            tree.escaped(),
            [id(22), id(26), id(27), id(28)],
            "27 is dead but its session lives"
        );
    }

    #[test]
    fn a_reused_pid_is_not_the_recorded_process() {
        // The pids of the leader and of a recorded escape now belong to other processes.
        let mut leader = stat(20, 1, 20, 20);
        leader.start = "999".into();
        let mut other = stat(22, 1, 22, 22);
        other.start = "998".into();
        let table = procs(&[leader, other, stat(23, 1, 22, 22)]);
        let tree = Tree::new(id(20), None, [id(22)]);
        assert!(pids(&tree, &table, &|_| None).is_empty());
    }
}
