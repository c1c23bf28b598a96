//! `session.resetTriggers` and `session.reset` compiled (conversations.md, "Session
//! lifecycle"): which chat commands start a new session, and when a session is stale when its
//! next message arrives — after the daily hour, or idle too long — as OpenClaw reads them.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::config::model::{ResetMode, SessionSection};

/// The words that start a new session: OpenClaw's `session.resetTriggers` default.
pub(super) const TRIGGERS: [&str; 2] = ["/new", "/reset"];

/// `session.resetTriggers` and `session.reset`, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// The chat commands that start a new session, lowercase.
    pub triggers: Vec<String>,
    pub reset: Option<ResetPolicy>,
}

impl Default for Lifecycle {
    fn default() -> Lifecycle {
        Lifecycle {
            triggers: TRIGGERS.map(str::to_string).to_vec(),
            reset: None,
        }
    }
}

/// When a session starts over on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResetPolicy {
    /// The hour (host's local time) a daily reset falls at.
    pub daily_at: Option<i8>,
    /// Minutes without a message after which the session starts over.
    pub idle_minutes: Option<u32>,
}

/// The daily reset's hour when `session.reset` names none (OpenClaw's).
const DEFAULT_AT_HOUR: i8 = 4;

impl Lifecycle {
    pub(crate) fn from_config(session: &SessionSection) -> Lifecycle {
        let triggers = match &session.reset_triggers {
            Some(list) => list.iter().map(|t| t.trim().to_lowercase()).collect(),
            None => Lifecycle::default().triggers,
        };
        let reset = session.reset.as_ref().and_then(|r| {
            let at = r.at_hour.map_or(DEFAULT_AT_HOUR, |h| h.min(23) as i8);
            let mode = r
                .mode
                .unwrap_or(if r.at_hour.is_some() || r.idle_minutes.is_some() {
                    ResetMode::Daily
                } else {
                    ResetMode::None
                });
            match mode {
                ResetMode::None => None,
                ResetMode::Daily => Some(ResetPolicy {
                    daily_at: Some(at),
                    idle_minutes: r.idle_minutes,
                }),
                ResetMode::Idle => r.idle_minutes.map(|m| ResetPolicy {
                    daily_at: None,
                    idle_minutes: Some(m),
                }),
            }
        });
        Lifecycle { triggers, reset }
    }
}

/// Why a session is stale: it began before the last daily reset, or was idle too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stale {
    Daily { at_hour: i8 },
    Idle { minutes: u32 },
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Daily { at_hour } => write!(f, "the daily reset at {at_hour:02}:00"),
            Stale::Idle { minutes } => write!(
                f,
                "{} without a message",
                crate::plural::plural(*minutes as usize, "minute", "minutes")
            ),
        }
    }
}

impl ResetPolicy {
    /// Whether a session that began at `began` and last had a message at `last` is stale at
    /// `now` (daily: in time zone `tz`), and why. Daily comes first when both apply.
    pub(crate) fn stale(
        &self,
        began: Timestamp,
        last: Timestamp,
        now: Timestamp,
        tz: &TimeZone,
    ) -> Option<Stale> {
        if let Some(at_hour) = self.daily_at
            && let Some(boundary) = last_boundary(now, at_hour, tz)
            && began < boundary
        {
            return Some(Stale::Daily { at_hour });
        }
        let minutes = self.idle_minutes?;
        let idle = now.duration_since(last);
        (idle > jiff::SignedDuration::from_mins(i64::from(minutes)))
            .then_some(Stale::Idle { minutes })
    }
}

/// The latest `at_hour`:00 (in `tz`) at or before `now`.
fn last_boundary(now: Timestamp, at_hour: i8, tz: &TimeZone) -> Option<Timestamp> {
    let today = now
        .to_zoned_datetime(tz.clone())
        .date()
        .at(at_hour, 0, 0, 0)
        .to_zoned_datetime(tz.clone())
        .ok()?;
    if today.timestamp() <= now {
        return Some(today.timestamp());
    }
    today
        .checked_sub(jiff::Span::new().days(1))
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn reset_reads_as_openclaw_reads_it() {
        let session = |json: &str| -> SessionSection { serde_json::from_str(json).unwrap() };
        let policy = |json: &str| Lifecycle::from_config(&session(json)).reset;
        assert_eq!(policy("{}"), None, "unset: never");
        assert_eq!(policy(r#"{"reset": {"mode": "none", "atHour": 3}}"#), None);
        assert_eq!(policy(r#"{"reset": {"mode": "off"}}"#), None);
        assert_eq!(
            policy(r#"{"reset": {"idleMinutes": 30}}"#),
            Some(ResetPolicy {
                daily_at: Some(4),
                idle_minutes: Some(30)
            }),
            "no mode, a time set: daily (at 4), idle too"
        );
        assert_eq!(
            policy(r#"{"reset": {"mode": "idle", "idleMinutes": 30}}"#),
            Some(ResetPolicy {
                daily_at: None,
                idle_minutes: Some(30)
            })
        );
    }

    #[test]
    fn a_session_is_stale_after_the_daily_hour_or_its_idle_minutes() {
        let utc = TimeZone::UTC;
        let daily = ResetPolicy {
            daily_at: Some(4),
            idle_minutes: None,
        };
        // Began at 03:00, a message at 05:00: past 04:00, stale.
        let (began, now) = (at("2026-01-18T03:00:00Z"), at("2026-01-18T05:00:00Z"));
        assert_eq!(
            daily.stale(began, began, now, &utc),
            Some(Stale::Daily { at_hour: 4 })
        );
        // Began at 23:00, a message at 03:00: no 04:00 between them, fresh.
        let (began, now) = (at("2026-01-17T23:00:00Z"), at("2026-01-18T03:00:00Z"));
        assert_eq!(daily.stale(began, began, now, &utc), None);
        // The hour is the zone's: 04:00 in UTC+5 is 23:00 UTC the day before.
        let plus5 = TimeZone::fixed(jiff::tz::offset(5));
        let (began, now) = (at("2026-01-17T22:00:00Z"), at("2026-01-17T23:30:00Z"));
        assert_eq!(
            daily.stale(began, began, now, &plus5),
            Some(Stale::Daily { at_hour: 4 })
        );
        let idle = ResetPolicy {
            daily_at: None,
            idle_minutes: Some(30),
        };
        let began = at("2026-01-18T10:00:00Z");
        assert_eq!(
            idle.stale(
                began,
                at("2026-01-18T10:40:00Z"),
                at("2026-01-18T11:00:00Z"),
                &utc
            ),
            None,
            "20 minutes since the last message"
        );
        assert_eq!(
            idle.stale(
                began,
                at("2026-01-18T10:20:00Z"),
                at("2026-01-18T11:00:00Z"),
                &utc
            ),
            Some(Stale::Idle { minutes: 30 })
        );
    }
}
