//! The Access endpoints (access.md, "HTTP API"): `POST /v1/inbound` (signed by a channel
//! account), `POST /v1/route` and `GET /v1/plan` (operator token). Every response that used a
//! routing plan names its generation in `X-Deepcli-Plan-Generation`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tracing::Instrument;

use super::{Access, AccessError, Delivered, Delivery, HandedInBy, Unauthenticated};
use crate::routing::RouteInput;
use crate::sessions::TurnError;

pub(crate) const GENERATION_HEADER: &str = "x-deepcli-plan-generation";
pub(crate) use super::auth::{SIGNATURE_HEADER, constant_time_eq};

#[derive(Clone)]
struct Ctx {
    access: Arc<Access>,
}

/// The Access routes, for the controller (or `access serve`) to mount: `/v1/inbound` for
/// anyone who can sign, the rest behind the operator token.
pub(crate) fn router(access: Arc<Access>, token: Arc<str>) -> Router {
    Router::new()
        .route("/v1/send", post(operator_send))
        .route("/v1/route", post(route))
        .route("/v1/plan", get(plan))
        .route_layer(axum::middleware::from_fn_with_state(
            (access.clone(), token),
            counted_operator,
        ))
        .route("/v1/inbound", post(inbound))
        .route("/internal/turn", post(handed_on))
        .with_state(Ctx { access })
}

/// [`require_operator`] for the Access routes, which count a refused call on their endpoint.
async fn counted_operator(
    State((access, token)): State<(Arc<Access>, Arc<str>)>,
    request: Request,
    next: Next,
) -> Response {
    match operator(&token, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => {
            let endpoint = match request.uri().path() {
                "/v1/send" => Some("send"),
                "/v1/route" => Some("route"),
                _ => None,
            };
            if let Some(endpoint) = endpoint {
                access.metrics.request(endpoint, denied.status().as_u16());
            }
            denied
        }
    }
}

/// Lets a request through only with the operator token (`Authorization: Bearer <token>`);
/// the 401 that says how to get it otherwise. The one check of every operator route: mount it
/// with [`operator_only`].
pub(crate) async fn require_operator(
    State(token): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    match operator(&token, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(denied) => denied,
    }
}

/// `routes`, each behind the operator token ([`require_operator`]).
pub(crate) fn operator_only<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    token: Arc<str>,
) -> Router<S> {
    routes.route_layer(axum::middleware::from_fn_with_state(
        token,
        require_operator,
    ))
}

/// The answer to a path no endpoint serves: JSON, like every other refusal.
pub(crate) async fn no_such_endpoint(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        None,
        json!({"error": format!("no endpoint `{method} {}`: see docs/access.md and docs/controller.md for the endpoints", uri.path())}),
    )
}

/// The answer to a method an endpoint does not take.
pub(crate) async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        json!({"error": format!("`{}` does not take `{method}`: see docs/access.md and docs/controller.md", uri.path())}),
    )
}

/// `Authorization: Bearer <operator token>`, or the 401 that says how to get it: what
/// [`require_operator`] checks.
pub(crate) fn operator(token: &str, headers: &HeaderMap) -> Result<(), Response> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(json_response(
            StatusCode::UNAUTHORIZED,
            None,
            json!({"error": "missing or wrong operator token: send `Authorization: Bearer <token>` (DEEPCLI_OPERATOR_TOKEN or <state>/operator-token)"}),
        )),
    }
}

fn json_response(status: StatusCode, generation: Option<u64>, body: Value) -> Response {
    // A budget's refusal says when to come back in the header HTTP clients read, too.
    let retry_after = (status == StatusCode::TOO_MANY_REQUESTS)
        .then(|| body["retryAfter"].as_u64())
        .flatten();
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some(g) = generation {
        response
            .headers_mut()
            .insert(GENERATION_HEADER, HeaderValue::from(g));
    }
    response
}

