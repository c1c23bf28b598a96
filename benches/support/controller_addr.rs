//! The address a `deepcli up` a bench started recorded in its state (`meta.controller_addr`,
//! beside its pid): shared by the bench binaries through `#[path]`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits up to 60 s until the controller with `pid` has recorded its address in `state`'s
/// database; panics when it does not.
pub fn wait(state: &Path, pid: u32) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(addr) = read(&state.join("state.db"), pid) {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "the controller recorded no address"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(db: &Path, pid: u32) -> Option<SocketAddr> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .ok()?;
    let meta = |k: &str| {
        c.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| {
            r.get::<_, String>(0)
        })
        .ok()
    };
    (meta("controller_pid")? == pid.to_string()).then(|| meta("controller_addr")?.parse().ok())?
}
