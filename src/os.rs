//! What the operating system says of processes: `/proc/<pid>/stat` read once, in one place, and
//! the names that identify a process across pid reuse. Linux only; a leaf: it knows nothing of
//! runtimes, leases or the state.

use serde::{Deserialize, Serialize};

/// One process: a pid and its start time (clock ticks since boot, `/proc/<pid>/stat` field 22),
/// which together name it even after the pid is reused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    pub start: String,
}

impl ProcessId {
    /// The running (or dead, not yet reaped) process `pid`.
    pub fn of(pid: u32) -> Option<ProcessId> {
        ProcStat::read(pid).map(|s| ProcessId {
            pid,
            start: s.start,
        })
    }
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcStat {
    pub pid: u32,
    /// Exited, not yet reaped by its parent (state `Z`), or dead (`X`): a zombie keeps its
    /// `/proc` entry and its pid, but runs nothing.
    pub zombie: bool,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
    /// The start time in clock ticks since boot.
    pub start: String,
}

impl ProcStat {
    /// The process `pid` as `/proc` shows it now; `None` when there is none.
    pub fn read(pid: u32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(pid, &text)
    }

    /// Parses the text of `/proc/<pid>/stat`.
    pub fn parse(pid: u32, text: &str) -> Option<ProcStat> {
        // The command name (field 2) is in parentheses and may hold spaces and parentheses.
        let after = text.get(text.rfind(')')? + 1..)?;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
        Some(ProcStat {
            pid,
            zombie: matches!(fields.first(), Some(&"Z") | Some(&"X")),
            ppid: number(1)?,
            pgrp: number(2)?,
            session: number(3)?,
            start: fields.get(19)?.to_string(),
        })
    }
}

/// The start time of process `pid`, which with the pid names one process even after the pid is
/// reused. A zombie has one too.
pub fn process_start(pid: u32) -> Option<String> {
    ProcStat::read(pid).map(|p| p.start)
}

/// This machine's host name (`localhost` when it has none that is text).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}
