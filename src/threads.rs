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