/// Reads the body up to the limit (413 over it), each chunk within the idle timeout (408).
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<axum::body::Bytes, AccessError> {
    use http_body_util::BodyExt;
    let mut body = http_body_util::Limited::new(body, limit);
    let mut bytes = bytes::BytesMut::new();
    loop {
        let frame = tokio::time::timeout(timeout, body.frame())
            .await
            .map_err(|_| AccessError::SlowBody {
                seconds: timeout.as_secs(),
            })?;
        match frame {
            None => return Ok(bytes.freeze()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    bytes.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => return Err(AccessError::TooLarge { limit }),
        }
    }
}

/// The response to a refusal. An unauthenticated caller learns nothing about the accounts: an
/// unknown account, one without a usable secret and a wrong signature answer alike; the
/// operator's log has the difference.
impl IntoResponse for AccessError {
    fn into_response(self) -> Response {
        let (status, body) = refusal(&self);
        json_response(status, None, body)
    }
}

fn refusal(e: &AccessError) -> (StatusCode, Value) {
    let said = |status: StatusCode| (status, json!({"error": e.to_string()}));
    match e {
        AccessError::NoPlan => said(StatusCode::SERVICE_UNAVAILABLE),
        AccessError::TooLarge { limit } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": e.to_string(), "limit": limit}),
        ),
        AccessError::SlowBody { .. } => said(StatusCode::REQUEST_TIMEOUT),
        AccessError::BadEnvelope { field, .. } => {
            let (status, mut body) = said(StatusCode::BAD_REQUEST);
            if let Some(field) = field {
                body["field"] = field.as_str().into();
            }
            (status, body)
        }
        AccessError::Unauthenticated(
            Unauthenticated::MissingSignature | Unauthenticated::MalformedSignature,
        ) => said(StatusCode::UNAUTHORIZED),
        AccessError::Unauthenticated(_) => {
            (StatusCode::UNAUTHORIZED, json!({"error": NOT_VERIFIED}))
        }
        AccessError::Disabled { .. } => said(StatusCode::FORBIDDEN),
        AccessError::Turn(turn) => match turn {
            TurnError::QueueFull { session_key, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                json!({"error": e.to_string(), "sessionKey": session_key}),
            ),
            TurnError::RuntimeDown {
                agent_id, status, ..
            } => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": e.to_string(), "agentId": agent_id, "runtimeStatus": status}),
            ),
            TurnError::RuntimeFailed { .. } => said(StatusCode::SERVICE_UNAVAILABLE),
            TurnError::SessionReused { .. } => said(StatusCode::BAD_GATEWAY),
            TurnError::TimedOut {
                stop_reason,
                confirmed,
                ..
            } => (
                StatusCode::GATEWAY_TIMEOUT,
                json!({
                    "error": e.to_string(), "cancelled": true, "stopReason": stop_reason,
                    "cancel": if *confirmed { "confirmed" } else { "uncertain" },
                    "state": "uncertain",
                }),
            ),
            TurnError::BudgetExceeded(refusal) => (
                StatusCode::TOO_MANY_REQUESTS,
                json!({
                    "error": e.to_string(), "reason": "budget_exceeded", "budget": refusal.limit,
                    "agentId": refusal.agent_id, "retryAfter": refusal.retry_after,
                }),
            ),
            TurnError::Withdrawn(_) => said(StatusCode::CONFLICT),
            // The engine's own failures (From<TurnError> makes them Internal; kept whole).
            TurnError::TakesNoPrompts { .. } | TurnError::Internal(_) => {
                said(StatusCode::INTERNAL_SERVER_ERROR)
            }
        },
        AccessError::Internal(_) => said(StatusCode::INTERNAL_SERVER_ERROR),
        AccessError::Forwarded { status, body, .. } => (
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
            body.clone(),
        ),
        AccessError::Elsewhere(_) => said(StatusCode::SERVICE_UNAVAILABLE),
    }
}

/// What an unauthenticated caller is told when the envelope's account did not verify it.
const NOT_VERIFIED: &str = "wrong `X-Deepcli-Signature`: it does not verify with the webhookSecret of the channel account the envelope names (the operator's log says why)";

