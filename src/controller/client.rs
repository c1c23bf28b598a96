//! A client of the running controller, for commands that ask it rather than the state database
//! (`deepcli status`, live status in `agents list` and `channels status`). The controller is
//! found through the state: the lease says a controller holds it, the state records where it
//! listens, and the operator token authorizes the call.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Method, StatusCode, header};

use super::status::ControllerStatus;
use crate::state::{LeasePurpose, StateDir, StateStore};

/// The state key the controller records its address under.
pub(crate) const ADDR_KEY: &str = "controller_addr";
/// The state key of the pid of the controller that recorded [`ADDR_KEY`].
pub(crate) const PID_KEY: &str = "controller_pid";

/// How long a connection may take: a controller on loopback answers at once or not at all.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a running controller listens, and the token it takes.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    addr: SocketAddr,
    token: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("cannot reach the controller at {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the controller at {addr} did not answer within {seconds} s")]
    Timeout { addr: SocketAddr, seconds: u64 },
    #[error("talking to the controller at {addr}: {source}")]
    Http {
        addr: SocketAddr,
        source: reqwest::Error,
    },
    #[error("the controller answered {status}: {body}")]
    Refused { status: StatusCode, body: String },
    #[error("the controller's answer is not what this deepcli expects: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("cannot start a runtime to talk to the controller: {0}")]
    Runtime(std::io::Error),
    #[error("cannot build an HTTP client to talk to the controller: {0}")]
    Build(reqwest::Error),
}

impl Client {
    /// The controller that holds `store`'s lease, when one does and has recorded its address
    /// and a token is at hand; `None` otherwise (no controller runs on this state).
    pub(crate) fn find(dir: &StateDir, store: &StateStore) -> Option<Client> {
        let holder = store.lease_holder().ok().flatten()?;
        if holder.purpose != LeasePurpose::Controller {
            return None;
        }
        let addr = store.meta_value(ADDR_KEY).ok().flatten()?.parse().ok()?;
        let token = crate::state::read_operator_token(dir)?;
        Some(Client { addr, token })
    }

    /// Where the controller listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET /v1/status`.
    pub(crate) fn status(&self) -> Result<ControllerStatus, ClientError> {
        let body = self.call(Method::GET, "/v1/status", None)?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// `method path` with the operator token (and a JSON body), waiting for the answer; the
    /// body of a 2xx answer, else [`ClientError::Refused`].
    pub(crate) fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Bytes, ClientError> {
        self.call_within(method, path, body, ANSWER_TIMEOUT)
    }

    /// [`Client::call`] for an answer that may take `wait` (a message sent into a session
    /// waits for its reply).
    pub(crate) fn call_within(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        wait: Duration,
    ) -> Result<Bytes, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ClientError::Runtime)?;
        runtime.block_on(self.request(method, path, body, wait))
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        wait: Duration,
    ) -> Result<Bytes, ClientError> {
        let addr = self.addr;
        let failed = |e: reqwest::Error| {
            if e.is_connect() {
                let source = match crate::http_client::io_cause(&e) {
                    Some(io) => std::io::Error::new(io.kind(), io.to_string()),
                    None => std::io::ErrorKind::TimedOut.into(),
                };
                ClientError::Connect { addr, source }
            } else if e.is_timeout() {
                ClientError::Timeout {
                    addr,
                    seconds: wait.as_secs(),
                }
            } else {
                ClientError::Http { addr, source: e }
            }
        };
        let http = crate::http_client::direct()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(ClientError::Build)?;
        let mut request = http
            .request(method, format!("http://{addr}{path}"))
            .bearer_auth(&self.token)
            .timeout(wait);
        if let Some(body) = body {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let body = response.bytes().await.map_err(failed)?;
        if !status.is_success() {
            return Err(ClientError::Refused {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        Ok(body)
    }
}

/// The running controller's status, when a controller holds this state's lease and answers
/// (also what `agents list` and `channels status` show as live status).
pub(crate) fn controller_status(dir: &StateDir, store: &StateStore) -> Option<ControllerStatus> {
    Client::find(dir, store)?.status().ok()
}
