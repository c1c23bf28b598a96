//! Each peer's request rate (`requestsPerMinute`): a minute's worth at once, then one more every
//! 60/n seconds, on `governor` (GCRA, the same allowance as a token bucket that holds n and
//! refills at n a minute). A peer whose rate an apply changed starts again with a full minute.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

type Limiter<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// Every peer's allowance, by peer name, with the rate it was made for.
pub(super) struct Rates<C: Clock = DefaultClock> {
    clock: C,
    peers: Mutex<HashMap<String, (u32, Limiter<C>)>>,
}

impl Default for Rates {
    fn default() -> Rates {
        Rates::with_clock(DefaultClock::default())
    }
}

impl<C: Clock + Clone> Rates<C> {
    pub(super) fn with_clock(clock: C) -> Rates<C> {
        Rates {
            clock,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from `peer`'s allowance of `per_minute`; when it has none left, the
    /// whole seconds until it has one (at least 1).
    pub(super) fn take(&self, peer: &str, per_minute: u32) -> Result<(), u64> {
        let Some(rate) = NonZeroU32::new(per_minute) else {
            return Err(u64::MAX);
        };
        let mut peers = match self.peers.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        let fresh = || {
            (
                per_minute,
                RateLimiter::direct_with_clock(Quota::per_minute(rate), self.clock.clone()),
            )
        };
        let limiter = match peers.get_mut(peer) {
            Some(entry) => {
                if entry.0 != per_minute {
                    *entry = fresh();
                }
                &entry.1
            }
            None => &peers.entry(peer.to_string()).or_insert_with(fresh).1,
        };
        limiter.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            wait.as_secs_f64().ceil().max(1.0) as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn a_peer_gets_a_minutes_worth_at_once_then_one_every_60_over_n_seconds() {
        let clock = FakeRelativeClock::default();
        let rates = Rates::with_clock(clock.clone());
        for _ in 0..2 {
            assert_eq!(rates.take("p", 2), Ok(()));
        }
        assert_eq!(rates.take("p", 2), Err(30));
        // Another peer has its own allowance.
        assert_eq!(rates.take("q", 2), Ok(()));
        clock.advance(Duration::from_millis(29_500));
        assert_eq!(rates.take("p", 2), Err(1), "half a second left is 1 s");
        clock.advance(Duration::from_millis(500));
        assert_eq!(rates.take("p", 2), Ok(()));
        assert_eq!(rates.take("p", 2), Err(30));
        // A long quiet time refills it to a minute's worth, no more.
        clock.advance(Duration::from_secs(3600));
        assert_eq!(rates.take("p", 2), Ok(()));
        assert_eq!(rates.take("p", 2), Ok(()));
        assert_eq!(rates.take("p", 2), Err(30));
    }

    #[test]
    fn a_changed_rate_starts_the_peer_again_and_zero_takes_nothing() {
        let clock = FakeRelativeClock::default();
        let rates = Rates::with_clock(clock);
        assert_eq!(rates.take("p", 1), Ok(()));
        assert_eq!(rates.take("p", 1), Err(60));
        for _ in 0..600 {
            assert_eq!(rates.take("p", 600), Ok(()));
        }
        assert_eq!(rates.take("p", 600), Err(1));
        assert_eq!(rates.take("p", 0), Err(u64::MAX));
    }
}