/// `POST /v1/inbound`: an envelope signed by its channel account.
async fn inbound(State(cx): State<Ctx>, headers: HeaderMap, body: Body) -> Response {
    let access = &cx.access;
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    answer_envelope(
        access,
        body,
        HandedInBy::Signed(signature.as_deref()),
        false,
    )
    .await
}

/// `POST /internal/turn`: a message another replica took in for an agent that runs here
/// (docs/scale-out.md), with the cluster token and how the first replica was handed it. A
/// signed message is verified again here.
async fn handed_on(State(cx): State<Ctx>, headers: HeaderMap, body: Body) -> Response {
    let access = &cx.access;
    let Some(placement) = access.placement() else {
        let uri = axum::http::Uri::from_static("/internal/turn");
        return no_such_endpoint(axum::http::Method::POST, uri).await;
    };
    if !placement.admits(&headers) {
        return json_response(
            StatusCode::UNAUTHORIZED,
            None,
            json!({"error": "wrong or missing X-Deepcli-Cluster-Token: only the hub's replicas hand turns on, with the cluster token (--cluster-token-file)"}),
        );
    }
    let Some(caller) = super::placement::Placement::caller(&headers) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            None,
            json!({"error": "X-Deepcli-Caller is not `signed`, `operator` or `adapter`"}),
        );
    };
    answer_envelope(access, body, caller, true).await
}

/// `POST /v1/send`: an envelope the operator hands in (`deepcli inbound send`), authenticated
/// by the operator token instead of the account's signature.
async fn operator_send(State(cx): State<Ctx>, body: Body) -> Response {
    answer_envelope(&cx.access, body, HandedInBy::Operator, false).await
}

/// `handed_on`: another replica took the message in, and it is answered here.
async fn answer_envelope(
    access: &Arc<Access>,
    body: Body,
    caller: HandedInBy<'_>,
    handed_on: bool,
) -> Response {
    // One trace per message, from its request to its answer and reply.
    answer_traced(access, body, caller, handed_on)
        .instrument(crate::traces::inbound())
        .await
}

async fn answer_traced(
    access: &Arc<Access>,
    body: Body,
    caller: HandedInBy<'_>,
    handed_on: bool,
) -> Response {
    let settings = &access.settings;
    let (generation, outcome) =
        match read_body(body, settings.body_limit, settings.idle_timeout).await {
            Err(e) => (None, answered(access, &[], caller, Err(e)).await),
            Ok(bytes) => {
                let (generation, outcome) = if handed_on {
                    access.inbound_handed_on(&bytes, caller).await
                } else {
                    access.inbound(&bytes, caller).await
                };
                (generation, answered(access, &bytes, caller, outcome).await)
            }
        };
    match outcome {
        Ok(delivered) => {
            let mut response =
                (delivered_status(&delivered), axum::Json(delivered)).into_response();
            if let Some(g) = generation {
                response
                    .headers_mut()
                    .insert(GENERATION_HEADER, HeaderValue::from(g));
            }
            response
        }
        Err(e) => {
            let (status, body) = refusal_for(&e, caller);
            json_response(status, generation, body)
        }
    }
}

/// Hands in an envelope a platform adapter made (`HandedInBy::Adapter`): answered, counted and
/// logged on its channel like one POSTed to `/v1/inbound`. A refusal comes back whole: the
/// adapter tries a transient one again ([`AccessError::is_transient`]).
pub(crate) async fn hand_in(
    access: &Arc<Access>,
    envelope: &[u8],
) -> Result<Delivered, AccessError> {
    let (_, outcome) = access.inbound(envelope, HandedInBy::Adapter).await;
    answered(access, envelope, HandedInBy::Adapter, outcome).await
}

/// The status of a delivery's response: a message taken with nothing to answer is `202`;
/// one answered, gated (a platform must not retry it, policy.md) or answered before is `200`.
fn delivered_status(delivered: &Delivered) -> StatusCode {
    match delivered.delivery {
        Delivery::NotDelivered if !delivered.duplicate => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    }
}

