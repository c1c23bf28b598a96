//! The records: one struct per kind of row the pipeline stores (agents, their bootstrap files,
//! channel accounts, bindings, runtimes, routing plans, trash entries, history), the JSON
//! snapshot that holds them all ([`LiveState`]), and how a row is read back.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Outcome, RuntimePhase, Wanted};

/// `formatVersion` of `deepcli state export`. Version 2 replaced the agents' `owns*` flags with
/// `*Origin`; a version 1 snapshot is still read, its directories' origins `unknown`. Version 3
/// prints the trash entries' manifests in camelCase, like every other key (`manifest.json` and
/// the database keep the file's own spelling).
pub const SNAPSHOT_FORMAT: &str = "3";
/// The snapshot formats `plan --live` reads.
pub const SNAPSHOT_FORMATS: [&str; 3] = ["1", "2", "3"];

/// A managed agent as last applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    pub id: String,
    pub spec_hash: String,
    pub spec: serde_json::Value,
    pub workspace: PathBuf,
    pub agent_dir: PathBuf,
    pub sessions_dir: PathBuf,
    pub protect: bool,
    /// Who made each directory: only one deepcli created goes to trash whole.
    #[serde(default)]
    pub workspace_origin: DirOrigin,
    #[serde(default)]
    pub agent_dir_origin: DirOrigin,
    #[serde(default)]
    pub sessions_origin: DirOrigin,
    pub applied_serial: u64,
}

/// Who made one of an agent's directories.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirOrigin {
    /// deepcli made it, for this agent: deleting the agent moves it to trash whole.
    Created,
    /// It existed before deepcli's first apply for the agent: it is never moved; only the
    /// files deepcli wrote into it go to trash.
    Adopted,
    /// Applied by a deepcli that did not record it; treated as adopted.
    #[default]
    Unknown,
}

