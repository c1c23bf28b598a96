//! The shipped fake of Discord (`deepcli fake-platform discord`), and the wait the tests put on
//! it.

use std::time::{Duration, Instant};

pub use deepcli::fake_platform::discord::*;

pub trait Waits {
    /// Waits until `check` holds of the fake (40 s at most).
    fn wait(&self, what: &str, check: impl Fn(&Fake) -> bool);
}

impl Waits for Fake {
    fn wait(&self, what: &str, check: impl Fn(&Fake) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(40);
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; calls: {:#?}",
                self.calls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
