//! The gRPC binding (A2A 1.0, "gRPC Protocol Binding"; `proto/lf/a2a/v1/a2a.proto`, compiled by
//! `build.rs`): the service `lf.a2a.v1.A2AService` on the controller's listener (HTTP/2
//! cleartext, `http_server.rs`), beside the JSON-RPC and HTTP+JSON bindings.
//!
//! It has no semantics of its own. Each call passes the same door (the `authorization`
//! metadata's bearer token, the inbound policy, the route, the rate), its request becomes the
//! ProtoJSON the other bindings parse (pbjson's serde of the generated messages), and it runs
//! through `http::dispatch` in the HTTP+JSON binding's shape; the answer is read back into the
//! proto message. An error is the HTTP+JSON binding's `google.rpc.Status`, whose code name is
//! A2A's gRPC status ("Error Code Mappings"), with its `google.rpc.ErrorInfo` in the status
//! details. A stream is the HTTP+JSON binding's events, one message each; dropping it gives
//! the stream's slot back.
//!
//! The peer names an agent with the requests' `tenant` (an agent card's gRPC interface says
//! its agent id); no tenant is the hub's endpoint, routed by bindings.yaml like `/a2a/`.

use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::http::{BODY_LIMIT, Binding, Op, base_url, bearer, dispatch, refused, version_ok};
use super::wire::Wire;
use super::{A2a, Endpoint};

use crate::a2a_proto as pb;
use pb::a2a_service_server::{A2aService, A2aServiceServer};

/// The service's routes (`/lf.a2a.v1.A2AService/<Method>`), for the controller's router.
pub(super) fn router(a2a: Arc<A2a>) -> axum::Router {
    let server = A2aServiceServer::new(GrpcA2a { a2a }).max_decoding_message_size(BODY_LIMIT);
    // The service's own route only: a method it lacks is tonic's `UNIMPLEMENTED`; any other
    // path is the controller's.
    axum::Router::new()
        .route_service(
            &format!("/{}/{{*method}}", pb::a2a_service_server::SERVICE_NAME),
            server,
        )
        // HTTP/2 carries the host in `:authority`, which tonic's metadata does not keep: a
        // `host` header makes it the base of the URLs an answer names (`http::base_url`).
        .layer(axum::middleware::map_request(host_from_authority))
}

async fn host_from_authority(mut request: axum::extract::Request) -> axum::extract::Request {
    if !request.headers().contains_key(header::HOST)
        && let Some(authority) = request.uri().authority()
        && let Ok(v) = authority.as_str().parse()
    {
        request.headers_mut().insert(header::HOST, v);
    }
    request
}

struct GrpcA2a {
    a2a: Arc<A2a>,
}

/// What a call asks: one of the operations, or the extended card.
#[derive(Clone, Copy)]
enum Call {
    Op(Op),
    ExtendedCard,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::StreamResponse, Status>> + Send>>;

/// A request message with the tenant it names (empty: none).
trait Tenanted {
    fn tenant(&self) -> &str;
}

macro_rules! tenanted {
    ($($t:ty),*) => {$(
        impl Tenanted for $t {
            fn tenant(&self) -> &str {
                &self.tenant
            }
        }
    )*};
}

tenanted!(
    pb::SendMessageRequest,
    pb::GetTaskRequest,
    pb::ListTasksRequest,
    pb::CancelTaskRequest,
    pb::SubscribeToTaskRequest,
    pb::TaskPushNotificationConfig,
    pb::GetTaskPushNotificationConfigRequest,
    pb::ListTaskPushNotificationConfigsRequest,
    pb::DeleteTaskPushNotificationConfigRequest,
    pb::GetExtendedAgentCardRequest
);

impl GrpcA2a {
    /// The call through the door and the operations, answered as the HTTP+JSON binding
    /// answers it (the result's ProtoJSON, or a `google.rpc.Status`).
    async fn call<M: Serialize + Tenanted>(
        &self,
        request: tonic::Request<M>,
        call: Call,
    ) -> Response {
        let begun = std::time::Instant::now();
        let (metadata, _, message) = request.into_parts();
        let headers = metadata.into_headers();
        let tenant = message.tenant().to_string();
        let endpoint = if tenant.is_empty() {
            Endpoint::Routed
        } else {
            Endpoint::Agent(&tenant)
        };
        let mut caller = match self.a2a.admit(endpoint, bearer(&headers)).await {
            Ok(c) => c,
            Err(r) => return refused(r, &Binding::Rest),
        };
        caller.base = base_url(&headers);
        if let Err(e) = version_ok(&headers) {
            return Binding::Rest.answer(Err(e));
        }
        let op = match call {
            Call::Op(op) => op,
            Call::ExtendedCard => {
                let base = caller.base.clone();
                return Binding::Rest.answer(self.a2a.extended_card(&caller, &base));
            }
        };
        let mut params = match serde_json::to_value(&message) {
            Ok(p) => p,
            Err(e) => {
                return Binding::Rest.answer(Err(super::RpcError::internal(format!(
                    "cannot read the gRPC request as ProtoJSON: {e}"
                ))));
            }
        };
        // The tenant chose the endpoint; the operations do not take it.
        if let Some(p) = params.as_object_mut() {
            p.remove("tenant");
        }
        dispatch(
            &self.a2a,
            caller,
            Binding::Rest,
            Wire::V1,
            op,
            params,
            begun,
        )
        .await
    }

