//! Budgets (approvals.md): what an agent's sessions may use — turns per hour, turns at once, a
//! turn's length, spawns per hour, tokens and cost per UTC day — checked before each turn is
//! delivered, by the Access layer for every turn (inbound, Hub, operator) and by the Hub for
//! spawns.
//!
//! The counters are kept in memory for the check (a few hundred nanoseconds: one lock, one map
//! lookup, a window trimmed) and in the state database for the record (`budget_events`,
//! migration 11), from which a restarted controller loads them: a restart resets nothing.
//! Usage a runtime did not report is *unknown*: it counts as nothing and is never shown as 0.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use crate::config::model::Budgets as BudgetSpec;
pub use crate::runtime::budget_report::{BudgetReport, Usage};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;
/// A dollar in the unit cost is counted in (micro-dollars: sums stay exact).
pub const MICROS_PER_USD: f64 = 1_000_000.0;

/// One agent's limits, as its `budgets` (or `agents.defaults.budgets`) sets them.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetLimits {
    pub turns_per_hour: Option<u32>,
    pub concurrent_turns: Option<u32>,
    pub turn_seconds: Option<Duration>,
    pub spawns_per_hour: Option<u32>,
    pub tokens_per_day: Option<u64>,
    pub cost_per_day_micros: Option<u64>,
    /// Loop pause bounds, read by the Hub: sends between two sessions within `loop_window`,
    /// and sends by one tree of sessions.
    pub loop_turns: Option<u32>,
    pub loop_window: Duration,
    pub tree_turns: Option<u32>,
    /// The largest reply of one turn kept, in bytes (`replyBytes`).
    pub reply_bytes: usize,
    /// The most earlier conversation given with a prompt, in bytes (`contextBytes`).
    pub context_bytes: usize,
}

/// `replyBytes` when unset: 1 MiB.
pub const DEFAULT_REPLY_BYTES: usize = 1024 * 1024;
/// `contextBytes` when unset: 256 KiB.
pub const DEFAULT_CONTEXT_BYTES: usize = 256 * 1024;

/// `spawnsPerHour` when unset (hub.md, "Defaults"): a runaway tree of spawns stops here.
pub const DEFAULT_SPAWNS_PER_HOUR: u32 = 60;

/// `loopWindowSeconds` when unset.
pub const DEFAULT_LOOP_WINDOW: Duration = Duration::from_secs(600);

impl Default for BudgetLimits {
    fn default() -> BudgetLimits {
        BudgetLimits {
            turns_per_hour: None,
            concurrent_turns: None,
            turn_seconds: None,
            spawns_per_hour: Some(DEFAULT_SPAWNS_PER_HOUR),
            tokens_per_day: None,
            cost_per_day_micros: None,
            loop_turns: None,
            loop_window: DEFAULT_LOOP_WINDOW,
            tree_turns: None,
            reply_bytes: DEFAULT_REPLY_BYTES,
            context_bytes: DEFAULT_CONTEXT_BYTES,
        }
    }
}

impl BudgetLimits {
    pub fn of(spec: &BudgetSpec) -> BudgetLimits {
        BudgetLimits {
            turns_per_hour: spec.turns_per_hour,
            concurrent_turns: spec.concurrent_turns,
            turn_seconds: spec.turn_seconds.map(Duration::from_secs),
            spawns_per_hour: spec.spawns_per_hour.or(Some(DEFAULT_SPAWNS_PER_HOUR)),
            tokens_per_day: spec.tokens_per_day,
            cost_per_day_micros: spec
                .cost_per_day_usd
                .map(|usd| (usd * MICROS_PER_USD).round() as u64),
            loop_turns: spec.loop_turns,
            loop_window: spec
                .loop_window_seconds
                .map_or(DEFAULT_LOOP_WINDOW, Duration::from_secs),
            tree_turns: spec.tree_turns,
            reply_bytes: spec.reply_bytes.map_or(DEFAULT_REPLY_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            context_bytes: spec.context_bytes.map_or(DEFAULT_CONTEXT_BYTES, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
        }
    }
}

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Limit {
    TurnsPerHour,
    ConcurrentTurns,
    SpawnsPerHour,
    TokensPerDay,
    CostPerDayUsd,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::TurnsPerHour => "turnsPerHour",
            Limit::ConcurrentTurns => "concurrentTurns",
            Limit::SpawnsPerHour => "spawnsPerHour",
            Limit::TokensPerDay => "tokensPerDay",
            Limit::CostPerDayUsd => "costPerDayUsd",
        }
    }
}

