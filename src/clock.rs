//! The time deepcli writes: RFC 3339 UTC text, rounded to the second. One format for the state,
//! logs and every answer.

/// Now, as `2026-12-01T14:35:05Z`.
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

/// Now, as a timestamp: what a session's `session.reset` is measured against. Built with the
/// `failpoints` feature, `DEEPCLI_FAILPOINT_CLOCK_FILE` names a file holding a number of
/// seconds added to it, read at every call: a test moves the hub's day on without waiting.
pub(crate) fn timestamp() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    #[cfg(feature = "failpoints")]
    if let Some(path) = std::env::var_os("DEEPCLI_FAILPOINT_CLOCK_FILE")
        && let Ok(text) = std::fs::read_to_string(path)
        && let Ok(seconds) = text.trim().parse::<i64>()
    {
        return now
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap_or(now);
    }
    now
}
