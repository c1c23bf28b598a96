//! Crash injection for the crash-safety tests: with the `failpoints` feature, `hit(name)` aborts
//! the process when `DEEPCLI_FAILPOINT` names this point, or is a number `n` and this is the
//! n-th point hit. With `DEEPCLI_FAILPOINT_PAUSE=FILE` it creates FILE and stops there instead,
//! for a test to `kill -9` the process at that exact point, or to look at it from outside and
//! then remove FILE, which lets it go on. Without the feature it compiles to nothing.

#[cfg(feature = "failpoints")]
pub(crate) fn hit(name: &str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let Ok(want) = std::env::var("DEEPCLI_FAILPOINT") else {
        return;
    };
    let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    if want == name || want.parse::<usize>() == Ok(n) {
        if let Some(mark) = std::env::var_os("DEEPCLI_FAILPOINT_PAUSE") {
            eprintln!("failpoint {n} `{name}`: paused");
            let _ = std::fs::write(&mark, name);
            while std::path::Path::new(&mark).exists() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            eprintln!("failpoint {n} `{name}`: resumed");
            return;
        }
        eprintln!("failpoint {n} `{name}`: aborting");
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn hit(_name: &str) {}

/// With the `failpoints` feature, whether `path` lies under `DEEPCLI_FAILPOINT_OTHER_FS`: the
/// trash then moves it as if it were on another filesystem (copy, verify, remove), so that
/// the crash tests reach the copy's crash points on one filesystem.
#[cfg(feature = "failpoints")]
pub(crate) fn other_filesystem(path: &std::path::Path) -> bool {
    std::env::var_os("DEEPCLI_FAILPOINT_OTHER_FS").is_some_and(|dir| path.starts_with(dir))
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn other_filesystem(_path: &std::path::Path) -> bool {
    false
}