/// A turn or spawn a budget refused: which, how much was used of how much, and when to try
/// again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent `{agent_id}` is over its budget {limit}: {used} of {allowed} {what}; try again in {retry_after} s",
    limit = limit.as_str()
)]
pub struct BudgetRefusal {
    pub agent_id: String,
    pub limit: Limit,
    pub used: String,
    pub allowed: String,
    pub what: &'static str,
    /// Seconds until the budget has room again (at least 1).
    pub retry_after: u64,
}

/// One agent's counters.
#[derive(Debug, Default)]
struct Counts {
    /// When each turn of the last hour began (ms since the epoch), oldest first.
    turns: VecDeque<i64>,
    spawns: VecDeque<i64>,
    /// Turns running now (not persisted: they die with the controller).
    running: u32,
    /// The UTC day (days since the epoch) the usage sums are for.
    day: i64,
    tokens: u64,
    cost_micros: u64,
    /// Turns today whose tokens / cost the runtime reported, and those it did not.
    tokens_reported: u64,
    cost_reported: u64,
    turns_today: u64,
}

impl Counts {
    fn trim(&mut self, now_ms: i64) {
        let since = now_ms - HOUR_MS;
        while self.turns.front().is_some_and(|t| *t <= since) {
            self.turns.pop_front();
        }
        while self.spawns.front().is_some_and(|t| *t <= since) {
            self.spawns.pop_front();
        }
        let day = now_ms.div_euclid(DAY_MS);
        if day != self.day {
            *self = Counts {
                turns: std::mem::take(&mut self.turns),
                spawns: std::mem::take(&mut self.spawns),
                running: self.running,
                day,
                ..Counts::default()
            };
        }
    }
}

/// A row of `budget_events`, as the store reads it back for [`Budgets::load`].
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetRow {
    pub agent_id: String,
    pub kind: EventKind,
    pub at_ms: i64,
    pub tokens: Option<u64>,
    pub cost_micros: Option<u64>,
}

/// What a `budget_events` row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A turn delivered (with its usage, when reported).
    Turn,
    Spawn,
    /// A turn or spawn a budget refused.
    Refusal,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Turn => "turn",
            EventKind::Spawn => "spawn",
            EventKind::Refusal => "refusal",
        }
    }

    pub fn parse(word: &str) -> Option<EventKind> {
        Some(match word {
            "turn" => EventKind::Turn,
            "spawn" => EventKind::Spawn,
            "refusal" => EventKind::Refusal,
            _ => return None,
        })
    }
}

/// What a runtime reported a turn used: `None` is unknown (not reported), never zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnUsage {
    pub tokens: Option<u64>,
    pub cost_micros: Option<u64>,
}

/// Every agent's counters.
#[derive(Debug, Default)]
pub struct Budgets {
    counts: Mutex<HashMap<String, Counts>>,
    /// The cumulative usage last reported in each runtime session (`<instance>/<session id>`):
    /// ACP reports a session's cost (and, where offered, tokens) as running totals.
    totals: Mutex<HashMap<String, TurnUsage>>,
}

/// A turn's place in `concurrentTurns`; given back when dropped, however the turn ends.
pub struct TurnPermit<'a> {
    budgets: &'a Budgets,
    agent_id: String,
}

