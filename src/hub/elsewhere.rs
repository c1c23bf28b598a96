//! The Hub's turns into agents another replica runs (docs/scale-out.md, "The Hub across
//! replicas"). A run is carried out by the replica whose door took the tool call (or the
//! operator's send); its turn is taken by the replica that holds the target agent's claim,
//! over `POST <owner>/internal/hub-turn` with the cluster token. The owner puts the message in
//! the session's FIFO, makes the run's checks again as its turn begins over the shared record
//! (a cancel recorded meanwhile withdraws it), and streams its answer back as lines of JSON:
//! `queued` once the message holds its place, `working` every second, then `end`.
//!
//! A caller that stops listening (its replica died) leaves the owner to record how the run's
//! turn ended, so no run is left `running` by a dead carrier. An owner that stops answering
//! (it died, or froze past [`SILENCE`](crate::access::placement)) leaves the turn `uncertain`
//! once it began, and the message undelivered before.
//!
//! The calls on a session the agent's runtime holds — a cancel, a close, the operator's stop —
//! go to the owner the same way, over `POST <owner>/internal/hub-session`. And a file is on the
//! disk of the replica that took it — a stored artifact, of the replica whose agent handed it
//! in; a file an A2A peer sent, of the replica the peer called: another fetches it from there
//! when it needs it (`POST <replica>/internal/artifact`, `/internal/received`), checked
//! against its hash.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Hub;
use super::runs::{TurnEnd, settle};
use crate::access::placement::{Holder, Owner, WORKING_EVERY};
use crate::access::{InternalMessage, SessionOptions};
use crate::sessions::{CancelState, RemoteFile, StopReason};
use crate::state::Provenance;

/// A turn handed to the replica that runs its agent.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct HandedTurn {
    agent: String,
    session_key: String,
    /// The run the turn carries: its checks at turn start are made by the owner, over the
    /// run's record in the shared state; its files are read from the agent's workspace there.
    run_id: Option<String>,
    provenance: Provenance,
    text: String,
    prompt: String,
    meta: Value,
    oneshot: bool,
    label: Option<String>,
    cwd: Option<PathBuf>,
    timeout_ms: Option<u64>,
    unbounded: bool,
}

impl HandedTurn {
    fn of(agent: &str, key: &str, message: InternalMessage, run_id: Option<&str>) -> HandedTurn {
        let options = message.options;
        HandedTurn {
            agent: agent.to_owned(),
            session_key: key.to_owned(),
            run_id: run_id.map(str::to_owned),
            provenance: message.provenance,
            text: message.text,
            prompt: message.prompt,
            meta: message.meta,
            oneshot: options.oneshot,
            label: options.label,
            cwd: options.cwd,
            timeout_ms: options.timeout.map(|t| t.as_millis() as u64),
            unbounded: message.unbounded,
        }
    }

    fn message(self) -> InternalMessage {
        InternalMessage {
            provenance: self.provenance,
            text: self.text,
            prompt: self.prompt,
            meta: self.meta,
            options: SessionOptions {
                oneshot: self.oneshot,
                label: self.label,
                cwd: self.cwd,
                timeout: self.timeout_ms.map(Duration::from_millis),
                run_id: self.run_id,
                begun: None,
                files: Vec::new(),
            },
            unbounded: self.unbounded,
        }
    }
}

/// One line of the owner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
enum Line {
    /// The message holds its place in the session's FIFO (or was refused at once).
    Queued,
    /// The owner is still at it.
    Working,
    /// How the turn ended.
    End { end: Ended },
}

/// [`TurnEnd`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "camelCase")]
enum Ended {
    #[serde(rename_all = "camelCase")]
    Answered {
        text: String,
        stop_reason: Option<String>,
        runtime_us: u64,
        files: Vec<File>,
    },
    Withdrawn {
        why: String,
    },
    RuntimeDown {
        why: String,
    },
    Uncertain {
        why: String,
    },
    TimedOut {
        why: String,
    },
    OverBudget {
        why: String,
    },
    Failed {
        why: String,
    },
}

/// A file part a remote A2A agent answered with.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    name: Option<String>,
    media_type: Option<String>,
    /// Base64.
    bytes: Option<String>,
    url: Option<String>,
}

