//! Running a stage's independent parts side by side, and freeing large values off the path
//! that waits for them.

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
