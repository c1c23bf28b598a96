//! Running a stage's independent parts side by side, and freeing large values off the path
//! that waits for them.

/// Runs `a` here and `b` on a thread of its own, and returns both. A panic in `b` is raised
/// again here, as if `b` had run here.
pub fn join<A, B: Send>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B) {
    std::thread::scope(|scope| {
        let b = scope.spawn(b);
        let a = a();
        (a, b.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })
}

/// Frees `value` on a thread of its own: at tens of thousands of bindings a config or a
/// reconcile's state takes tens of milliseconds to free, which nobody should wait for.
pub fn drop_in_background<T: Send + 'static>(value: T) {
    // When no thread can be started, the closure is dropped at once, and the value with it.
    let _ = std::thread::Builder::new()
        .name("deepcli-drop".into())
        .spawn(move || drop(value));
}

/// `f` over `items` cut into one contiguous run per core, the runs side by side; the results
/// in the order of the runs. `f` gets each run with the index of its first item.
pub fn map_chunks<'a, T: Sync, R: Send>(
    items: &'a [T],
    f: impl Fn(usize, &'a [T]) -> R + Sync,
) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let size = items.len().div_ceil(cores).max(1);
    let mut chunks = items.chunks(size).enumerate();
    let Some((_, first)) = chunks.next() else {
        return Vec::new();
    };
    std::thread::scope(|scope| {
        let f = &f;
        let rest: Vec<_> = chunks
            .map(|(i, chunk)| scope.spawn(move || f(i * size, chunk)))
            .collect();
        let mut out = Vec::with_capacity(rest.len() + 1);
        out.push(f(0, first));
        for handle in rest {
            out.push(
                handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            );
        }
        out
    })
}