/// The status and body of a refusal; the operator (and the controller's own adapters) are
/// told the whole reason an unauthenticated caller is not.
fn refusal_for(e: &AccessError, caller: HandedInBy<'_>) -> (StatusCode, Value) {
    let (status, mut body) = refusal(e);
    if let HandedInBy::Operator | HandedInBy::Adapter = caller {
        body["error"] = e.to_string().into();
    }
    (status, body)
}

/// Counts an envelope's outcome and logs one line about it on its channel.
async fn answered(
    access: &Arc<Access>,
    bytes: &[u8],
    caller: HandedInBy<'_>,
    outcome: Result<Delivered, AccessError>,
) -> Result<Delivered, AccessError> {
    let (status, line, channel) = match &outcome {
        Ok(delivered) => {
            let status = delivered_status(delivered);
            let route = &delivered.route;
            // Never the pairing code.
            let gate = match &delivered.delivery {
                Delivery::Gated { reason, rule, .. } => {
                    format!(" gated={reason} rule={}", rule.as_deref().unwrap_or("-"))
                }
                _ => String::new(),
            };
            let line = format!(
                "{} account={} session={} agent={} matchedBy={}{gate}{}",
                status.as_u16(),
                route.account_id.as_deref().unwrap_or("-"),
                delivered.session_key.as_deref().unwrap_or("-"),
                route.agent_id.as_deref().unwrap_or("-"),
                route.matched_by.as_deref().unwrap_or("-"),
                if delivered.duplicate {
                    " duplicate"
                } else {
                    ""
                },
            );
            (status, line, route.channel.clone())
        }
        Err(e) => {
            let (status, _) = refusal(e);
            // The log says it all: which account, and why it did not verify.
            (status, format!("{} {e}", status.as_u16()), None)
        }
    };
    let line = match crate::traces::current_id() {
        Some(trace) => format!("{line} trace={trace}"),
        None => line,
    };
    let endpoint = match caller {
        HandedInBy::Signed(_) => "inbound",
        HandedInBy::Operator => "send",
        HandedInBy::Adapter => "adapter",
    };
    access.metrics.request(endpoint, status.as_u16());
    // Logged on the channel the response names (a refusal names none): else the envelope's.
    let channel = channel.or_else(|| envelope_channel(bytes));
    access.log_call(channel.as_deref(), &line).await;
    outcome
}

/// The `channel` an envelope's body names, read leniently (it may be no envelope at all).
fn envelope_channel(bytes: &[u8]) -> Option<String> {
    let fields = serde_json::from_slice::<serde_json::Map<String, Value>>(bytes).ok()?;
    Some(fields.get("channel")?.as_str()?.to_string())
}

async fn route(State(cx): State<Ctx>, body: Body) -> Response {
    let access = &cx.access;
    let response = match read_body(
        body,
        access.settings.body_limit,
        access.settings.idle_timeout,
    )
    .await
    {
        Err(e) => e.into_response(),
        Ok(bytes) => match (access.plan(), serde_json::from_slice::<RouteInput>(&bytes)) {
            (None, _) => json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                json!({"error": "no routing plan is in force yet: the first apply has not finished"}),
            ),
            (Some(plan), Err(e)) => json_response(
                StatusCode::BAD_REQUEST,
                Some(plan.generation),
                json!({"error": format!("not a route input: {e}")}),
            ),
            (Some(plan), Ok(input)) => {
                let result = plan.routing.resolve(&input);
                access.metrics.route(result.matched_by.as_str());
                json_response(
                    StatusCode::OK,
                    Some(plan.generation),
                    serde_json::to_value(&result).unwrap_or_default(),
                )
            }
        },
    };
    access.metrics.request("route", response.status().as_u16());
    response
}