    async fn unary<M: Serialize + Tenanted, R: DeserializeOwned>(
        &self,
        request: tonic::Request<M>,
        call: Call,
    ) -> Result<tonic::Response<R>, Status> {
        let response = self.call(request, call).await;
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| Status::internal(format!("cannot read the answer: {e}")))?;
        if parts.status != StatusCode::OK {
            return Err(status_of(&bytes, &parts.headers));
        }
        let message = serde_json::from_slice::<R>(&bytes).map_err(|e| {
            Status::internal(format!(
                "the answer does not fit the gRPC binding's message: {e}"
            ))
        })?;
        let mut answer = tonic::Response::new(message);
        // A blocking send's `Server-Timing` (the hub's share, the agent's turn), as metadata.
        if let Some(timing) = parts.headers.get("server-timing")
            && let Ok(v) = timing.to_str()
            && let Ok(v) = MetadataValue::try_from(v)
        {
            answer.metadata_mut().insert("server-timing", v);
        }
        Ok(answer)
    }

    async fn streamed<M: Serialize + Tenanted>(
        &self,
        request: tonic::Request<M>,
        op: Op,
    ) -> Result<tonic::Response<EventStream>, Status> {
        let response = self.call(request, Call::Op(op)).await;
        let is_events = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if response.status() != StatusCode::OK || !is_events {
            let (parts, body) = response.into_parts();
            let bytes = axum::body::to_bytes(body, BODY_LIMIT)
                .await
                .map_err(|e| Status::internal(format!("cannot read the answer: {e}")))?;
            return Err(status_of(&bytes, &parts.headers));
        }
        Ok(tonic::Response::new(Box::pin(events(response.into_body()))))
    }
}

/// The HTTP+JSON binding's Server-Sent Events as stream messages: each event's data one
/// `StreamResponse`; an `error` event the stream's final status. The body (and the stream's
/// slot with it) lives as long as the stream.
fn events(body: Body) -> impl Stream<Item = Result<pb::StreamResponse, Status>> + Send {
    let state = (body.into_data_stream(), Vec::<u8>::new(), false);
    futures_util::stream::unfold(state, |(mut body, mut buffer, done)| async move {
        if done {
            return None;
        }
        loop {
            if let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = buffer.drain(..end + 2).collect();
                let Some((data, error)) = event_of(&block) else {
                    continue; // a keep-alive comment
                };
                if error {
                    let status = status_of(data.as_bytes(), &HeaderMap::new());
                    return Some((Err(status), (body, buffer, true)));
                }
                let item = serde_json::from_str::<pb::StreamResponse>(&data).map_err(|e| {
                    Status::internal(format!(
                        "an event does not fit the gRPC binding's StreamResponse: {e}"
                    ))
                });
                let done = item.is_err();
                return Some((item, (body, buffer, done)));
            }
            match body.next().await {
                Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    let status = Status::internal(format!("the task's events broke off: {e}"));
                    return Some((Err(status), (body, buffer, true)));
                }
                None => return None,
            }
        }
    })
}