impl From<TurnEnd> for Ended {
    fn from(end: TurnEnd) -> Ended {
        use base64::Engine as _;
        match end {
            TurnEnd::Answered {
                text,
                stop_reason,
                runtime,
                files,
            } => Ended::Answered {
                text,
                stop_reason: stop_reason.map(|s| s.as_str().to_owned()),
                runtime_us: runtime.as_micros() as u64,
                files: files
                    .into_iter()
                    .map(|f| File {
                        name: f.name,
                        media_type: f.media_type,
                        bytes: f
                            .bytes
                            .map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
                        url: f.url,
                    })
                    .collect(),
            },
            TurnEnd::Withdrawn(why) => Ended::Withdrawn { why },
            TurnEnd::RuntimeDown(why) => Ended::RuntimeDown { why },
            TurnEnd::Uncertain(why) => Ended::Uncertain { why },
            TurnEnd::TimedOut(why) => Ended::TimedOut { why },
            TurnEnd::OverBudget(why) => Ended::OverBudget { why },
            TurnEnd::Failed(why) => Ended::Failed { why },
        }
    }
}

impl From<Ended> for TurnEnd {
    fn from(end: Ended) -> TurnEnd {
        use base64::Engine as _;
        match end {
            Ended::Answered {
                text,
                stop_reason,
                runtime_us,
                files,
            } => TurnEnd::Answered {
                text,
                stop_reason: stop_reason.as_deref().map(StopReason::parse),
                runtime: Duration::from_micros(runtime_us),
                files: files
                    .into_iter()
                    .map(|f| RemoteFile {
                        name: f.name,
                        media_type: f.media_type,
                        bytes: f
                            .bytes
                            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok()),
                        url: f.url,
                    })
                    .collect(),
            },
            Ended::Withdrawn { why } => TurnEnd::Withdrawn(why),
            Ended::RuntimeDown { why } => TurnEnd::RuntimeDown(why),
            Ended::Uncertain { why } => TurnEnd::Uncertain(why),
            Ended::TimedOut { why } => TurnEnd::TimedOut(why),
            Ended::OverBudget { why } => TurnEnd::OverBudget(why),
            Ended::Failed { why } => TurnEnd::Failed(why),
        }
    }
}

/// A call on a session the agent's runtime holds, made where the agent runs.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
enum SessionCall {
    /// ACP `session/cancel` of the turn running (a run's cancel): whether it was sent.
    #[serde(rename_all = "camelCase")]
    Cancel { agent: String, session_key: String },
    /// The operator's cancel, confirmed within `grace_ms`: how it came out.
    #[serde(rename_all = "camelCase")]
    Stop {
        agent: String,
        session_key: String,
        grace_ms: u64,
    },
    /// The runtime session ended and forgotten: a note on what happened.
    #[serde(rename_all = "camelCase")]
    Close { agent: String, session_key: String },
}

impl SessionCall {
    fn agent(&self) -> &str {
        match self {
            SessionCall::Cancel { agent, .. }
            | SessionCall::Stop { agent, .. }
            | SessionCall::Close { agent, .. } => agent,
        }
    }
}

/// What a [`SessionCall`] came to.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionAnswer {
    sent: bool,
    stopped: Option<CancelState>,
    closed: Option<String>,
}

impl Hub {
    /// The replica that runs `agent`, when it is not this one: as this replica's view of the
    /// placement says, or, when that names none (the claim is moving), as the state says now.
    pub(super) async fn held_elsewhere(&self, agent: &str) -> Option<Holder> {
        let placement = self.access.placement()?;
        match placement.owner(agent) {
            Owner::Here(_) => None,
            Owner::There(holder) => Some(holder),
            Owner::Nobody => self
                .access
                .holder_now(agent)
                .await
                .filter(|h| !placement.is_me(&h.replica)),
        }
    }

    /// [`Hub::turn`] for an agent `holder` runs: handed on, and its answer read as it streams.
    /// When the holder cannot be reached, or no longer runs the agent, the state is asked
    /// where it runs now, once.
    pub(super) async fn turn_there(
        self: &Arc<Self>,
        holder: &Holder,
        agent: &str,
        key: &str,
        message: InternalMessage,
        mut queued: Option<oneshot::Sender<()>>,
        run_id: Option<&str>,
    ) -> TurnEnd {
        let body = match serde_json::to_vec(&HandedTurn::of(agent, key, message, run_id)) {
            Ok(body) => body,
            Err(e) => return TurnEnd::Failed(format!("internal error: {e}")),
        };
        let mut first = true;
        let mut holder = holder.clone();
        loop {
            // Nothing reached it, or it does not run the agent (it moved): asked of the state
            // again, once.
            let why = match self.stream_turn(&holder, agent, &body, &mut queued).await {
                Err(Unreached(why)) => why,
                Ok(TurnEnd::RuntimeDown(why)) => why,
                Ok(end) => return end,
            };
            if !std::mem::replace(&mut first, false) {
                return TurnEnd::RuntimeDown(why);
            }
            match self.access.holder_now(agent).await {
                Some(now) if now != holder => {
                    if self
                        .access
                        .placement()
                        .is_some_and(|p| p.is_me(&now.replica))
                    {
                        // It moved here since this replica's last round.
                        return TurnEnd::RuntimeDown(format!(
                            "agent `{agent}` is starting on this replica (it moved here); send it again later"
                        ));
                    }
                    holder = now;
                }
                _ => return TurnEnd::RuntimeDown(why),
            }
        }
    }

