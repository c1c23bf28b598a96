//! An agent's budget counters against its limits, as `deepcli status` shows them in its
//! runtime's entry. The engine (`sessions::budget`) counts and makes the report; it lives here,
//! beside [`super::RuntimeStatus`] that carries it, so that the status needs no layer above.

use serde::{Deserialize, Serialize};

/// One agent's budget counters against its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub turns_last_hour: usize,
    pub turns_per_hour: Option<u32>,
    pub running_turns: u32,
    pub concurrent_turns: Option<u32>,
    pub turn_seconds: Option<u64>,
    pub spawns_last_hour: usize,
    pub spawns_per_hour: Option<u32>,
    pub tokens_today: Usage<u64>,
    pub tokens_per_day: Option<u64>,
    pub cost_today_usd: Usage<f64>,
    pub cost_per_day_usd: Option<f64>,
    pub turns_today: u64,
    /// Why a budget cannot be held (usage the runtime did not report).
    pub notes: Vec<String>,
}

/// Usage today: a sum of what the runtime reported, or `"unknown"` when it reported none
/// (never shown as 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Usage<T> {
    Known(T),
    Unknown,
}

const UNKNOWN: &str = "unknown";

impl<T: Serialize> Serialize for Usage<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Usage::Known(v) => v.serialize(s),
            Usage::Unknown => s.serialize_str(UNKNOWN),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Usage<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Usage<T>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Shown<T> {
            Known(T),
            Said(String),
        }
        match Shown::deserialize(d)? {
            Shown::Known(v) => Ok(Usage::Known(v)),
            Shown::Said(s) if s == UNKNOWN => Ok(Usage::Unknown),
            Shown::Said(s) => Err(serde::de::Error::custom(format!(
                "`{s}` is neither a number nor `{UNKNOWN}`"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_a_number_or_unknown_both_ways() {
        let shown = serde_json::to_string(&[Usage::Known(1.5), Usage::Unknown]).unwrap();
        assert_eq!(shown, r#"[1.5,"unknown"]"#);
        let read: Vec<Usage<f64>> = serde_json::from_str(&shown).unwrap();
        assert_eq!(read, [Usage::Known(1.5), Usage::Unknown]);
        assert!(serde_json::from_str::<Usage<u64>>(r#""zero""#).is_err());
    }
}