async fn plan(State(cx): State<Ctx>) -> Response {
    match cx.access.plan() {
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            json!({"error": "no routing plan is in force yet"}),
        ),
        Some(plan) => json_response(
            StatusCode::OK,
            Some(plan.generation),
            json!({
                "generation": plan.generation,
                "contentHash": plan.content_hash,
                "configHash": plan.config_hash,
                "loadedAt": plan.loaded_at,
                "agents": plan.agents,
                "bindings": plan.bindings,
                "accounts": plan.accounts.len(),
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The status of `GET path` on `app`, with `authorization` if given.
    async fn status(app: Router, path: &str, authorization: Option<&str>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let header = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: test\r\n{header}Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        server.abort();
        answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"))
    }

    fn app() -> Router {
        operator_only(
            Router::new().route("/operator", get(|| async { "in" })),
            Arc::from("s3cret"),
        )
        .route("/open", get(|| async { "open" }))
    }

    #[tokio::test]
    async fn an_operator_route_takes_only_the_operator_token() {
        assert_eq!(status(app(), "/operator", None).await, 401);
        assert_eq!(status(app(), "/operator", Some("Bearer wrong")).await, 401);
        assert_eq!(status(app(), "/operator", Some("Bearer s3cre")).await, 401);
        assert_eq!(
            status(app(), "/operator", Some("Bearer s3cret2")).await,
            401
        );
        assert_eq!(status(app(), "/operator", Some("s3cret")).await, 401);
        assert_eq!(status(app(), "/operator", Some("Bearer s3cret")).await, 200);
        // A route mounted beside it is not behind the token.
        assert_eq!(status(app(), "/open", None).await, 200);
    }

    /// An adapter tries again exactly what `/v1/inbound` answers with a status worth another
    /// try (503, 429, any 5xx).
    #[test]
    fn a_transient_refusal_is_one_whose_status_says_try_again() {
        use crate::sessions::{CancelWhy, Stage};
        let turn = |e: TurnError| AccessError::Turn(e);
        let errors = [
            AccessError::NoPlan,
            AccessError::TooLarge { limit: 1 },
            AccessError::SlowBody { seconds: 1 },
            AccessError::bad_field("text", "missing"),
            AccessError::Unauthenticated(Unauthenticated::MissingSignature),
            AccessError::Unauthenticated(Unauthenticated::WrongSignature {
                channel: "c".into(),
                account: "a".into(),
            }),
            AccessError::Disabled {
                channel: "c".into(),
                account: "a".into(),
            },
            AccessError::Internal("x".into()),
            turn(TurnError::QueueFull {
                session_key: "s".into(),
                limit: 1,
            }),
            turn(TurnError::RuntimeDown {
                agent_id: "a".into(),
                status: "starting",
                why: "x".into(),
            }),
            turn(TurnError::RuntimeFailed {
                agent_id: "a".into(),
                stage: Stage::Prompt,
                message: "x".into(),
            }),
            turn(TurnError::SessionReused {
                agent_id: "a".into(),
                session_id: "s".into(),
            }),
            turn(TurnError::TimedOut {
                agent_id: "a".into(),
                seconds: 1.0,
                stop_reason: None,
                confirmed: false,
                why: CancelWhy::Timeout,
            }),
            turn(TurnError::Withdrawn("x".into())),
            AccessError::from(TurnError::TakesNoPrompts {
                agent_id: "a".into(),
            }),
        ];
        for e in errors {
            let (status, _) = refusal(&e);
            let try_again = status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::TOO_MANY_REQUESTS
                || status.is_server_error();
            assert_eq!(e.is_transient(), try_again, "{e:?} answers {status}");
        }
    }

    #[test]
    fn a_delivery_taken_with_nothing_to_answer_is_202_anything_else_200() {
        let status = |body: Value| delivered_status(&Delivered::recorded(body.to_string()));
        let taken = json!({"reply": null, "duplicate": false, "delivered": false, "note": "x"});
        assert_eq!(status(taken.clone()), StatusCode::ACCEPTED);
        let mut again = taken;
        again["duplicate"] = true.into();
        assert_eq!(status(again), StatusCode::OK);
        assert_eq!(
            status(json!({"reply": {"text": "hi"}, "duplicate": false})),
            StatusCode::OK
        );
        assert_eq!(
            status(
                json!({"delivered": false, "gated": {"reason": "mention", "rule": "r"}, "reply": null, "duplicate": false})
            ),
            StatusCode::OK
        );
        assert_eq!(
            status(
                json!({"reply": null, "duplicate": false, "delivered": true, "state": "uncertain"})
            ),
            StatusCode::ACCEPTED
        );
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