    /// One try of [`Hub::turn_there`]: `Err` when nothing reached the owner.
    async fn stream_turn(
        &self,
        holder: &Holder,
        agent: &str,
        body: &[u8],
        queued: &mut Option<oneshot::Sender<()>>,
    ) -> Result<TurnEnd, Unreached> {
        let unreached = |why: String| {
            Unreached(format!(
                "replica {} runs agent `{agent}` and cannot be reached at {}: {why}; send it again later (its claim moves to another replica if it is gone)",
                holder.replica, holder.url
            ))
        };
        let placement = self
            .access
            .placement()
            .ok_or_else(|| Unreached(format!("agent `{agent}` does not run here")))?;
        let request = placement
            .call(holder, "/internal/hub-turn", body.to_vec())
            .map_err(|why| Unreached(format!("agent `{agent}`: {why}")))?;
        let mut response = request
            .send()
            .await
            .map_err(|e| unreached(crate::http_client::error_text(e)))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Ok(TurnEnd::Failed(format!(
                "replica {} refused the turn for agent `{agent}` ({status}): {text}",
                holder.replica
            )));
        }
        let mut buffer = Vec::new();
        let mut began = false;
        let gone = |why: String, began: bool| {
            let why = format!(
                "replica {} that runs agent `{agent}` stopped answering during the turn: {why}",
                holder.replica
            );
            if began {
                TurnEnd::Uncertain(why)
            } else {
                TurnEnd::RuntimeDown(format!("{why}; send it again later"))
            }
        };
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ok(gone("its answer ended early".into(), began)),
                Err(e) => return Ok(gone(crate::http_client::error_text(e), began)),
            };
            buffer.extend_from_slice(&chunk);
            while let Some(at) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=at).collect();
                match serde_json::from_slice::<Line>(&line) {
                    Ok(Line::Queued) => {
                        began = true;
                        queued.take();
                    }
                    Ok(Line::Working) => {}
                    Ok(Line::End { end }) => return Ok(end.into()),
                    Err(e) => return Ok(gone(format!("a line that is not one: {e}"), began)),
                }
            }
        }
    }

    /// Takes a turn another replica handed on, for an agent this one runs; its lines go to
    /// `lines`. When the caller stops listening, the run's end is recorded here.
    async fn take_turn(self: Arc<Self>, handed: HandedTurn, lines: mpsc::Sender<Line>) {
        let (agent, key) = (handed.agent.clone(), handed.session_key.clone());
        let run = match handed.run_id.clone() {
            Some(id) => self.db(move |s| s.run(&id)).await.ok().flatten(),
            None => None,
        };
        let live = run
            .as_ref()
            .map(|r| self.runs.register(&r.run_id, &r.target_agent_id));
        let (queued, mut in_line) = oneshot::channel();
        let mut message = handed.message();
        // The run's files are read where the agent runs (`Hub::turn`).
        message.options.files = Vec::new();
        // Taken here, never handed on again: a view of the placement a round old on either
        // side could send it back and forth. An agent that moved meanwhile is not running
        // here, and the caller asks the state where it runs now.
        let turn = self.turn_here(
            &agent,
            &key,
            message,
            Some(queued),
            run.as_ref().zip(live.as_ref()),
        );
        tokio::pin!(turn);
        let mut beat = tokio::time::interval(WORKING_EVERY);
        beat.tick().await;
        let mut listening = true;
        let mut said_queued = false;
        let end = loop {
            tokio::select! {
                end = &mut turn => break end,
                _ = &mut in_line, if !said_queued => {
                    said_queued = true;
                    listening &= lines.send(Line::Queued).await.is_ok();
                }
                _ = beat.tick() => {
                    listening &= !matches!(
                        lines.try_send(Line::Working),
                        Err(mpsc::error::TrySendError::Closed(_))
                    );
                }
            }
        };
        let cancelled = live.as_ref().is_some_and(|l| l.cancelled.load(Relaxed));
        let told = listening
            && lines
                .send(Line::End {
                    end: end.clone().into(),
                })
                .await
                .is_ok();
        if let Some(run) = &run {
            if !told {
                tracing::warn!(run = %run.run_id, agent = %agent, "hub: the replica that carries this run stopped listening: its end is recorded here");
                let (next, outcome) = settle(&end, cancelled);
                self.record_end(&run.run_id, next, outcome).await;
            }
            self.runs.finish(&run.run_id);
        }
    }
}

