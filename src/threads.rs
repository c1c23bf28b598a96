//! Running a stage's independent parts side by side, freeing large values off the path that
//! waits for them, and keeping upkeep behind the work that serves.

/// Runs `a` here and `b` on a thread of its own, and returns both. A panic in `b` is raised
/// again here, as if `b` had run here.
pub(crate) fn join<A, B: Send>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B) {
    std::thread::scope(|scope| {
        let b = scope.spawn(b);
        let a = a();
        (a, b.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// Frees `value` on a thread of its own: at tens of thousands of bindings a config or a
/// reconcile's state takes tens of milliseconds to free, which nobody should wait for.
pub(crate) fn drop_in_background<T: Send + 'static>(value: T) {
    // When no thread can be started, the closure is dropped at once, and the value with it.
    let _ = std::thread::Builder::new()
        .name("deepcli-drop".into())
        .spawn(move || drop(value));
}

/// The nice value of upkeep: a reconcile's plan, a prune's reads, the WAL checkpointer and the
/// search index (not a prune's batches, which hold the state's write lock while turns write:
/// they would wait for it to get a core). Under a busy hub the threads that serve turns get
/// the cores first (CFS gives a nice-0 thread about nine times the share of a nice-10 one); an
/// idle hub gives upkeep all of them.
pub(crate) const UPKEEP_NICE: i32 = 10;

/// Runs `f` on a thread of its own at [`UPKEEP_NICE`], and returns what it returns; the
/// threads `f` starts inherit the priority. A panic in `f` is raised again here. A thread of
/// its own, because an unprivileged process cannot raise a thread's priority again: the
/// caller's (a pooled thread, say) stays as it was. When no thread can be started, or the
/// priority cannot be lowered, `f` runs anyway (here, or said in the debug log).
pub(crate) fn as_upkeep<R: Send>(name: &str, f: impl FnOnce() -> R + Send) -> R {
    let f = std::sync::Mutex::new(Some(f));
    let take = || f.lock().ok().and_then(|mut f| f.take());
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, || {
                lower_to_upkeep();
                take().map(|f| f())
            });
        let ran = match thread {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            Err(e) => {
                tracing::debug!(error = %e, name, "upkeep runs on the thread that asked for it");
                None
            }
        };
        // `f` is taken once: by the thread, or here when the thread never started.
        ran.or_else(|| take().map(|f| f()))
            .expect("upkeep's work is run once")
    })
}

/// Lowers the calling thread to [`UPKEEP_NICE`] (never raises it), for good (see
/// [`as_upkeep`]): only for a thread that does nothing else.
pub(crate) fn lower_to_upkeep() {
    use rustix::process::{getpriority_process, setpriority_process};
    // On Linux the nice value is the thread's: `PRIO_PROCESS` of no pid is the calling thread
    // alone (setpriority(2), NOTES). A process started nicer than upkeep stays so.
    let lowered = getpriority_process(None).and_then(|now| {
        if now < UPKEEP_NICE {
            setpriority_process(None, UPKEEP_NICE)
        } else {
            Ok(())
        }
    });
    if let Err(e) = lowered {
        tracing::debug!(error = %e, "the upkeep thread keeps its priority");
    }
}

/// `f` over `items` cut into one contiguous run per core, the runs side by side; the results
/// in the order of the runs. `f` gets each run with the index of its first item.
pub(crate) fn map_chunks<'a, T: Sync, R: Send>(
    items: &'a [T],
    f: impl Fn(usize, &'a [T]) -> R + Sync,
) -> Vec<R> {
    if items.is_empty() {
        return Vec::new();
    }
    let (first, mut rest) = map_runs(items, |run| f(0, run), &f);
    rest.insert(0, first);
    rest
}

/// [`map_chunks`] where the first run, the one on the calling thread, gets a function of its
/// own, which may borrow mutably (say, to fill a vector sized for all the results).
pub(crate) fn map_runs<'a, T: Sync, A, R: Send>(
    items: &'a [T],
    first: impl FnOnce(&'a [T]) -> A,
    rest: impl Fn(usize, &'a [T]) -> R + Sync,
) -> (A, Vec<R>) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let size = items.len().div_ceil(cores).max(1);
    let (head, tail) = items.split_at(size.min(items.len()));
    std::thread::scope(|scope| {
        let rest = &rest;
        let handles: Vec<_> = tail
            .chunks(size)
            .enumerate()
            .map(|(k, chunk)| scope.spawn(move || rest(size * (k + 1), chunk)))
            .collect();
        let here = first(head);
        let runs = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        (here, runs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice() -> i32 {
        rustix::process::getpriority_process(None).unwrap()
    }

    /// Upkeep runs behind the serving threads, and so does every thread it starts (a plan's
    /// parallel parts); the thread that asked for it keeps its own priority.
    #[test]
    fn upkeep_and_the_threads_it_starts_run_at_the_upkeep_priority() {
        let before = nice();
        let (own, started) = as_upkeep("test-upkeep", || {
            let started = std::thread::scope(|s| s.spawn(nice).join().unwrap());
            (nice(), started)
        });
        let upkeep = before.max(UPKEEP_NICE);
        assert_eq!((own, started), (upkeep, upkeep));
        assert_eq!(nice(), before, "the caller's priority changed");
    }

    #[test]
    #[should_panic(expected = "upkeep failed")]
    fn a_panic_in_upkeep_is_raised_in_the_caller() {
        as_upkeep("test-upkeep", || panic!("upkeep failed"));
    }
}
