//! One writer at a time: a lease row that names its holder (pid, host, process start time,
//! purpose). A second writer waits briefly, then fails naming the holder. A holder that is dead
//! (same host: its pid is gone, a zombie, or another process now; another host: no heartbeat
//! for [`STALE_AFTER`]) is taken over.

use crate::os::hostname;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::db::{Behavior, Optional, Query, params};
use super::{LeasePurpose, Result, StateError, StateStore, now};

/// A holder on another host that has not renewed for this long is presumed dead.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseHolder {
    pub pid: u32,
    pub host: String,
    pub process_start: Option<String>,
    pub purpose: LeasePurpose,
    pub acquired_at: String,
    pub heartbeat_at: String,
}

impl LeaseHolder {
    fn is_alive(&self, host: &str) -> bool {
        if self.host == host {
            match crate::os::ProcStat::read(self.pid) {
                None => false,
                Some(p) if p.zombie => false,
                Some(p) => self.process_start.as_deref().is_none_or(|s| s == p.start),
            }
        } else {
            let stale = jiff::Timestamp::now()
                .as_second()
                .saturating_sub(parse_time(&self.heartbeat_at).unwrap_or(0));
            stale < STALE_AFTER.as_secs() as i64
        }
    }
}

fn parse_time(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

const HOLDER_SQL: &str =
    "SELECT pid, host, process_start, purpose, acquired_at, heartbeat_at FROM lease WHERE id = 1";

fn holder_row(r: &super::db::Row<'_>) -> super::db::DbResult<LeaseHolder> {
    Ok(LeaseHolder {
        pid: r.get(0)?,
        host: r.get(1)?,
        process_start: r.get(2)?,
        purpose: r.get(3)?,
        acquired_at: r.get(4)?,
        heartbeat_at: r.get(5)?,
    })
}

impl StateStore {
    /// Takes the lease, waiting up to `wait` for a live holder to let go.
    pub fn acquire_lease(&mut self, purpose: LeasePurpose, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        let host = hostname();
        let pid = std::process::id();
        let me = crate::os::process_start(pid);
        loop {
            match self.try_acquire(purpose, &host, pid, me.as_deref())? {
                None => {
                    self.holds_lease = true;
                    return Ok(());
                }
                Some(holder) if Instant::now() >= deadline => {
                    return Err(StateError::Locked(holder));
                }
                Some(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// `None` when the lease is now ours; else the live holder.
    fn try_acquire(
        &mut self,
        purpose: LeasePurpose,
        host: &str,
        pid: u32,
        start: Option<&str>,
    ) -> Result<Option<LeaseHolder>> {
        let dir = &self.dir;
        let error = |e| super::seam_error(dir, e);
        let mut conn = self.db.conn();
        let tx = conn.transaction(Behavior::Write).map_err(error)?;
        let holder = tx
            .query_row(HOLDER_SQL, params![], holder_row)
            .optional()
            .map_err(error)?;
        if let Some(holder) = holder {
            let mine = holder.pid == pid && holder.host == host;
            if !mine && holder.is_alive(host) {
                return Ok(Some(holder));
            }
        }
        let at = now();
        tx.execute(
            "INSERT INTO lease (id, pid, host, process_start, purpose, acquired_at, heartbeat_at) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, host = excluded.host, process_start = excluded.process_start,
                 purpose = excluded.purpose, acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at",
            params![pid, host, start, purpose, at],
        )
        .map_err(error)?;
        tx.commit().map_err(error)?;
        Ok(None)
    }

    /// Proves the holder is alive (long-running holders call this periodically).
    pub fn renew_lease(&mut self) -> Result<()> {
        self.db
            .execute(
                "UPDATE lease SET heartbeat_at = ?1 WHERE id = 1 AND pid = ?2 AND host = ?3",
                params![now(), std::process::id(), hostname()],
            )
            .map_err(|e| self.db(e))?;
        Ok(())
    }

    pub fn release_lease(&mut self) -> Result<()> {
        self.holds_lease = false;
        self.db
            .execute(
                "DELETE FROM lease WHERE id = 1 AND pid = ?1 AND host = ?2",
                params![std::process::id(), hostname()],
            )
            .map_err(|e| self.db(e))?;
        Ok(())
    }

    /// Who holds the lease now, if anyone alive does.
    pub fn lease_holder(&self) -> Result<Option<LeaseHolder>> {
        let holder = self
            .db
            .query_row(HOLDER_SQL, params![], holder_row)
            .optional()
            .map_err(|e| self.db(e))?;
        Ok(holder.filter(|h| h.is_alive(&hostname())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state letter of `/proc/<pid>/stat` (field 3).
    fn proc_state(pid: u32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..].trim_start().chars().next()
    }

    /// Regression: a holder killed with SIGKILL whose parent had not reaped it yet still had a
    /// `/proc` entry with its start time, so its lease blocked the next writer until the
    /// parent got round to it.
    #[test]
    fn a_zombie_lease_holder_is_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pid = child.id();
        let host = hostname();
        let holder = LeaseHolder {
            pid,
            host: host.clone(),
            process_start: crate::os::process_start(pid),
            purpose: LeasePurpose::Controller,
            acquired_at: now(),
            heartbeat_at: now(),
        };
        assert!(holder.process_start.is_some());
        assert!(holder.is_alive(&host), "a running holder is alive");

        // SIGKILL, and no wait: the child stays a zombie until it is reaped below.
        child.kill().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while proc_state(pid) != Some('Z') {
            assert!(Instant::now() < deadline, "the child never became a zombie");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            crate::os::process_start(pid),
            holder.process_start,
            "still in /proc"
        );
        assert!(!holder.is_alive(&host), "a zombie holder is dead");
        child.wait().unwrap();
        assert!(!holder.is_alive(&host), "a reaped holder is dead");
    }
}
