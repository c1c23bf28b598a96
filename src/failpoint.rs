//! Crash injection for the crash-safety tests: with the `failpoints` feature, `hit(name)` aborts
//! the process when `DEEPCLI_FAILPOINT` names this point, or is a number `n` and this is the
//! n-th point hit. Without the feature it compiles to nothing.

#[cfg(feature = "failpoints")]
pub fn hit(name: &str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let Ok(want) = std::env::var("DEEPCLI_FAILPOINT") else {
        return;
    };
    let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    if want == name || want.parse::<usize>() == Ok(n) {
        eprintln!("failpoint {n} `{name}`: aborting");
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) {}
