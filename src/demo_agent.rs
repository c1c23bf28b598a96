//! The demo ACP agent deepcli ships (`deepcli echo-agent`): it answers every prompt by echoing
//! it as an `agent_message_chunk`, and a prompt containing `sleep` waits until `session/cancel`.
//! It lets the quickstart run an `acp` runtime offline with nothing but the Rust toolchain.
//!
//! stdout carries the protocol: this module writes nothing else there, and logs to stderr.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, Implementation,
    InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PromptRequest,
    PromptResponse, SessionId, SessionNotification, SessionUpdate, StopReason,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tokio_util::sync::CancellationToken;

/// The cancellation token of each session's running turn.
type Turns = Arc<Mutex<HashMap<SessionId, CancellationToken>>>;

/// Serves ACP on stdin/stdout until stdin closes.
pub(crate) async fn serve() -> agent_client_protocol::Result<()> {
    let turns: Turns = Arc::default();
    let cancels = turns.clone();
    let sessions = Arc::new(AtomicU64::new(1));
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    Agent
        .v1()
        .name("deepcli-echo")
        .on_receive_request(
            async |req: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                responder.respond(
                    InitializeResponse::new(req.protocol_version)
                        .agent_capabilities(AgentCapabilities::new().load_session(false))
                        .agent_info(
                            Implementation::new("deepcli-echo", env!("CARGO_PKG_VERSION"))
                                .title("deepcli echo agent"),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest, responder: Responder<NewSessionResponse>, _cx| {
                let n = sessions.fetch_add(1, Ordering::Relaxed);
                responder.respond(NewSessionResponse::new(format!("echo-{n}")))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: Responder<PromptResponse>,
                        cx: ConnectionTo<Client>| {
                let token = CancellationToken::new();
                if let Ok(mut turns) = turns.lock() {
                    turns.insert(req.session_id.clone(), token.clone());
                }
                // Handlers run inside the dispatch loop: a turn that waits (for a cancel) runs
                // on its own, or the cancel could never be dispatched.
                let turns = turns.clone();
                cx.clone().spawn(async move {
                    let stop = turn(&cx, &req, &token).await?;
                    if let Ok(mut turns) = turns.lock() {
                        turns.remove(&req.session_id);
                    }
                    responder.respond(PromptResponse::new(stop))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                if let Some(token) = cancels
                    .lock()
                    .ok()
                    .and_then(|t| t.get(&n.session_id).cloned())
                {
                    token.cancel();
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

async fn turn(
    cx: &ConnectionTo<Client>,
    req: &PromptRequest,
    token: &CancellationToken,
) -> agent_client_protocol::Result<StopReason> {
    let text: Vec<&str> = req
        .prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    let text = text.join("\n");
    // A session's first prompt begins with deepcli's system section, and a chat message's
    // with its line saying who speaks and where: the echo is of the message.
    // `sessions::system::BEGIN` and `END` (this leaf uses no other module).
    let text = match text.find("[deepcli: end of the system section]") {
        Some(end) if text.starts_with("[deepcli: system section.") => text
            [end + "[deepcli: end of the system section]".len()..]
            .trim_start_matches('\n')
            .to_string(),
        _ => text,
    };
    let text = match text.split_once('\n') {
        // `access::prompt::HEADER_START` (this leaf uses no other module).
        Some((first, rest)) if first.starts_with("[deepcli: message from ") => rest.to_string(),
        _ => text,
    };
    if text.contains("sleep") {
        token.cancelled().await;
        return Ok(StopReason::Cancelled);
    }
    cx.send_notification(SessionNotification::new(
        req.session_id.clone(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(format!("echo: {text}").into())),
    ))?;
    Ok(StopReason::EndTurn)
}