/// Nothing reached the owner: why.
struct Unreached(String);

impl Hub {
    /// Asks the runtime to cancel the turn running in session `key` of `agent` (ACP
    /// `session/cancel`), where the agent runs. Whether a cancel was sent.
    pub(super) async fn cancel_turn(&self, agent: &str, key: &str) -> bool {
        let call = SessionCall::Cancel {
            agent: agent.to_owned(),
            session_key: key.to_owned(),
        };
        self.session_call(call).await.sent
    }

    /// The operator's cancel of the turn running in session `key` of `agent`, where the agent
    /// runs: how it came out.
    pub(super) async fn stop_turn(&self, agent: &str, key: &str, grace: Duration) -> CancelState {
        let call = SessionCall::Stop {
            agent: agent.to_owned(),
            session_key: key.to_owned(),
            grace_ms: grace.as_millis() as u64,
        };
        let answer = self.session_call(call).await;
        answer.stopped.unwrap_or(CancelState::NotRunning)
    }

    /// Ends session `key`'s runtime session where `agent` runs; a note on what happened,
    /// `None` when it was not open.
    pub(super) async fn close_runtime_session(&self, agent: &str, key: &str) -> Option<String> {
        let call = SessionCall::Close {
            agent: agent.to_owned(),
            session_key: key.to_owned(),
        };
        self.session_call(call).await.closed
    }

    /// `call` made where its agent runs: here, or on the replica that runs it (an empty
    /// answer when that replica cannot be reached: its runtime sessions end with it).
    async fn session_call(&self, call: SessionCall) -> SessionAnswer {
        let (Some(holder), Some(placement)) = (
            self.held_elsewhere(call.agent()).await,
            self.access.placement(),
        ) else {
            return self.answer_session_call(call).await;
        };
        let answered = async {
            let body = serde_json::to_vec(&call).map_err(|e| e.to_string())?;
            let response = placement
                .call(&holder, "/internal/hub-session", body)?
                .send()
                .await
                .map_err(crate::http_client::error_text)?;
            if !response.status().is_success() {
                return Err(format!("{}", response.status()));
            }
            response
                .json::<SessionAnswer>()
                .await
                .map_err(crate::http_client::error_text)
        };
        answered.await.unwrap_or_else(|why| {
            tracing::warn!(replica = %holder.replica, agent = call.agent(), error = %why, "hub: a session call on another replica failed");
            SessionAnswer::default()
        })
    }

    /// Makes a [`SessionCall`] here.
    async fn answer_session_call(&self, call: SessionCall) -> SessionAnswer {
        match call {
            SessionCall::Cancel { agent, session_key } => SessionAnswer {
                sent: self.access.cancel_turn(&agent, &session_key).await,
                ..SessionAnswer::default()
            },
            SessionCall::Stop {
                agent,
                session_key,
                grace_ms,
            } => SessionAnswer {
                stopped: Some(
                    self.access
                        .cancel_running_turn(&agent, &session_key, Duration::from_millis(grace_ms))
                        .await,
                ),
                ..SessionAnswer::default()
            },
            SessionCall::Close { agent, session_key } => SessionAnswer {
                closed: self
                    .access
                    .close_runtime_session(&agent, &session_key)
                    .await,
                ..SessionAnswer::default()
            },
        }
    }
}

/// Which stored file of the artifacts' store another replica asks for.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArtifactAsked {
    /// Relative to the artifacts' store: `<task>/<sha256>`, `a2a-runs/<run>/<sha256>`.
    path: String,
}

/// Whether `path` names a file beneath the artifacts' store, and nothing else: plain names
/// only, no `.` or `..`, no empty part.
fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

