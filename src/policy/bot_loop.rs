//! Bot-loop protection (policy.md, `botLoopProtection`): two bots answering each other. Every
//! message one bot gets through to an account counts for that pair (channel, account, sending
//! bot); more than `maxEventsPerWindow` of them within `windowSeconds` and the pair is muted
//! for `cooldownSeconds`: its messages are gated `bot-loop`, and the operator is told once.
//!
//! In memory: a restart forgets the counts, which at worst lets a loop run one more window.
//! Time is passed in, so tests need no clock.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use super::settings::BotLoopLimits;

/// Pairs tracked at most; past it the quiet ones are forgotten.
const MAX_PAIRS: usize = 10_000;

/// One bot sending to one account: channel, account and the sending bot's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BotPair {
    pub channel: String,
    pub account: String,
    pub sender: String,
}

#[derive(Debug, Default)]
struct PairState {
    /// When its recent messages got through, oldest first (at most `max_events` + 1).
    events: VecDeque<Instant>,
    muted_until: Option<Instant>,
}

/// What counting one more message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Within the limit: deliver it.
    Within,
    /// This message is one too many: the pair is muted from now on (this message included).
    Tripped { cooldown_secs: u64 },
}

#[derive(Debug, Default)]
pub struct BotLoopGuard {
    pairs: Mutex<HashMap<BotPair, PairState>>,
}

impl BotLoopGuard {
    /// Whether `pair` is in its cooldown at `now`.
    pub fn muted(&self, pair: &BotPair, now: Instant) -> bool {
        let pairs = match self.pairs.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        pairs
            .get(pair)
            .and_then(|s| s.muted_until)
            .is_some_and(|until| now < until)
    }

    /// Counts a message of `pair` that is about to be delivered.
    pub fn count(&self, pair: &BotPair, now: Instant, limits: &BotLoopLimits) -> Counted {
        if !limits.enabled {
            return Counted::Within;
        }
        let mut pairs = match self.pairs.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        if pairs.len() >= MAX_PAIRS && !pairs.contains_key(pair) {
            pairs.retain(|_, s| {
                s.muted_until.is_some_and(|u| now < u)
                    || s.events
                        .back()
                        .is_some_and(|t| now.duration_since(*t) < limits.window)
            });
        }
        let state = pairs.entry(pair.clone()).or_default();
        if state.muted_until.is_some_and(|until| now >= until) {
            // A cooldown that is over starts a fresh window.
            state.muted_until = None;
            state.events.clear();
        }
        while state
            .events
            .front()
            .is_some_and(|t| now.duration_since(*t) >= limits.window)
        {
            state.events.pop_front();
        }
        state.events.push_back(now);
        if state.events.len() > limits.max_events as usize {
            state.events.clear();
            state.muted_until = Some(now + limits.cooldown);
            return Counted::Tripped {
                cooldown_secs: limits.cooldown.as_secs(),
            };
        }
        Counted::Within
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(max: u32, window: u64, cooldown: u64) -> BotLoopLimits {
        BotLoopLimits {
            enabled: true,
            max_events: max,
            window: Duration::from_secs(window),
            cooldown: Duration::from_secs(cooldown),
        }
    }

    fn pair(sender: &str) -> BotPair {
        BotPair {
            channel: "slack".into(),
            account: "default".into(),
            sender: sender.into(),
        }
    }

    #[test]
    fn more_than_the_limit_in_a_window_mutes_the_pair_for_the_cooldown() {
        let guard = BotLoopGuard::default();
        let l = limits(3, 60, 30);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for s in 0..3 {
            assert_eq!(guard.count(&pair("B"), at(s), &l), Counted::Within);
        }
        assert_eq!(
            guard.count(&pair("B"), at(3), &l),
            Counted::Tripped { cooldown_secs: 30 }
        );
        assert!(guard.muted(&pair("B"), at(4)));
        assert!(guard.muted(&pair("B"), at(32)));
        // Another bot, and the same bot elsewhere, are other pairs.
        assert!(!guard.muted(&pair("C"), at(4)));
        // The cooldown over: a fresh window.
        assert!(!guard.muted(&pair("B"), at(33)));
        for s in 33..36 {
            assert_eq!(guard.count(&pair("B"), at(s), &l), Counted::Within);
        }
    }

    #[test]
    fn messages_outside_the_window_do_not_count() {
        let guard = BotLoopGuard::default();
        let l = limits(2, 10, 30);
        let t0 = Instant::now();
        for s in [0, 6, 12, 18, 24, 30] {
            assert_eq!(
                guard.count(&pair("B"), t0 + Duration::from_secs(s), &l),
                Counted::Within,
                "at {s}"
            );
        }
    }

    #[test]
    fn disabled_protection_never_trips() {
        let guard = BotLoopGuard::default();
        let l = BotLoopLimits {
            enabled: false,
            ..limits(1, 60, 60)
        };
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(guard.count(&pair("B"), now, &l), Counted::Within);
        }
    }
}
