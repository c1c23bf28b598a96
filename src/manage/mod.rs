//! Management: the imperative `agents …` and `channels …` commands and the operator JSON-RPC
//! (management.md), implemented once as a service over the config files.
//!
//! There is no second store: every write edits agents.yaml, channels.yaml or bindings.yaml in
//! place ([`edit`]: lossless splicing on the loader's spans), after validating the whole
//! would-be config, checking that no file changed since it was read, and writing atomically
//! ([`files::Change::commit`]). A controller picks the change up like any other edit.
//!
//! The CLI (`cli::agents`, `cli::channels`) and the JSON-RPC dispatcher ([`rpc::handle`]) are
//! thin shells: they turn arguments into the request types here and render the same result
//! types. Nothing here prints.

pub mod agents;
pub mod capabilities;
pub mod channel_policy;
pub mod channels;
pub mod edit;
pub mod files;
pub mod identity;
pub mod live;
pub mod openclaw;
pub mod pairing;
pub mod rpc;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::config::LoadOptions;

/// A source of the controller's `/v1/status` document (the CLI asks a running controller over
/// HTTP; the controller itself can answer directly). `None` from it: no controller.
pub type LiveStatus = Arc<dyn Fn() -> Option<serde_json::Value> + Send + Sync>;

/// Called after a command computed its edits and right before it checks the files for outside
/// changes: tests change a file here to prove the check works.
pub type BeforeWrite = Arc<dyn Fn(&Path) + Send + Sync>;

/// What every management call needs.
#[derive(Clone)]
pub struct ManageContext {
    pub config_dir: PathBuf,
    pub load: LoadOptions,
    pub live: Option<LiveStatus>,
    pub before_write: Option<BeforeWrite>,
}

impl std::fmt::Debug for ManageContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManageContext")
            .field("config_dir", &self.config_dir)
            .field("load", &self.load)
            .finish_non_exhaustive()
    }
}

impl ManageContext {
    pub fn new(config_dir: impl Into<PathBuf>, load: LoadOptions) -> ManageContext {
        ManageContext {
            config_dir: config_dir.into(),
            load,
            live: None,
            before_write: None,
        }
    }

    pub fn state_dir(&self) -> crate::state::StateDir {
        crate::state::StateDir::new(&self.load.state_dir)
    }
}

/// How a write went: what changed (or would change, with `dryRun`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// The files changed, by name (`bindings.yaml`).
    pub files: Vec<String>,
    pub dry_run: bool,
    /// With `dryRun`: the unified diff of every file that would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// Why a management call failed. The CLI maps each to an exit code ([`ManageError::exit_code`]),
/// the JSON-RPC codec to an error code ([`rpc::rpc_error`]).
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// Bad arguments: a malformed `--bind`, nothing to do.
    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },
    /// The agent, channel or account named does not exist.
    #[error("{message}")]
    NotFound {
        message: String,
        hint: Option<String>,
    },
    /// The request is understood but refused: deleting `main`, a literal secret, an id taken.
    #[error("{message}")]
    Refused {
        message: String,
        hint: Option<String>,
    },
    /// The edit would make the config invalid; nothing was written.
    #[error(
        "the change would make the config invalid ({}); nothing was written",
        crate::plural::plural(*.errors, "error", "errors")
    )]
    Invalid {
        errors: usize,
        /// The files the edit changed (`bindings.yaml`): positions in them are those of the
        /// would-be text, which was not written.
        edited: Vec<String>,
        /// The diagnostics as `validate --format human` renders them (file:line:col).
        rendered: String,
        /// The diagnostics as `validate --format json` renders them.
        diagnostics: serde_json::Value,
    },
    /// A file changed on disk between read and write; nothing was written.
    #[error(
        "`{}` changed on disk while this command ran; nothing was written",
        .0.display()
    )]
    Stale(PathBuf),
    #[error("{0}")]
    Load(#[from] crate::config::LoadError),
    #[error("cannot edit `{file}`: {source}")]
    Edit {
        file: String,
        source: edit::EditError,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    State(#[from] crate::state::StateError),
}

impl ManageError {
    /// The edit (or the files it reads) does not validate: `report` rendered for people and
    /// as `validate --format json`'s document; `edited` names the files whose positions are
    /// those of the would-be text.
    pub fn invalid(report: &crate::validate::Report, edited: Vec<String>) -> ManageError {
        ManageError::Invalid {
            errors: report.errors(),
            edited,
            rendered: crate::report::human(report),
            diagnostics: serde_json::from_str(&crate::report::json(report)).unwrap_or_default(),
        }
    }

    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> ManageError {
        ManageError::Usage {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    pub fn not_found(message: impl Into<String>, hint: Option<String>) -> ManageError {
        ManageError::NotFound {
            message: message.into(),
            hint,
        }
    }

    pub fn refused(message: impl Into<String>, hint: impl Into<String>) -> ManageError {
        ManageError::Refused {
            message: message.into(),
            hint: Some(hint.into()),
        }
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            ManageError::Usage { hint, .. }
            | ManageError::NotFound { hint, .. }
            | ManageError::Refused { hint, .. } => hint.clone(),
            ManageError::Invalid { .. } => {
                Some("fix the config (or the request) and run the command again".into())
            }
            ManageError::Stale(_) => Some(
                "someone else edited the file; run the command again to apply it to the new content"
                    .into(),
            ),
            ManageError::Load(_) => {
                Some("pass the config directory with --config DIR (or DEEPCLI_CONFIG)".into())
            }
            ManageError::State(e) => e.hint().map(str::to_string),
            _ => None,
        }
    }

    /// `2` for usage and could-not-run errors, `1` for everything refused or failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            ManageError::Usage { .. } | ManageError::Load(_) => 2,
            ManageError::State(e) if e.is_unusable() => 2,
            _ => 1,
        }
    }
}

pub type Result<T, E = ManageError> = std::result::Result<T, E>;

/// The agent ids of a config, for did-you-mean hints.
fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    crate::suggest::closest(word, candidates).map(|near| format!("did you mean `{near}`?"))
}
