//! `deepcli sandbox explain <agent>`: what one agent's runtime can and cannot touch, from the
//! config — the same [`Layout`] and [`choose`] the runtime is started with.

use std::path::PathBuf;

use serde::Serialize;

use super::{Host, Layout, Mount, Network, SYSTEM, choose, is_system};

/// One agent's sandbox, explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Explanation {
    pub agent_id: String,
    /// `all` or `off`.
    pub mode: &'static str,
    /// The backend that would enforce it here; `None` with `mode: off`, or when none can
    /// (then `unavailable` says why: the runtime does not start).
    pub backend: Option<&'static str>,
    pub why: Option<String>,
    pub unavailable: Option<String>,
    pub readable: Vec<Entry>,
    pub writable: Vec<Entry>,
    pub hidden: Vec<Entry>,
    pub network: Network,
    pub processes: &'static str,
    /// What the chosen backend does not contain (docs/isolation.md, per backend).
    pub not_contained: Vec<String>,
    /// The environment's names (never values).
    pub environment: Vec<String>,
    /// One line: `all (bwrap, network host)`.
    pub summary: String,
}

/// A path and why it is where it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Entry {
    pub path: PathBuf,
    pub why: String,
}

/// The explanation of `layout` (`None`: `sandbox.mode: off`) on `host`; `environment` are the
/// names the runtime is given.
pub(crate) fn explain(
    agent_id: &str,
    layout: Option<&Layout>,
    host: &Host,
    environment: Vec<String>,
) -> Explanation {
    let Some(layout) = layout else {
        return Explanation {
            agent_id: agent_id.to_string(),
            mode: "off",
            backend: None,
            why: Some("sandbox.mode: off".into()),
            unavailable: None,
            readable: vec![Entry {
                path: "/".into(),
                why: "everything the controller's user can read: deepcli's state and operator token, the config, every agent's files".into(),
            }],
            writable: vec![Entry {
                path: "/".into(),
                why: "everything the controller's user can write".into(),
            }],
            hidden: Vec::new(),
            network: Network::Host,
            processes: "every process of the controller's user, the controller's included",
            not_contained: vec!["anything: the runtime runs as the controller does".into()],
            environment,
            summary: "off".into(),
        };
    };
    let (backend, why, unavailable) = match choose(layout, host) {
        Ok(choice) => (Some(choice.backend), Some(choice.why), None),
        Err(e) => (None, None, Some(e.why)),
    };
    let landlock = backend == Some(super::LANDLOCK);
    let mut readable: Vec<Entry> = SYSTEM
        .iter()
        .filter(|s| std::path::Path::new(s).exists())
        .map(|s| Entry {
            path: s.into(),
            why: "the system, read-only".into(),
        })
        .collect();
    let mut writable = Vec::new();
    if landlock {
        readable.push(Entry {
            path: "/proc".into(),
            why: "read-only; other processes' memory and environment stay out of reach (Landlock scopes ptrace)".into(),
        });
        let tmp = layout.home.join(".tmp");
        for entry in [&mut readable, &mut writable] {
            entry.push(Entry {
                path: tmp.clone(),
                why: "its TMPDIR, empty at start (/tmp itself is refused)".into(),
            });
        }
        writable.push(Entry {
            path: "/dev/null".into(),
            why: format!(
                "and the other device files a program needs: {}",
                super::landlock::DEVICES[1..].join(", ")
            ),
        });
    } else {
        readable.push(Entry {
            path: "/tmp".into(),
            why: "private to this sandbox, empty at start".into(),
        });
        writable.push(Entry {
            path: "/tmp".into(),
            why: "private to this sandbox".into(),
        });
    }
    let mut hidden = Vec::new();
    for mount in layout.mounts() {
        match mount {
            Mount::Bind {
                path, writable: w, ..
            } => {
                let why = layout
                    .grants
                    .iter()
                    .find(|g| g.path == path)
                    .map_or("", |g| g.why)
                    .to_string();
                readable.push(Entry {
                    path: path.clone(),
                    why: if w {
                        why.clone()
                    } else {
                        format!("{why}, read-only")
                    },
                });
                if w {
                    writable.push(Entry { path, why });
                }
            }
            Mount::Empty { path } if layout.scratch.as_ref() == Some(&path) => {
                writable.push(Entry {
                    path,
                    why: "workspaceAccess: none — an empty private directory over its workspace"
                        .into(),
                });
            }
            Mount::Empty { .. } | Mount::Unreadable { .. } => {}
        }
    }
    for path in &layout.hidden {
        let why = if layout.grants.iter().any(|g| path.starts_with(&g.path)) || is_system(path) {
            "hidden although it lies inside a readable path"
        } else if landlock {
            "never granted"
        } else {
            "never mounted"
        };
        hidden.push(Entry {
            path: path.clone(),
            why: why.into(),
        });
    }
    let summary = super::summary(layout, host);
    let landlock_gaps = |layout: &Layout| -> Vec<String> {
        let mut gaps = Vec::new();
        if layout.network == Network::None {
            gaps.push("UDP and Unix sockets: Landlock (ABI 6) refuses TCP only".into());
        }
        gaps.extend([
            "the process list: /proc shows every process's command line (not its memory or environment)".into(),
            "paths inside a grant: Landlock only grants, so nothing inside a readable tree can be hidden (this layout needs none hidden)".into(),
            "/tmp: not private; the runtime gets its own TMPDIR and /tmp is refused".into(),
            "the same user: it runs as the controller's user, every capability dropped".into(),
            "the kernel and CPU and memory, as with bubblewrap".into(),
        ]);
        gaps
    };
    Explanation {
        agent_id: agent_id.to_string(),
        mode: "all",
        backend,
        why,
        unavailable,
        readable,
        writable,
        hidden,
        network: layout.network.clone(),
        processes: if landlock {
            "it sees every process in /proc but can signal or trace only its own (Landlock scopes); none outlives its stop, a `setsid` one included (a cgroup per runtime, killed at the stop)"
        } else {
            "only its own (a PID namespace); none outlives its stop, a `setsid` one included"
        },
        not_contained: match backend {
            Some(super::LANDLOCK) => landlock_gaps(layout),
            Some(_) => vec![
                "the kernel: no seccomp filter beyond bubblewrap's own".into(),
                "CPU and memory".into(),
            ],
            None => Vec::new(),
        },
        environment: if landlock {
            let mut names = environment;
            names.push("TMPDIR".into());
            names
        } else {
            environment
        },
        summary,
    }
}

