//! The time deepcli writes: RFC 3339 UTC text, rounded to the second. One format for the state,
//! logs and every answer.

/// Now, as `2026-12-01T14:35:05Z`.
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}