impl DirOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            DirOrigin::Created => "created",
            DirOrigin::Adopted => "adopted",
            DirOrigin::Unknown => "unknown",
        }
    }

    /// The stored text; anything else (which the schema's CHECK rules out) reads as `unknown`,
    /// the cautious answer.
    fn parse(text: &str) -> DirOrigin {
        match text {
            "created" => DirOrigin::Created,
            "adopted" => DirOrigin::Adopted,
            _ => DirOrigin::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapRecord {
    pub agent_id: String,
    pub name: String,
    pub path: PathBuf,
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountRecord {
    pub channel: String,
    pub account: String,
    /// The account's fields with secret references only.
    pub spec: serde_json::Value,
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingRecord {
    /// The binding's identity: its type and normalized match.
    pub key: String,
    pub agent_id: String,
    pub spec: JsonText,
    pub position: u64,
}

/// A JSON document kept as the compact text it is stored as: read, compared and written back
/// without being parsed (a config has tens of thousands of binding specs, and a reconcile
/// compares them all). It is exported as the JSON it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<serde_json::value::RawValue>);

impl JsonText {
    /// `value` as compact JSON: what [`StateStore`] stores.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> JsonText {
        serde_json::value::to_raw_value(value)
            .map(JsonText)
            .unwrap_or_else(|_| JsonText::null())
    }

    /// Stored text; text that is not JSON (a damaged row) reads as `null`, as a parsed value
    /// would.
    pub fn from_text(text: String) -> JsonText {
        serde_json::value::RawValue::from_string(text)
            .map(JsonText)
            .unwrap_or_else(|_| JsonText::null())
    }

    fn null() -> JsonText {
        JsonText(serde_json::value::RawValue::NULL.to_owned())
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The document parsed, for field-by-field comparisons.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(self.as_str()).unwrap_or(serde_json::Value::Null)
    }

    /// The same document, whatever the spacing or key order of its text.
    pub fn same(&self, other: &JsonText) -> bool {
        self == other || self.value() == other.value()
    }
}

/// The same text.
impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.as_str() == other.as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRecord {
    pub agent_id: String,
    pub kind: String,
    pub spec_hash: String,
    /// What apply asked for.
    pub desired: Wanted,
    pub status: RuntimePhase,
    pub pid: Option<i64>,
    pub process_start: Option<String>,
    pub started_at: Option<String>,
    pub restarts: u64,
    pub last_exit: Option<String>,
    pub last_error: Option<String>,
    pub info: Option<serde_json::Value>,
    pub updated_at: String,
}

impl RuntimeRecord {
    /// The record as a reader without a controller sees it now: a runtime recorded `starting`
    /// or `ready` whose process is not running any more (no such pid, a zombie, or the pid
    /// reused by another process, told by its start time) is [`RuntimePhase::Gone`]. Only for
    /// a state no live controller holds: the controller's own word is the status, and a
    /// controller on another host has pids this host cannot see.
    pub fn seen_now(mut self) -> RuntimeRecord {
        let running = matches!(self.status, RuntimePhase::Starting | RuntimePhase::Ready);
        if running && !self.process_runs() {
            self.status = RuntimePhase::Gone;
        }
        self
    }

    /// Whether the recorded process still runs on this host (no pid: it does not).
    fn process_runs(&self) -> bool {
        let Some(pid) = self.pid.and_then(|p| u32::try_from(p).ok()) else {
            return false;
        };
        match crate::os::ProcStat::read(pid) {
            None => false,
            Some(p) if p.zombie => false,
            Some(p) => self.process_start.as_deref().is_none_or(|s| s == p.start),
        }
    }
}

/// A runtime as the controller saw it, to record (`runtime::RuntimeStatus::observation`).
#[derive(Debug, Clone, Copy)]
pub struct RuntimeObservation<'a> {
    pub agent_id: &'a str,
    pub kind: &'a str,
    pub spec_hash: &'a str,
    pub status: RuntimePhase,
    pub pid: Option<u32>,
    pub process_start: Option<&'a str>,
    pub escaped: &'a [crate::os::ProcessId],
    pub started_at: Option<&'a str>,
    pub restarts: u64,
    pub last_exit: Option<&'a str>,
    pub last_error: Option<&'a str>,
    pub info: Option<&'a serde_json::Value>,
}

/// A runtime's processes as the state recorded them: the leader, and what left its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeProcesses {
    pub agent_id: String,
    pub pid: Option<u32>,
    pub process_start: Option<String>,
    pub escaped: Vec<crate::os::ProcessId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanRecord {
    pub generation: u64,
    pub content_hash: String,
    pub config_hash: String,
    pub bindings: u64,
    pub published_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrashRecord {
    pub entry: String,
    pub agent_id: String,
    pub dir: PathBuf,
    pub serial: u64,
    pub created_at: String,
    /// The entry's `manifest.json` as it was recorded; shown with camelCase keys.
    #[serde(serialize_with = "camel_case_keys")]
    pub manifest: serde_json::Value,
    pub restored_at: Option<String>,
}

/// `value` with every object key in camelCase (`agent_id` → `agentId`): a record kept in
/// another document's spelling, shown in the one every JSON deepcli prints uses.
fn camel_case_keys<S: serde::Serializer>(
    value: &serde_json::Value,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    fn camel(value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| {
                        let mut words = key.split('_');
                        let mut out = words.next().unwrap_or_default().to_string();
                        for word in words {
                            let mut chars = word.chars();
                            out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
                            out.push_str(chars.as_str());
                        }
                        (out, camel(v))
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(camel).collect()),
            other => other.clone(),
        }
    }
    serde::Serialize::serialize(&camel(value), serializer)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    pub id: i64,
    pub serial: u64,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub user: String,
    pub host: String,
    pub source: String,
    pub config_hash: String,
    pub git_commit: Option<String>,
    pub added: u64,
    pub changed: u64,
    pub removed: u64,
    pub outcome: Outcome,
    pub error: Option<String>,
}

/// Everything `plan` compares the config with: the live state as one value. Also the
/// `deepcli state export` document, so a CI job can plan against production state without its
/// database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveState {
    pub format_version: String,
    pub lineage: String,
    pub serial: u64,
    pub agents: Vec<AgentRecord>,
    pub bootstrap: Vec<BootstrapRecord>,
    pub channel_accounts: Vec<AccountRecord>,
    pub bindings: Vec<BindingRecord>,
    pub runtimes: Vec<RuntimeRecord>,
    pub routing: Option<PlanRecord>,
    pub trash: Vec<TrashRecord>,
}

impl LiveState {
    /// The state of a directory nothing was applied to yet.
    pub fn empty() -> LiveState {
        LiveState {
            format_version: SNAPSHOT_FORMAT.to_string(),
            lineage: String::new(),
            serial: 0,
            agents: Vec::new(),
            bootstrap: Vec::new(),
            channel_accounts: Vec::new(),
            bindings: Vec::new(),
            runtimes: Vec::new(),
            routing: None,
            trash: Vec::new(),
        }
    }
}

fn bool_of(v: i64) -> bool {
    v != 0
}

pub(super) const AGENT_COLUMNS: &str = "id, spec_hash, spec, workspace, agent_dir, sessions_dir, protect, workspace_origin, agent_dir_origin, sessions_origin, applied_serial";

pub(super) fn agent_row(r: &super::db::Row<'_>) -> super::db::DbResult<AgentRecord> {
    Ok(AgentRecord {
        id: r.get(0)?,
        spec_hash: r.get(1)?,
        spec: serde_json::from_str(&r.get::<String>(2)?).unwrap_or(serde_json::Value::Null),
        workspace: PathBuf::from(r.get::<String>(3)?),
        agent_dir: PathBuf::from(r.get::<String>(4)?),
        sessions_dir: PathBuf::from(r.get::<String>(5)?),
        protect: bool_of(r.get(6)?),
        workspace_origin: DirOrigin::parse(&r.get::<String>(7)?),
        agent_dir_origin: DirOrigin::parse(&r.get::<String>(8)?),
        sessions_origin: DirOrigin::parse(&r.get::<String>(9)?),
        applied_serial: r.get(10)?,
    })
}

/// A JSON column read as `T`: text that does not parse is a conversion failure (a corrupt
/// record), never a silent `null`.
pub(super) struct Json<T>(pub(super) T);

impl<T: serde::de::DeserializeOwned> rusqlite::types::FromSql for Json<T> {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        serde_json::from_str(text)
            .map(Json)
            .map_err(|e| rusqlite::types::FromSqlError::Other(Box::new(e)))
    }
}

impl<T: serde::de::DeserializeOwned> super::db::FromColumn for Json<T> {
    fn from_column(column: super::db::Column<'_>) -> Result<Self, String> {
        match column {
            super::db::Value::Text(text) => serde_json::from_str(text)
                .map(Json)
                .map_err(|e| format!("JSON that does not parse: {e}")),
            other => Err(format!("{} where JSON was expected", other.kind())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JsonText;

    #[test]
    fn json_text_is_compared_as_text_then_as_json() {
        let stored = JsonText::from_text(r#"{"b": 2, "a": [1]}"#.to_string());
        let fresh = JsonText::of(&serde_json::json!({"a": [1], "b": 2}));
        assert_ne!(stored, fresh, "the texts differ");
        assert!(stored.same(&fresh), "the documents do not");
        assert!(!stored.same(&JsonText::of(&serde_json::json!({"a": [2], "b": 2}))));
        assert_eq!(JsonText::from_text("{oops".into()).as_str(), "null");
        assert_eq!(
            serde_json::to_string(&fresh).unwrap(),
            r#"{"a":[1],"b":2}"#,
            "exported as the JSON it holds"
        );
    }
}