/// An SSE event's data and whether it is an `error` event; `None` for one with no data.
fn event_of(block: &[u8]) -> Option<(String, bool)> {
    let text = std::str::from_utf8(block).ok()?;
    let mut data: Option<String> = None;
    let mut error = false;
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            let d = d.strip_prefix(' ').unwrap_or(d);
            match &mut data {
                Some(all) => {
                    all.push('\n');
                    all.push_str(d);
                }
                None => data = Some(d.to_string()),
            }
        } else if let Some(e) = line.strip_prefix("event:") {
            error = e.trim() == "error";
        }
    }
    data.map(|d| (d, error))
}

/// The HTTP+JSON binding's error body (`{"error": google.rpc.Status}`) as a gRPC status: its
/// code name is A2A's gRPC status, its `ErrorInfo` goes into the status details, and a
/// refusal's `Retry-After` and `WWW-Authenticate` into the metadata.
fn status_of(body: &[u8], headers: &HeaderMap) -> Status {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = &parsed["error"];
    let code = code_of(error["status"].as_str().unwrap_or("INTERNAL"));
    let message = error["message"]
        .as_str()
        .unwrap_or("the request failed (no message)")
        .to_string();
    let mut details = ErrorDetails::new();
    if let Some(info) = error["details"].as_array().and_then(|d| {
        d.iter()
            .find(|d| d["@type"].as_str() == Some("type.googleapis.com/google.rpc.ErrorInfo"))
    }) {
        let metadata: std::collections::HashMap<String, String> = info["metadata"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                        (k.clone(), v)
                    })
                    .collect()
            })
            .unwrap_or_default();
        details.set_error_info(
            info["reason"].as_str().unwrap_or_default(),
            info["domain"].as_str().unwrap_or_default(),
            metadata,
        );
    }
    let mut metadata = MetadataMap::new();
    for name in ["retry-after", "www-authenticate"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok())
            && let Ok(v) = MetadataValue::try_from(v)
        {
            metadata.insert(name, v);
        }
    }
    Status::with_error_details_and_metadata(code, message, details, metadata)
}

/// A `google.rpc.Code` by name.
fn code_of(name: &str) -> Code {
    match name {
        "INVALID_ARGUMENT" => Code::InvalidArgument,
        "NOT_FOUND" => Code::NotFound,
        "FAILED_PRECONDITION" => Code::FailedPrecondition,
        "UNAUTHENTICATED" => Code::Unauthenticated,
        "PERMISSION_DENIED" => Code::PermissionDenied,
        "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
        "UNIMPLEMENTED" => Code::Unimplemented,
        "ALREADY_EXISTS" => Code::AlreadyExists,
        "UNAVAILABLE" => Code::Unavailable,
        _ => Code::Internal,
    }
}

#[tonic::async_trait]
impl A2aService for GrpcA2a {
    async fn send_message(
        &self,
        request: tonic::Request<pb::SendMessageRequest>,
    ) -> Result<tonic::Response<pb::SendMessageResponse>, Status> {
        self.unary(request, Call::Op(Op::Send)).await
    }

    type SendStreamingMessageStream = EventStream;

    async fn send_streaming_message(
        &self,
        request: tonic::Request<pb::SendMessageRequest>,
    ) -> Result<tonic::Response<EventStream>, Status> {
        self.streamed(request, Op::Stream).await
    }

    async fn get_task(
        &self,
        request: tonic::Request<pb::GetTaskRequest>,
    ) -> Result<tonic::Response<pb::Task>, Status> {
        self.unary(request, Call::Op(Op::Get)).await
    }

    async fn list_tasks(
        &self,
        request: tonic::Request<pb::ListTasksRequest>,
    ) -> Result<tonic::Response<pb::ListTasksResponse>, Status> {
        self.unary(request, Call::Op(Op::List)).await
    }

