//! `/new` and `/reset` from a chat (conversations.md, "Session lifecycle"), and `session.reset`'s
//! daily and idle resets found when a message arrives: a new session under the same key. Routing still answers the same key (as OpenClaw keeps the key and
//! rotates the session under it); the runtime session is closed and forgotten, so the next
//! message opens a new one with no context from before; the transcript begins a new segment,
//! and the earlier ones stay readable (`deepcli sessions history KEY --all`). The command never
//! reaches the agent; a sender the inbound policy does not admit gets the policy's answer.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::route::Route;
use super::store::DeliveryKey;
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};
use crate::config::model::{ResetMode, SessionSection};

/// The words that start a new session: OpenClaw's `session.resetTriggers` default.
const TRIGGERS: [&str; 2] = ["/new", "/reset"];

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

    /// The trigger `text` is, if it is one: the word alone, or with the bot's name as
    /// Telegram writes commands in groups (`/new@deepcli_bot`).
    pub(super) fn trigger(&self, text: &str) -> Option<&str> {
        let command = super::chat::lone_command(text)?.to_lowercase();
        self.triggers
            .iter()
            .find(|t| **t == command)
            .map(String::as_str)
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

impl Access {
    /// Starts session `session_key` over when `policy` finds it stale (`session.reset`): its
    /// runtime session closed and forgotten, a `reset` line saying why. Called in the
    /// session's FIFO place, before the message that found it stale is prompted.
    pub(super) async fn reset_if_stale(
        &self,
        policy: ResetPolicy,
        agent_id: &str,
        session_key: &str,
    ) {
        let key = session_key.to_string();
        let Ok(Some((began, last))) = self.blocking(move |s| s.session_times(&key)).await else {
            return;
        };
        let (Ok(began), Ok(last)) = (began.parse::<Timestamp>(), last.parse::<Timestamp>()) else {
            return;
        };
        let now = crate::clock::timestamp();
        let Some(stale) = policy.stale(began, last, now, &TimeZone::system()) else {
            return;
        };
        let closed = self.close_runtime_session(agent_id, session_key).await;
        let line = match closed {
            Some(note) => format!("new session: {stale} (session.reset; {note})"),
            None => format!("new session: {stale} (session.reset)"),
        };
        tracing::info!(session = %session_key, why = %stale, "a stale session starts over");
        let key = session_key.to_string();
        if let Err(e) = self
            .blocking(move |s| s.restart_session(&key, &line, None))
            .await
        {
            tracing::warn!(session = %session_key, error = %e, "cannot start a stale session over; it goes on");
        }
    }

    /// Answers `/new` or `/reset`: recorded as this envelope's response, sent to the reply
    /// sink and given back to the adapter that posts it, like any reply.
    pub(super) async fn reset_command(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: &Route,
    ) -> Result<Delivered, AccessError> {
        let trigger = plan
            .lifecycle
            .trigger(&envelope.text)
            .unwrap_or(TRIGGERS[0])
            .to_string();
        if let Some(gated) = self.gate(plan, envelope, route, key).await? {
            return Ok(gated);
        }
        let session_key = super::gate::session_key(route, key);
        let busy = self.queue_depth(&session_key);
        if busy > 0 {
            let answer = format!(
                "This session is still answering ({} waiting or running); nothing was reset. \
                 Send {trigger} again once it has answered.",
                crate::plural::plural(busy, "message", "messages")
            );
            return self
                .answer_only(plan, envelope, key, route, &answer, "resetCommand")
                .await;
        }
        let answer = format!(
            "New session: the agent starts over, without the conversation so far (it is kept: \
             deepcli sessions history {session_key} --all)."
        );
        let response = super::chat::response(
            route,
            &session_key,
            &answer,
            "resetCommand",
            &[("reset", true.into())],
        );
        let closed = self
            .close_runtime_session(route.agent_id(), &session_key)
            .await;
        let sender = envelope.facts.sender_id.as_deref().map_or_else(
            || "an unnamed sender".to_string(),
            |id| format!("{}:{}", key.channel, id.trim()),
        );
        let line = match closed {
            Some(note) => format!("new session: {trigger} from {sender} ({note})"),
            None => format!("new session: {trigger} from {sender}"),
        };
        let (k, d) = (session_key.clone(), key.clone());
        self.answer_command(
            plan,
            envelope,
            key,
            &session_key,
            (&answer, response),
            move |s, sent| s.reset_session(&k, &line, &d, sent),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_triggers_are_the_word_alone_or_addressed_to_the_bot() {
        let lifecycle = Lifecycle::default();
        let trigger = |t| lifecycle.trigger(t);
        assert_eq!(trigger("/new"), Some("/new"));
        assert_eq!(trigger(" /reset\n"), Some("/reset"));
        assert_eq!(trigger("/NEW"), Some("/new"));
        assert_eq!(trigger("/new@deepcli_bot"), Some("/new"));
        for no in ["/new please", "new", "/newer", "start /new", "", "/status"] {
            assert_eq!(trigger(no), None, "{no:?}");
        }
        let session = |yaml: &str| -> SessionSection { serde_json::from_str(yaml).unwrap() };
        let own = Lifecycle::from_config(&session(r#"{"resetTriggers": ["/Fresh"]}"#));
        assert_eq!(own.trigger("/fresh"), Some("/fresh"));
        assert_eq!(own.trigger("/new"), None, "the list replaces the default");
        let none = Lifecycle::from_config(&session(r#"{"resetTriggers": []}"#));
        assert_eq!(none.trigger("/new"), None);
    }

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
