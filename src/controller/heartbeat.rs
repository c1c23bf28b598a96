//! Heartbeats (controller.md, "Heartbeats"): for each agent with an `acp` runtime and
//! `heartbeat.every`, a task that wakes on that cadence and has the Access layer prompt the
//! agent's main session with its `HEARTBEAT.md` ([`Access::heartbeat`]). Converged after every
//! apply like the runtimes: a new or changed cadence starts again, a removed one stops.
//! What each agent's heartbeats did is kept for the status.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::{Access, Beat};
use crate::config::Config;
use crate::config::model::RuntimeKind;

/// One agent's heartbeat, as the config asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatSpec {
    pub agent_id: String,
    /// `heartbeat.every` as written.
    pub every_text: String,
    pub every: Duration,
    /// The agent's `HEARTBEAT.md`, read at every beat.
    pub file: PathBuf,
}

/// `30m`, `1h`, `500ms` (`^[0-9]+(ms|s|m|h|d)$`, the schema's pattern): `None` for anything
/// else, zero, or a number too large to be a duration.
pub(crate) fn parse_every(text: &str) -> Option<Duration> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let n: u64 = digits.parse().ok()?;
    let millis = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => None,
    }?;
    (millis > 0).then(|| Duration::from_millis(millis))
}

/// The heartbeats `config` asks for: agents with an `acp` runtime and a `heartbeat.every`.
pub(crate) fn specs(config: &Config) -> Vec<HeartbeatSpec> {
    config
        .agents
        .iter()
        .filter(|a| {
            a.spec
                .runtime
                .as_ref()
                .is_some_and(|r| r.kind == RuntimeKind::Acp)
        })
        .filter_map(|a| {
            let every_text = a.spec.heartbeat.as_ref()?.every.clone()?;
            let Some(every) = parse_every(&every_text) else {
                tracing::warn!(agent = %a.id(), every = %every_text, "heartbeat.every is not a usable interval; no heartbeat");
                return None;
            };
            Some(HeartbeatSpec {
                agent_id: a.id().to_string(),
                every_text,
                every,
                file: a.workspace.join("HEARTBEAT.md"),
            })
        })
        .collect()
}

/// What an agent's heartbeats did, for `deepcli status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeartbeatReport {
    /// `heartbeat.every` as written.
    pub every: String,
    /// Heartbeats that prompted the agent.
    pub beats: u64,
    /// Of those, answered `HEARTBEAT_OK` (swallowed).
    pub ok: u64,
    /// Of those, answered otherwise and sent to the agent's last external route.
    pub delivered: u64,
    /// Of those, answered otherwise with no route to send it on (kept in the transcripts).
    pub kept: u64,
    /// Heartbeats not prompted: the main session was busy, the runtime not ready.
    pub skipped: u64,
    /// Prompts that failed.
    pub failed: u64,
    /// When the last heartbeat was due, and what it did.
    pub last_at: Option<String>,
    pub last: Option<String>,
    pub next_at: Option<String>,
}

/// The status of every agent's heartbeats, by agent id.
pub(crate) type HeartbeatReports = Arc<Mutex<BTreeMap<String, HeartbeatReport>>>;

/// The heartbeat tasks of one controller.
pub(crate) struct Heartbeats {
    running: HashMap<String, (HeartbeatSpec, tokio::task::JoinHandle<()>)>,
    reports: HeartbeatReports,
}

impl Heartbeats {
    pub(crate) fn new() -> Heartbeats {
        Heartbeats {
            running: HashMap::new(),
            reports: Arc::default(),
        }
    }

    pub(crate) fn reports(&self) -> HeartbeatReports {
        self.reports.clone()
    }

