//! `/status` from a chat (conversations.md, "Session lifecycle"): the session's agent, model,
//! age, queue and budget, answered by the hub itself. It never reaches the agent, never waits
//! behind the session's turn and costs no turn; a sender the inbound policy does not admit gets
//! the policy's answer instead, as for any message of theirs.

use super::route::Route;
use super::store::DeliveryKey;
use super::{Access, AccessError, AccessPlan, Delivered, Envelope};
use crate::runtime::acp::ModelReport;
use crate::sessions::budget::{BudgetReport, Usage};

/// Whether `text` is the `/status` command: the word alone, or with the bot's name as Telegram
/// writes commands in groups (`/status@deepcli_bot`).
pub(super) fn is_status(text: &str) -> bool {
    super::chat::lone_command(text).is_some_and(|c| c.eq_ignore_ascii_case("/status"))
}

impl Access {
    /// Answers `/status`: recorded as this envelope's response, sent to the reply sink and
    /// given back to the adapter that posts it, like any reply.
    pub(super) async fn status_command(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        key: &DeliveryKey,
        route: &Route,
    ) -> Result<Delivered, AccessError> {
        if let Some(gated) = self.gate(plan, envelope, route, key).await? {
            return Ok(gated);
        }
        let session_key = super::gate::session_key(route, key);
        let agent = route.agent_id();
        let started = {
            let session_key = session_key.clone();
            self.blocking(move |store| store.session_started(&session_key))
                .await?
        };
        let status = SessionStatus {
            session_key: &session_key,
            agent,
            model: self.model_report(agent),
            age_seconds: started.as_deref().and_then(age_seconds),
            queue: self.queue_depth(&session_key),
            budget: self.budget_report(agent),
        };
        let answer = status.render();
        self.answer_only(plan, envelope, key, route, &answer, "statusCommand")
            .await
    }
}

/// How long ago `started` (RFC 3339) was, in whole seconds; `None` if it does not parse.
fn age_seconds(started: &str) -> Option<i64> {
    let started: jiff::Timestamp = started.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - started.as_second())
}

/// What `/status` tells: nothing secret (no token, no secret reference, no prompt).
struct SessionStatus<'a> {
    session_key: &'a str,
    agent: &'a str,
    model: Option<ModelReport>,
    /// `None`: the session has not been opened yet (the next message opens it).
    age_seconds: Option<i64>,
    queue: usize,
    budget: BudgetReport,
}

impl SessionStatus<'_> {
    fn render(&self) -> String {
        let mut lines = vec![
            format!("session {} (agent {})", self.session_key, self.agent),
            format!("model: {}", model_line(self.model.as_ref())),
            match self.age_seconds {
                Some(age) => format!("started {} ago", duration(age)),
                None => "not started yet: the next message opens it".to_string(),
            },
            match self.queue {
                0 => "queue: idle".to_string(),
                n => format!("queue: {n} (the one being answered included)"),
            },
        ];
        lines.push(format!("budget: {}", budget_line(&self.budget)));
        lines.join("\n")
    }
}

fn model_line(model: Option<&ModelReport>) -> String {
    match model {
        None => "the runtime's default".to_string(),
        Some(ModelReport {
            wanted,
            applied: Some(applied),
            ..
        }) if applied == wanted => applied.clone(),
        Some(ModelReport {
            wanted,
            applied: Some(applied),
            ..
        }) => format!("{applied} (configured {wanted})"),
        Some(ModelReport {
            wanted,
            applied: None,
            why,
        }) => match why {
            Some(why) => format!("{wanted}, not applied: {why}"),
            None => format!("{wanted}, not applied yet"),
        },
    }
}

fn budget_line(b: &BudgetReport) -> String {
    let limit = |value: String, limit: Option<String>| match limit {
        Some(limit) => format!("{value} of {limit}"),
        None => value,
    };
    let usage = |u: &Usage<u64>| match u {
        Usage::Known(n) => n.to_string(),
        Usage::Unknown => "unknown".to_string(),
    };
    let cost = match b.cost_today_usd {
        Usage::Known(usd) => format!("${usd:.2}"),
        Usage::Unknown => "unknown".to_string(),
    };
    [
        limit(
            format!(
                "{} in the last hour",
                crate::plural::plural(b.turns_last_hour, "turn", "turns")
            ),
            b.turns_per_hour.map(|n| n.to_string()),
        ),
        limit(
            format!("{} tokens today", usage(&b.tokens_today)),
            b.tokens_per_day.map(|n| n.to_string()),
        ),
        limit(
            format!("cost today {cost}"),
            b.cost_per_day_usd.map(|usd| format!("${usd:.2}")),
        ),
    ]
    .join(", ")
}

/// `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => match (s / 3600, s % 3600 / 60) {
            (h, 0) => format!("{h} h"),
            (h, m) => format!("{h} h {m} min"),
        },
        _ => match (s / 86400, s % 86400 / 3600) {
            (d, 0) => format!("{d} d"),
            (d, h) => format!("{d} d {h} h"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_the_word_alone_or_addressed_to_the_bot() {
        for yes in ["/status", " /status\n", "/STATUS", "/status@deepcli_bot"] {
            assert!(is_status(yes), "{yes:?}");
        }
        for no in [
            "/status please",
            "status",
            "/statusx",
            "what is /status",
            "",
        ] {
            assert!(!is_status(no), "{no:?}");
        }
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration(-3), "0 s");
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(12 * 60 + 5), "12 min");
        assert_eq!(duration(3 * 3600), "3 h");
        assert_eq!(duration(3 * 3600 + 5 * 60), "3 h 5 min");
        assert_eq!(duration(2 * 86400 + 4 * 3600 + 1), "2 d 4 h");
    }

    fn budget() -> BudgetReport {
        BudgetReport {
            turns_last_hour: 4,
            turns_per_hour: Some(60),
            running_turns: 1,
            concurrent_turns: None,
            turn_seconds: None,
            spawns_last_hour: 0,
            spawns_per_hour: None,
            tokens_today: Usage::Unknown,
            tokens_per_day: None,
            cost_today_usd: Usage::Known(0.42),
            cost_per_day_usd: Some(5.0),
            turns_today: 9,
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_answer_names_agent_model_age_queue_and_budget() {
        let status = SessionStatus {
            session_key: "agent:main:telegram:direct:42",
            agent: "main",
            model: Some(ModelReport {
                wanted: "gpt-5".into(),
                applied: Some("gpt-5-mini".into()),
                why: None,
            }),
            age_seconds: Some(3 * 3600 + 5 * 60),
            queue: 1,
            budget: budget(),
        };
        insta::assert_snapshot!(status.render(), @r"
        session agent:main:telegram:direct:42 (agent main)
        model: gpt-5-mini (configured gpt-5)
        started 3 h 5 min ago
        queue: 1 (the one being answered included)
        budget: 4 turns in the last hour of 60, unknown tokens today, cost today $0.42 of $5.00
        ");
        let fresh = SessionStatus {
            model: None,
            age_seconds: None,
            queue: 0,
            ..status
        };
        let text = fresh.render();
        assert!(text.contains("model: the runtime's default"), "{text}");
        assert!(text.contains("not started yet"), "{text}");
        assert!(text.contains("queue: idle"), "{text}");
    }
}
