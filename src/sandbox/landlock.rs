//! The Landlock backend: the runtime is started as `deepcli sandbox exec --spec <json> --
//! <command>`, which moves itself into the runtime's cgroup ([`super::cgroup`]), drops every
//! capability, restricts itself with Landlock (the `landlock` crate: no `unsafe` here) and
//! execs the command, which keeps the restriction, as does everything it starts.
//!
//! Landlock only grants: the system read-only, the layout's grants, `/proc` read-only (the
//! other processes' memory and environment stay out of reach: Landlock scopes ptrace), a few
//! device files, and nothing else. It cannot hide a path inside a grant (see
//! [`Layout::hidden_inside`]), make `/tmp` private (the runtime's `TMPDIR` is its own) or give a
//! network namespace: `network: none` refuses every TCP bind and connect (ABI 4), and UDP and
//! pathname Unix sockets stay open. Signals and abstract Unix sockets are scoped to the
//! runtime's own domain (ABI 6), which the backend therefore requires.

use std::path::{Path, PathBuf};

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

use super::{Layout, Mount, Network, SYSTEM};

/// The Landlock ABI every rule is written against: 6 (Linux 6.12) scopes signals and abstract
/// Unix sockets, without which the runtime could signal the controller.
pub(crate) const ABI_NEEDED: u8 = 6;

/// The device files a runtime reads and writes.
pub(crate) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// What `sandbox exec` restricts itself to, as the controller worked it out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spec {
    /// Readable (and executable), nothing more.
    pub read: Vec<PathBuf>,
    /// Readable and writable.
    pub write: Vec<PathBuf>,
    /// TCP bind and connect allowed (`network: host`); else refused to every address and port.
    pub tcp: bool,
    /// The runtime's cgroup, joined before anything else.
    pub cgroup: PathBuf,
}

impl Spec {
    /// The restriction that enforces `layout`: the system and `/proc` read-only, the device
    /// files, then the grants as [`Layout::mounts`] would bind them, and `tmp` (the runtime's
    /// `TMPDIR`) writable.
    pub(crate) fn of(layout: &Layout, tmp: &Path, cgroup: &Path) -> Spec {
        let mut read: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        read.push("/proc".into());
        let mut write: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        for mount in layout.mounts() {
            if let Mount::Bind { path, writable, .. } = mount {
                if writable {
                    write.push(path);
                } else {
                    read.push(path);
                }
            }
        }
        write.push(tmp.to_path_buf());
        Spec {
            read,
            write,
            tcp: layout.network == Network::Host,
            cgroup: cgroup.to_path_buf(),
        }
    }
}

/// Joins the cgroup, drops every capability and restricts this process with Landlock: what
/// `sandbox exec` does before it execs the command. Fails unless all of it is enforced.
pub(crate) fn restrict_self(spec: &Spec) -> Result<(), String> {
    super::cgroup::join(&spec.cgroup)
        .map_err(|e| format!("cannot join cgroup {}: {e}", spec.cgroup.display()))?;
    drop_capabilities()?;
    let status = ruleset(spec).map_err(|e| format!("Landlock: {e}"))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(format!(
            "Landlock is not fully enforced here ({:?}, no_new_privs {})",
            status.ruleset, status.no_new_privs
        ));
    }
    Ok(())
}

fn ruleset(spec: &Spec) -> Result<RestrictionStatus, ::landlock::RulesetError> {
    let abi = ABI::V6;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::from_all(abi))?;
    if !spec.tcp {
        // Handled with no rule: every TCP bind and connect is refused.
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    // A path that does not exist is skipped (as bubblewrap's `--ro-bind-try`).
    ruleset
        .create()?
        .add_rules(path_beneath_rules(&spec.read, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(&spec.write, AccessFs::from_all(abi)))?
        .restrict_self()
}

/// Every capability out of every set (bounding first, while `CAP_SETPCAP` is still there): a
/// runtime started by root keeps root's uid but none of its privileges, and with
/// `no_new_privs` (Landlock sets it) no exec gives them back.
fn drop_capabilities() -> Result<(), String> {
    use caps::CapSet;
    let setpcap = caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP)
        .map_err(|e| format!("cannot read capabilities: {e}"))?;
    if setpcap {
        caps::clear(None, CapSet::Bounding)
            .map_err(|e| format!("cannot drop the bounding capabilities: {e}"))?;
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("cannot drop capabilities ({set:?}): {e}"))?;
    }
    Ok(())
}

/// The newest Landlock ABI this kernel has that adds rights deepcli can tell apart (7 and 8 add
/// none: a kernel with them reports 6), found by asking for each ABI's rights as a hard
/// requirement, newest first; a ruleset is made and closed, nothing is restricted.
pub(crate) fn probe() -> Result<u8, String> {
    for (abi, n) in [
        (ABI::V9, 9),
        (ABI::V6, 6),
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ] {
        let made = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| {
                if n >= 4 {
                    r.handle_access(AccessNet::from_all(abi))
                } else {
                    Ok(r)
                }
            })
            .and_then(|r| {
                if n >= 6 {
                    r.scope(Scope::from_all(abi))
                } else {
                    Ok(r)
                }
            })
            .and_then(|r| r.create());
        if made.is_ok() {
            return Ok(n);
        }
    }
    Err(
        "the kernel has no Landlock (built without it, or not enabled at boot: `lsm=…,landlock`)"
            .into(),
    )
}