impl Hub {
    /// Makes sure stored file `sha256` of `store` (a directory of the artifacts' store) is on
    /// this replica's disk. Each replica keeps the files its own door took; one another
    /// replica took is fetched from it, checked against its SHA-256 and stored here. Whether
    /// it is here now.
    pub(super) async fn artifact_here(&self, store: &std::path::Path, sha256: &str) -> bool {
        if tokio::fs::try_exists(store.join(sha256))
            .await
            .unwrap_or(false)
        {
            return true;
        }
        let (Some(placement), Ok(relative)) =
            (self.access.placement(), store.strip_prefix(&self.artifacts))
        else {
            return false;
        };
        let asked = ArtifactAsked {
            path: format!("{}/{sha256}", relative.to_string_lossy()),
        };
        let Ok(body) = serde_json::to_vec(&asked) else {
            return false;
        };
        let Some(bytes) = fetch_checked(placement, "/internal/artifact", &body, sha256).await
        else {
            return false;
        };
        let (store, name) = (
            store.to_owned(),
            crate::tasks::artifacts::ArtifactName::stored(sha256.to_owned()),
        );
        tokio::task::spawn_blocking(move || {
            crate::tasks::artifacts::store_bytes(&bytes, &name, &store, u64::MAX).is_ok()
        })
        .await
        .unwrap_or(false)
    }
}

/// The bytes the first of the replicas that run agents answers a call to `path` with, whose
/// SHA-256 is `sha256`: `None` when none can be reached or has them as they were.
async fn fetch_checked(
    placement: &crate::access::placement::Placement,
    path: &str,
    body: &[u8],
    sha256: &str,
) -> Option<Bytes> {
    for holder in placement.others() {
        let fetched = async {
            let response = placement
                .call(&holder, path, body.to_vec())
                .ok()?
                .send()
                .await
                .ok()?;
            if !response.status().is_success() {
                return None;
            }
            response.bytes().await.ok()
        };
        let Some(bytes) = fetched.await else {
            continue;
        };
        let (checked, wanted) = (bytes.clone(), sha256.to_owned());
        let same = tokio::task::spawn_blocking(move || {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(&checked)) == wanted
        })
        .await
        .unwrap_or(false);
        if same {
            return Some(bytes);
        }
        tracing::warn!(replica = %holder.replica, %path, "hub: a file fetched from another replica is not what was stored");
    }
    None
}

/// A file an A2A peer sent that another replica wrote into an agent's workspace.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReceivedAsked {
    agent: String,
    /// Relative to the workspace: `.deepcli/a2a/<task>/<name>`.
    path: String,
    sha256: String,
    size: u64,
}

impl Hub {
    /// The bytes of `file`, a file an A2A peer sent with a run's message to `agent` that another
    /// replica (the one the peer called) wrote into its copy of the agent's workspace: fetched
    /// from it, checked against its SHA-256, and written into `workspace` here as it was there.
    /// `None` when no replica has it as it was written.
    pub(super) async fn received_elsewhere(
        &self,
        agent: &str,
        workspace: &std::path::Path,
        file: &super::store::RunFile,
    ) -> Option<Vec<u8>> {
        let placement = self.access.placement()?;
        let asked = ReceivedAsked {
            agent: agent.to_owned(),
            path: file.path.clone(),
            sha256: file.sha256.clone(),
            size: file.size,
        };
        let body = serde_json::to_vec(&asked).ok()?;
        let bytes = fetch_checked(placement, "/internal/received", &body, &file.sha256).await?;
        let (workspace, path) = (workspace.to_owned(), file.path.clone());
        tokio::task::spawn_blocking(move || {
            let (task, name) = crate::tasks::artifacts::received_at(&path)?;
            crate::tasks::artifacts::receive(&workspace, task, &name, &bytes).ok()?;
            Some(bytes.to_vec())
        })
        .await
        .ok()
        .flatten()
    }
}