impl Drop for TurnPermit<'_> {
    fn drop(&mut self) {
        let mut counts = lock(&self.budgets.counts);
        if let Some(c) = counts.get_mut(&self.agent_id) {
            c.running = c.running.saturating_sub(1);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn retry_after_ms(ms: i64) -> u64 {
    (ms.max(0) as u64).div_ceil(1000).max(1)
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Budgets {
    /// The counters the recorded events of the last day give.
    pub fn load(rows: &[BudgetRow], now_ms: i64) -> Budgets {
        let budgets = Budgets::default();
        {
            let mut counts = lock(&budgets.counts);
            let day = now_ms.div_euclid(DAY_MS);
            for row in rows {
                let c = counts
                    .entry(row.agent_id.clone())
                    .or_insert_with(|| Counts {
                        day,
                        ..Counts::default()
                    });
                let recent = row.at_ms > now_ms - HOUR_MS;
                let today = row.at_ms.div_euclid(DAY_MS) == day;
                match row.kind {
                    EventKind::Turn => {
                        if recent {
                            c.turns.push_back(row.at_ms);
                        }
                        if today {
                            c.add_usage(TurnUsage {
                                tokens: row.tokens,
                                cost_micros: row.cost_micros,
                            });
                        }
                    }
                    EventKind::Spawn if recent => c.spawns.push_back(row.at_ms),
                    _ => {}
                }
            }
            for c in counts.values_mut() {
                c.turns.make_contiguous().sort_unstable();
                c.spawns.make_contiguous().sort_unstable();
            }
        }
        budgets
    }

    /// Counts agent `agent_id` again from `rows`, its recorded events of the last day: what a
    /// replica that takes the agent over from another counts from (its turns ran there). The
    /// turns it runs here now, if any, stay counted as running.
    pub fn recount(&self, agent_id: &str, rows: &[BudgetRow], now_ms: i64) {
        let fresh = Budgets::load(rows, now_ms);
        let fresh = lock(&fresh.counts).remove(agent_id);
        let mut counts = lock(&self.counts);
        let running = counts.get(agent_id).map_or(0, |c| c.running);
        match fresh {
            Some(mut c) => {
                c.running = running;
                counts.insert(agent_id.to_owned(), c);
            }
            None => {
                counts.remove(agent_id);
                if running > 0 {
                    let c = counts.entry(agent_id.to_owned()).or_default();
                    c.day = now_ms.div_euclid(DAY_MS);
                    c.running = running;
                }
            }
        }
    }

    /// Whether agent `agent_id` may begin a turn now, without taking it: what the Hub asks
    /// before it accepts a run.
    pub fn check_turn(
        &self,
        agent_id: &str,
        limits: &BudgetLimits,
        now_ms: i64,
    ) -> Result<(), BudgetRefusal> {
        self.with_counts(agent_id, now_ms, |c| check(agent_id, c, limits, now_ms))
    }

    /// Takes a turn for agent `agent_id` if its budgets allow: counted in `turnsPerHour` and,
    /// while the permit lives, in `concurrentTurns`.
    pub fn admit_turn(
        &self,
        agent_id: &str,
        limits: &BudgetLimits,
        now_ms: i64,
    ) -> Result<TurnPermit<'_>, BudgetRefusal> {
        self.with_counts(agent_id, now_ms, |c| {
            check(agent_id, c, limits, now_ms)?;
            c.turns.push_back(now_ms);
            c.running += 1;
            Ok(())
        })?;
        Ok(TurnPermit {
            budgets: self,
            agent_id: agent_id.to_string(),
        })
    }

    /// Takes a spawn for agent `agent_id` (the spawning one) if `spawnsPerHour` allows.
    pub fn admit_spawn(
        &self,
        agent_id: &str,
        limits: &BudgetLimits,
        now_ms: i64,
    ) -> Result<(), BudgetRefusal> {
        self.with_counts(agent_id, now_ms, |c| {
            if let Some(max) = limits.spawns_per_hour
                && c.spawns.len() >= max as usize
            {
                let oldest = c.spawns.front().copied().unwrap_or(now_ms);
                return Err(BudgetRefusal {
                    agent_id: agent_id.to_string(),
                    limit: Limit::SpawnsPerHour,
                    used: c.spawns.len().to_string(),
                    allowed: max.to_string(),
                    what: "spawns in the last hour",
                    retry_after: retry_after_ms(oldest + HOUR_MS - now_ms),
                });
            }
            c.spawns.push_back(now_ms);
            Ok(())
        })
    }

    /// `f` on agent `agent_id`'s counters (made on first use), trimmed to `now_ms`'s windows,
    /// under the lock. A known agent, the common case, allocates nothing.
    fn with_counts<T>(&self, agent_id: &str, now_ms: i64, f: impl FnOnce(&mut Counts) -> T) -> T {
        let mut counts = lock(&self.counts);
        let c = match counts.get_mut(agent_id) {
            Some(c) => c,
            None => counts.entry(agent_id.to_string()).or_default(),
        };
        c.trim(now_ms);
        f(c)
    }

    /// What the runtime session `session` (`<instance>/<id>`) reported in total after a turn
    /// (`None`: not reported) → what this turn used. A total lower than the last one (a new
    /// session under a reused id) counts whole.
    pub fn turn_usage(&self, session: &str, totals: TurnUsage) -> TurnUsage {
        let mut last = lock(&self.totals);
        if last.len() > 16_384 {
            last.clear();
        }
        let before = last.get(session).copied().unwrap_or_default();
        let delta = |now: Option<u64>, then: Option<u64>| {
            now.map(|n| match then {
                Some(t) if t <= n => n - t,
                _ => n,
            })
        };
        let used = TurnUsage {
            tokens: delta(totals.tokens, before.tokens),
            cost_micros: delta(totals.cost_micros, before.cost_micros),
        };
        last.insert(
            session.to_string(),
            TurnUsage {
                tokens: totals.tokens.or(before.tokens),
                cost_micros: totals.cost_micros.or(before.cost_micros),
            },
        );
        used
    }

    /// Counts what a finished turn of `agent_id` used.
    pub fn add_usage(&self, agent_id: &str, usage: TurnUsage, now_ms: i64) {
        self.with_counts(agent_id, now_ms, |c| c.add_usage(usage));
    }

    /// Agent `agent_id`'s counters against its limits, for `deepcli status`: usage never
    /// reported today is `"unknown"`, and a token or cost budget over such usage says it is
    /// not enforceable.
    pub fn report(&self, agent_id: &str, limits: &BudgetLimits, now_ms: i64) -> BudgetReport {
        self.with_counts(agent_id, now_ms, |c| report(c, limits))
    }
}

/// [`Budgets::report`] of counters `c`.
fn report(c: &Counts, limits: &BudgetLimits) -> BudgetReport {
    fn known<T>(reported: u64, value: T) -> Usage<T> {
        if reported == 0 {
            Usage::Unknown
        } else {
            Usage::Known(value)
        }
    }
    let mut notes = Vec::new();
    for (limit, reported, name) in [
        (
            limits.tokens_per_day.is_some(),
            c.tokens_reported,
            "tokensPerDay",
        ),
        (
            limits.cost_per_day_micros.is_some(),
            c.cost_reported,
            "costPerDayUsd",
        ),
    ] {
        if limit && reported == 0 {
            notes.push(format!(
                "{name} is not enforceable: the runtime has reported no usage today (unknown, not 0)"
            ));
        } else if limit && reported < c.turns_today {
            notes.push(format!(
                "{name}: {} of {} turns today reported no usage; those count as unknown",
                c.turns_today - reported,
                c.turns_today
            ));
        }
    }
    BudgetReport {
        turns_last_hour: c.turns.len(),
        turns_per_hour: limits.turns_per_hour,
        running_turns: c.running,
        concurrent_turns: limits.concurrent_turns,
        turn_seconds: limits.turn_seconds.map(|d| d.as_secs()),
        spawns_last_hour: c.spawns.len(),
        spawns_per_hour: limits.spawns_per_hour,
        tokens_today: known(c.tokens_reported, c.tokens),
        tokens_per_day: limits.tokens_per_day,
        cost_today_usd: known(c.cost_reported, c.cost_micros as f64 / MICROS_PER_USD),
        cost_per_day_usd: limits
            .cost_per_day_micros
            .map(|m| m as f64 / MICROS_PER_USD),
        turns_today: c.turns_today,
        notes,
    }
}

impl Counts {
    fn add_usage(&mut self, usage: TurnUsage) {
        self.turns_today += 1;
        if let Some(t) = usage.tokens {
            self.tokens = self.tokens.saturating_add(t);
            self.tokens_reported += 1;
        }
        if let Some(c) = usage.cost_micros {
            self.cost_micros = self.cost_micros.saturating_add(c);
            self.cost_reported += 1;
        }
    }
}

fn check(
    agent_id: &str,
    c: &Counts,
    limits: &BudgetLimits,
    now_ms: i64,
) -> Result<(), BudgetRefusal> {
    let refuse = |limit, used: String, allowed: String, what, retry_ms| BudgetRefusal {
        agent_id: agent_id.to_string(),
        limit,
        used,
        allowed,
        what,
        retry_after: retry_after_ms(retry_ms),
    };
    if let Some(max) = limits.turns_per_hour
        && c.turns.len() >= max as usize
    {
        let oldest = c.turns.front().copied().unwrap_or(now_ms);
        return Err(refuse(
            Limit::TurnsPerHour,
            c.turns.len().to_string(),
            max.to_string(),
            "turns in the last hour",
            oldest + HOUR_MS - now_ms,
        ));
    }
    if let Some(max) = limits.concurrent_turns
        && c.running >= max
    {
        return Err(refuse(
            Limit::ConcurrentTurns,
            c.running.to_string(),
            max.to_string(),
            "turns running at once",
            1000,
        ));
    }
    let next_day = (now_ms.div_euclid(DAY_MS) + 1) * DAY_MS - now_ms;
    if let Some(max) = limits.tokens_per_day
        && c.tokens_reported > 0
        && c.tokens >= max
    {
        return Err(refuse(
            Limit::TokensPerDay,
            c.tokens.to_string(),
            max.to_string(),
            "tokens today (UTC)",
            next_day,
        ));
    }
    if let Some(max) = limits.cost_per_day_micros
        && c.cost_reported > 0
        && c.cost_micros >= max
    {
        return Err(refuse(
            Limit::CostPerDayUsd,
            format!("{:.2}", c.cost_micros as f64 / MICROS_PER_USD),
            format!("{:.2}", max as f64 / MICROS_PER_USD),
            "USD today (UTC)",
            next_day,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BudgetLimits {
        BudgetLimits {
            turns_per_hour: Some(2),
            concurrent_turns: Some(1),
            spawns_per_hour: Some(1),
            tokens_per_day: Some(100),
            cost_per_day_micros: Some(500_000),
            ..BudgetLimits::default()
        }
    }

    const T0: i64 = 1_000 * DAY_MS + 10 * HOUR_MS;

    #[test]
    fn turns_per_hour_refuses_until_the_oldest_leaves_the_window() {
        let b = Budgets::default();
        drop(b.admit_turn("a", &limits(), T0).unwrap());
        drop(b.admit_turn("a", &limits(), T0 + 1000).unwrap());
        let refused = b.admit_turn("a", &limits(), T0 + 2000).err().unwrap();
        assert_eq!(refused.limit, Limit::TurnsPerHour);
        assert_eq!(refused.retry_after, 3598);
        assert!(b.admit_turn("a", &limits(), T0 + HOUR_MS + 1).is_ok());
        // Another agent's counters are its own.
        assert!(b.admit_turn("b", &limits(), T0).is_ok());
    }

    /// Review E5: with no `budgets`, 2,933 spawns passed in 45 s: nothing bounded them.
    #[test]
    fn spawns_are_bounded_per_hour_by_default() {
        let b = Budgets::default();
        for (agent, limits) in [
            ("unset", BudgetLimits::default()),
            ("empty", BudgetLimits::of(&BudgetSpec::default())),
        ] {
            assert_eq!(limits.spawns_per_hour, Some(DEFAULT_SPAWNS_PER_HOUR));
            for i in 0..DEFAULT_SPAWNS_PER_HOUR {
                assert!(b.admit_spawn(agent, &limits, T0 + i64::from(i)).is_ok());
            }
            let refused = b.admit_spawn(agent, &limits, T0 + 1000).err().unwrap();
            assert_eq!(refused.limit, Limit::SpawnsPerHour, "{agent}");
            assert!(b.admit_spawn(agent, &limits, T0 + HOUR_MS + 1).is_ok());
        }
        // An explicit value still wins, above the default too.
        let spec = BudgetSpec {
            spawns_per_hour: Some(1000),
            ..BudgetSpec::default()
        };
        let limits = BudgetLimits::of(&spec);
        assert_eq!(limits.spawns_per_hour, Some(1000));
        for i in 0..1000 {
            assert!(b.admit_spawn("explicit", &limits, T0 + i).is_ok());
        }
    }

    #[test]
    fn concurrent_turns_count_while_the_permit_lives() {
        let b = Budgets::default();
        let limits = BudgetLimits {
            concurrent_turns: Some(1),
            ..BudgetLimits::default()
        };
        let permit = b.admit_turn("a", &limits, T0).unwrap();
        assert_eq!(
            b.admit_turn("a", &limits, T0).err().unwrap().limit,
            Limit::ConcurrentTurns
        );
        drop(permit);
        assert!(b.admit_turn("a", &limits, T0).is_ok());
    }

    #[test]
    fn unknown_usage_counts_as_nothing_and_is_never_zero() {
        let b = Budgets::default();
        drop(b.admit_turn("a", &limits(), T0).unwrap());
        b.add_usage("a", TurnUsage::default(), T0);
        let report = b.report("a", &limits(), T0);
        assert_eq!(report.tokens_today, Usage::Unknown);
        assert_eq!(report.cost_today_usd, Usage::Unknown);
        assert!(report.notes[0].contains("not enforceable"));
        // Unknown usage does not refuse.
        assert!(b.check_turn("a", &limits(), T0).is_ok());
    }

    #[test]
    fn reported_cost_is_summed_from_session_totals_and_refuses_past_the_day() {
        let b = Budgets::default();
        let first = b.turn_usage(
            "i/s1",
            TurnUsage {
                tokens: None,
                cost_micros: Some(300_000),
            },
        );
        assert_eq!(first.cost_micros, Some(300_000));
        let second = b.turn_usage(
            "i/s1",
            TurnUsage {
                tokens: None,
                cost_micros: Some(550_000),
            },
        );
        assert_eq!(second.cost_micros, Some(250_000));
        assert_eq!(second.tokens, None);
        b.add_usage("a", first, T0);
        assert!(b.check_turn("a", &limits(), T0).is_ok());
        b.add_usage("a", second, T0);
        let refused = b.check_turn("a", &limits(), T0).err().unwrap();
        assert_eq!(refused.limit, Limit::CostPerDayUsd);
        // The next UTC day starts over.
        assert!(b.check_turn("a", &limits(), T0 + DAY_MS).is_ok());
    }

    #[test]
    fn counters_load_from_recorded_rows() {
        let row = |kind, at_ms| BudgetRow {
            agent_id: "a".into(),
            kind,
            at_ms,
            tokens: Some(60),
            cost_micros: None,
        };
        let rows = vec![
            row(EventKind::Turn, T0 - 2 * HOUR_MS),
            row(EventKind::Turn, T0 - 10),
            row(EventKind::Spawn, T0 - 5),
        ];
        let b = Budgets::load(&rows, T0);
        let report = b.report("a", &limits(), T0);
        assert_eq!(report.turns_last_hour, 1);
        assert_eq!(report.spawns_last_hour, 1);
        assert_eq!(report.tokens_today, Usage::Known(120));
        assert_eq!(
            b.check_turn("a", &limits(), T0).err().unwrap().limit,
            Limit::TokensPerDay
        );
        assert_eq!(
            b.admit_spawn("a", &limits(), T0).err().unwrap().limit,
            Limit::SpawnsPerHour
        );
    }

    #[test]
    fn an_agent_taken_over_is_counted_from_what_its_last_replica_recorded() {
        let row = |at_ms| BudgetRow {
            agent_id: "a".into(),
            kind: EventKind::Turn,
            at_ms,
            tokens: Some(10),
            cost_micros: None,
        };
        // This replica started before the agent's turns ran elsewhere: it counts none.
        let b = Budgets::default();
        let other = b.admit_turn("b", &limits(), T0).unwrap();
        assert!(b.check_turn("a", &limits(), T0).is_ok());
        b.recount("a", &[row(T0 - 20), row(T0 - 10)], T0);
        assert_eq!(
            b.check_turn("a", &limits(), T0).err().unwrap().limit,
            Limit::TurnsPerHour
        );
        assert_eq!(b.report("a", &limits(), T0).tokens_today, Usage::Known(20));
        // Another agent's counters, its running turn included, are untouched.
        assert_eq!(
            b.check_turn("b", &limits(), T0).err().unwrap().limit,
            Limit::ConcurrentTurns
        );
        drop(other);
        // Nothing recorded: nothing counted.
        b.recount("a", &[], T0);
        assert!(b.check_turn("a", &limits(), T0).is_ok());
    }
}