impl Explanation {
    /// The human form.
    pub(crate) fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "agent {}: sandbox {}", self.agent_id, self.summary);
        match (&self.why, &self.unavailable) {
            (_, Some(why)) => {
                let _ = writeln!(out, "  not applied: {why}");
                let _ = writeln!(out, "  the runtime does not start (fail closed)");
            }
            (Some(why), None) => {
                let _ = writeln!(out, "  backend: {why}");
            }
            (None, None) => {}
        }
        let list = |out: &mut String, title: &str, entries: &[Entry]| {
            let _ = writeln!(out, "{title}:");
            if entries.is_empty() {
                let _ = writeln!(out, "  (nothing)");
            }
            for e in entries {
                let _ = writeln!(out, "  {}  ({})", e.path.display(), e.why);
            }
        };
        list(&mut out, "reads", &self.readable);
        list(&mut out, "writes", &self.writable);
        if self.mode != "off" {
            list(&mut out, "hidden", &self.hidden);
        }
        let landlock = self.backend == Some(super::LANDLOCK);
        let network = match &self.network {
            Network::Host => "host: unrestricted, the controller's own (loopback included)".into(),
            Network::None if landlock => "none: no TCP at all, loopback included (Landlock refuses every TCP bind and connect); UDP and Unix sockets stay open".into(),
            Network::None => "none: no network at all, loopback included".into(),
            Network::Allowlist { domains } => format!(
                "allowlist through deepcli's egress proxy: {}",
                if domains.is_empty() {
                    "nothing (allowedDomains is empty)".into()
                } else {
                    domains.join(", ")
                }
            ),
        };
        let _ = writeln!(out, "network: {network}");
        let _ = writeln!(out, "processes: {}", self.processes);
        if !self.not_contained.is_empty() {
            let _ = writeln!(out, "not contained:");
            for gap in &self.not_contained {
                let _ = writeln!(out, "  {gap}");
            }
        }
        let _ = writeln!(out, "environment: {}", self.environment.join(", "));
        out
    }
}