    /// Runs exactly `desired`: stops what is gone or changed, starts what is new or changed.
    pub(crate) fn converge(&mut self, desired: Vec<HeartbeatSpec>, access: &Arc<Access>) {
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(id, (spec, _))| !desired.iter().any(|d| &d.agent_id == *id && d == spec))
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some((_, task)) = self.running.remove(&id) {
                task.abort();
            }
            if let Ok(mut reports) = self.reports.lock() {
                reports.remove(&id);
            }
        }
        for spec in desired {
            if self.running.contains_key(&spec.agent_id) {
                continue;
            }
            if let Ok(mut reports) = self.reports.lock() {
                reports.insert(
                    spec.agent_id.clone(),
                    HeartbeatReport {
                        every: spec.every_text.clone(),
                        next_at: at(spec.every),
                        ..HeartbeatReport::default()
                    },
                );
            }
            let task = tokio::spawn(beat_on(spec.clone(), access.clone(), self.reports.clone()));
            self.running.insert(spec.agent_id.clone(), (spec, task));
        }
    }

    /// Stops every heartbeat (shutdown).
    pub(crate) fn stop_all(&mut self) {
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// `after` from now, as the status writes times.
fn at(after: Duration) -> Option<String> {
    jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(after).ok()?)
        .ok()
        .map(|t| t.round(jiff::Unit::Second).unwrap_or(t).to_string())
}

/// One agent's heartbeat, until aborted: a beat every `spec.every` (the first one `every`
/// after it starts); a beat that would come while the last one still runs is skipped.
async fn beat_on(spec: HeartbeatSpec, access: Arc<Access>, reports: HeartbeatReports) {
    let start = tokio::time::Instant::now() + spec.every;
    let mut ticks = tokio::time::interval_at(start, spec.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let due = crate::clock::now();
        let file = spec.file.clone();
        let read = tokio::task::spawn_blocking(move || {
            crate::workspace::read::read(&file, crate::workspace::read::MAX_BYTES)
        })
        .await;
        use crate::workspace::read::WorkspaceFile;
        let beat = match read {
            Ok(WorkspaceFile::Text(text)) => access.heartbeat(&spec.agent_id, &text).await,
            Ok(WorkspaceFile::Missing) => Beat::Skipped(format!(
                "cannot read {}: it is missing",
                spec.file.display()
            )),
            Ok(WorkspaceFile::Refused(why)) => {
                Beat::Skipped(format!("cannot read {}: {why}", spec.file.display()))
            }
            Err(e) => Beat::Skipped(format!("cannot read {}: {e}", spec.file.display())),
        };
        tracing::debug!(agent = %spec.agent_id, ?beat, "heartbeat");
        if let Beat::Failed(why) = &beat {
            tracing::warn!(agent = %spec.agent_id, %why, "heartbeat failed");
        }
        let Ok(mut reports) = reports.lock() else {
            continue;
        };
        let report = reports.entry(spec.agent_id.clone()).or_default();
        let (count, last) = match beat {
            Beat::Ok => (&mut report.ok, "ok: answered HEARTBEAT_OK".to_string()),
            Beat::Delivered(to) => (&mut report.delivered, format!("delivered to {to}")),
            Beat::Kept(why) => (&mut report.kept, format!("kept: {why}")),
            Beat::Skipped(why) => (&mut report.skipped, format!("skipped: {why}")),
            Beat::Failed(why) => (&mut report.failed, format!("failed: {why}")),
        };
        *count += 1;
        if !last.starts_with("skipped") {
            report.beats += 1;
        }
        report.last_at = Some(due);
        report.last = Some(last);
        report.next_at = at(spec.every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_takes_the_schema_units_and_refuses_zero_and_overflow() {
        assert_eq!(parse_every("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_every("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse_every("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_every("0s"), None);
        assert_eq!(parse_every("99999999999999999999d"), None);
        assert_eq!(parse_every("18446744073709551615d"), None);
        assert_eq!(parse_every("5w"), None);
        assert_eq!(parse_every("m"), None);
        assert_eq!(parse_every(""), None);
    }
}