    async fn cancel_task(
        &self,
        request: tonic::Request<pb::CancelTaskRequest>,
    ) -> Result<tonic::Response<pb::Task>, Status> {
        self.unary(request, Call::Op(Op::Cancel)).await
    }

    type SubscribeToTaskStream = EventStream;

    async fn subscribe_to_task(
        &self,
        request: tonic::Request<pb::SubscribeToTaskRequest>,
    ) -> Result<tonic::Response<EventStream>, Status> {
        self.streamed(request, Op::Subscribe).await
    }

    async fn create_task_push_notification_config(
        &self,
        request: tonic::Request<pb::TaskPushNotificationConfig>,
    ) -> Result<tonic::Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(request, Call::Op(Op::PushCreate)).await
    }

    async fn get_task_push_notification_config(
        &self,
        request: tonic::Request<pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<tonic::Response<pb::TaskPushNotificationConfig>, Status> {
        self.unary(request, Call::Op(Op::PushGet)).await
    }

    async fn list_task_push_notification_configs(
        &self,
        request: tonic::Request<pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<tonic::Response<pb::ListTaskPushNotificationConfigsResponse>, Status> {
        self.unary(request, Call::Op(Op::PushList)).await
    }

    async fn get_extended_agent_card(
        &self,
        request: tonic::Request<pb::GetExtendedAgentCardRequest>,
    ) -> Result<tonic::Response<pb::AgentCard>, Status> {
        self.unary(request, Call::ExtendedCard).await
    }

    async fn delete_task_push_notification_config(
        &self,
        request: tonic::Request<pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        let _: tonic::Response<Value> = self.unary(request, Call::Op(Op::PushDelete)).await?;
        Ok(tonic::Response::new(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::RpcError;

    /// Each A2A error as the gRPC status A2A's table gives ("Error Code Mappings"), with its
    /// reason in an `ErrorInfo` of domain `a2a-protocol.org`.
    #[test]
    fn every_a2a_error_is_the_specs_grpc_status_with_its_error_info() {
        let table = [
            (-32001, Code::NotFound, "TASK_NOT_FOUND"),
            (-32002, Code::FailedPrecondition, "TASK_NOT_CANCELABLE"),
            (
                -32003,
                Code::FailedPrecondition,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (-32004, Code::FailedPrecondition, "UNSUPPORTED_OPERATION"),
            (-32005, Code::InvalidArgument, "CONTENT_TYPE_NOT_SUPPORTED"),
            (-32006, Code::Internal, "INVALID_AGENT_RESPONSE"),
            (
                -32007,
                Code::FailedPrecondition,
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ),
            (
                -32008,
                Code::FailedPrecondition,
                "EXTENSION_SUPPORT_REQUIRED",
            ),
            (-32009, Code::FailedPrecondition, "VERSION_NOT_SUPPORTED"),
        ];
        for (code, grpc, reason) in table {
            let body = Binding::Rest.error_body(&RpcError::new(code, "what went wrong"));
            let status = status_of(body.to_string().as_bytes(), &HeaderMap::new());
            assert_eq!(status.code(), grpc, "{code}");
            assert_eq!(status.message(), "what went wrong");
            let info = status.get_details_error_info().expect("an ErrorInfo");
            assert_eq!(
                (info.reason.as_str(), info.domain.as_str()),
                (reason, "a2a-protocol.org")
            );
        }
        // Bad parameters: INVALID_ARGUMENT, no A2A reason.
        let body = Binding::Rest.error_body(&RpcError::invalid_params("`id` is required"));
        let status = status_of(body.to_string().as_bytes(), &HeaderMap::new());
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.get_details_error_info().is_none());
    }

    #[test]
    fn an_sse_block_is_its_data_and_whether_it_is_an_error() {
        assert_eq!(
            event_of(b"data: {\"task\":{}}\n\n"),
            Some(("{\"task\":{}}".to_string(), false))
        );
        assert_eq!(
            event_of(b"event: error\ndata: {\"error\":{}}\n\n"),
            Some(("{\"error\":{}}".to_string(), true))
        );
        assert_eq!(event_of(b":\n\n"), None);
    }
}
