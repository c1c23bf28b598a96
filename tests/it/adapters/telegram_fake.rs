//! The shipped fake of the Telegram Bot API (`deepcli fake-platform telegram`), and the waits
//! the tests put on it.

use std::time::{Duration, Instant};

use serde_json::Value;

pub use deepcli::fake_platform::telegram::*;

pub trait Waits {
    /// Waits until `check` holds of the recorded calls (30 s at most).
    fn wait(&self, what: &str, check: impl Fn(&Fake) -> bool);
    /// Waits for `n` answered sendMessage calls and returns them.
    fn wait_sent(&self, n: usize) -> Vec<Value>;
}

impl Waits for Fake {
    fn wait(&self, what: &str, check: impl Fn(&Fake) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; calls: {:#?}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_sent(&self, n: usize) -> Vec<Value> {
        self.wait(&format!("{n} sendMessage"), |f| f.sent().len() >= n);
        self.sent()
    }
}