/// An error answer between replicas.
fn error(status: StatusCode, error: &str) -> Response {
    (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
}

/// A file's bytes, or 404 saying `missing`.
fn file(bytes: Option<Vec<u8>>, missing: &str) -> Response {
    match bytes {
        Some(bytes) => (
            [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response(),
        None => error(StatusCode::NOT_FOUND, missing),
    }
}

/// Lets a call between replicas through only with the cluster token; on a controller that is
/// no replica, there is no such endpoint. The one check of every `/internal/hub-*` route.
pub(crate) async fn admit(
    State(hub): State<Arc<Hub>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match hub.access.placement() {
        None => error(
            StatusCode::NOT_FOUND,
            "no such endpoint: this controller is not one of several replicas",
        ),
        Some(placement) if !placement.admits(request.headers()) => error(
            StatusCode::UNAUTHORIZED,
            "wrong or missing X-Deepcli-Cluster-Token: only the hub's replicas hand turns on, with the cluster token (--cluster-token-file)",
        ),
        Some(_) => next.run(request).await,
    }
}

/// `POST /internal/hub-turn`: a Hub turn another replica hands on for an agent this one runs.
/// Its answer streams as lines of JSON (`application/x-ndjson`).
pub(crate) async fn hub_turn(State(hub): State<Arc<Hub>>, body: Bytes) -> Response {
    let handed: HandedTurn = match serde_json::from_slice(&body) {
        Ok(handed) => handed,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("not a handed-on turn: {e}"),
            );
        }
    };
    let (tx, rx) = mpsc::channel::<Line>(8);
    tokio::spawn(hub.take_turn(handed, tx));
    let lines = futures_util::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(bytes)), rx))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// `POST /internal/artifact`: a stored file of this replica's artifacts' store, for another
/// replica (its bytes, or 404).
pub(crate) async fn artifact(State(hub): State<Arc<Hub>>, body: Bytes) -> Response {
    let asked = match serde_json::from_slice::<ArtifactAsked>(&body) {
        Ok(asked) if plain_path(&asked.path) => asked,
        _ => return error(StatusCode::BAD_REQUEST, "not a stored file's path"),
    };
    let bytes = tokio::fs::read(hub.artifacts.join(&asked.path)).await.ok();
    file(bytes, "not stored here")
}

/// `POST /internal/received`: a file an A2A peer sent that this replica wrote into an agent's
/// workspace, for the replica that runs the agent: its bytes if it is still as written (read
/// without following a link), or 404.
pub(crate) async fn received(State(hub): State<Arc<Hub>>, body: Bytes) -> Response {
    let Ok(asked) = serde_json::from_slice::<ReceivedAsked>(&body) else {
        return error(StatusCode::BAD_REQUEST, "not a received file");
    };
    let workspace = hub
        .policy()
        .agents
        .get(&asked.agent)
        .map(|a| a.workspace.clone());
    let read = tokio::task::spawn_blocking(move || {
        let workspace = workspace?;
        crate::tasks::artifacts::received_at(&asked.path)?;
        crate::tasks::artifacts::read_received(&workspace, &asked.path, &asked.sha256, asked.size)
    })
    .await
    .ok()
    .flatten();
    file(read, "not received here")
}

/// `POST /internal/hub-session`: a cancel, stop or close another replica hands on for a
/// session of an agent this one runs.
pub(crate) async fn hub_session(State(hub): State<Arc<Hub>>, body: Bytes) -> Response {
    match serde_json::from_slice::<SessionCall>(&body) {
        Ok(call) => axum::Json(hub.answer_session_call(call).await).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, &format!("not a session call: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_path_beneath_the_store_is_served() {
        assert!(plain_path("t-1/ab12"));
        assert!(plain_path("a2a-runs/r_1/ab12.x"));
        // A name of three dots is a name, not a way up.
        assert!(plain_path("t/..."));
        for bad in [
            "",
            "/etc/passwd",
            "t/../x",
            "./x",
            "t//x",
            "t/x/",
            "t/a b",
            "t/\\x",
        ] {
            assert!(!plain_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_turn_end_crosses_the_wire_whole() {
        let ends = [
            TurnEnd::Answered {
                text: "done".into(),
                stop_reason: Some(StopReason::InputRequired),
                runtime: Duration::from_micros(1234),
                files: vec![RemoteFile {
                    name: Some("a.bin".into()),
                    media_type: Some("application/octet-stream".into()),
                    bytes: Some(vec![0, 1, 255]),
                    url: None,
                }],
            },
            TurnEnd::Withdrawn("w".into()),
            TurnEnd::RuntimeDown("d".into()),
            TurnEnd::Uncertain("u".into()),
            TurnEnd::TimedOut("t".into()),
            TurnEnd::OverBudget("o".into()),
            TurnEnd::Failed("f".into()),
        ];
        for end in ends {
            let line = serde_json::to_string(&Line::End {
                end: end.clone().into(),
            })
            .unwrap();
            let Line::End { end: back } = serde_json::from_str(&line).unwrap() else {
                panic!("{line}");
            };
            assert_eq!(TurnEnd::from(back), end, "{line}");
        }
    }
}
