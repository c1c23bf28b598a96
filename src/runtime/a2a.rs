//! A remote A2A agent as a runtime (`runtime.kind: a2a`, docs/a2a.md). Supervision is reading
//! its Agent Card (`<url>/.well-known/agent-card.json`, else at the well-known place of the
//! URL's origin) now and every few seconds: a card that
//! names this URL with an A2A 1.0 interface — JSON-RPC, else HTTP+JSON, else gRPC — makes the
//! runtime `ready` (the status shows the card and the binding), anything else `failed` with the
//! reason. A ready remote is published in [`RemoteMap`] for the Access layer, which prompts it
//! ([`Remote::prompt`]: one `SendStreamingMessage` — `POST …/message:stream` over HTTP+JSON, a
//! server stream over gRPC — in the session's `contextId`, the reply streamed) and cancels it
//! ([`Remote::cancel`]: `CancelTask`, `POST …/tasks/<id>:cancel`), in the binding its card offers
//! at that URL. Whatever the binding, the task's events are read as ProtoJSON (a gRPC message is
//! turned into it by pbjson's serde), so one loop reads them all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::a2a_proto as pb;

use super::process::Reporter;
use super::{Phase, RuntimeSpec, StopAck};

/// How often a remote's card is read again.
pub(crate) const CARD_EVERY: Duration = Duration::from_secs(5);

/// The ready remotes by agent id, for the Access layer to deliver to.
pub(crate) type RemoteMap = Arc<Mutex<BTreeMap<String, Arc<Remote>>>>;

/// Where the push notifications of remote tasks come in (a remote that cannot stream, docs/a2a.md):
/// the webhooks open now, by id, each with the token its remote must send back, and the base
/// URL of the controller's listener that the webhooks' URLs start with.
#[derive(Clone, Default)]
pub(crate) struct PushHooks {
    base: Option<std::net::SocketAddr>,
    /// The listener's URL as others reach it (`--public-url`), when not at `base`.
    public: Option<url::Url>,
    open: Arc<Mutex<HashMap<String, Hook>>>,
}

struct Hook {
    token: String,
    updates: tokio::sync::mpsc::UnboundedSender<Value>,
}

/// What became of one push notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushTaken {
    Taken,
    /// No webhook by that id is open (never was, or its task's prompt ended).
    NoSuchHook,
    /// The `X-A2A-Notification-Token` is missing or not the one deepcli gave.
    WrongToken,
    /// The body is not a `StreamResponse` or a task.
    NotAnUpdate,
}

/// The path of a remote task's webhook on the controller's listener.
pub(crate) const PUSH_PATH: &str = "/a2a-remote-push";

impl PushHooks {
    /// Webhooks on the listener at `addr`, which their URLs name — or `public`, the URL others
    /// reach that listener at, when given.
    pub(crate) fn listening_on(addr: std::net::SocketAddr, public: Option<url::Url>) -> PushHooks {
        PushHooks {
            base: Some(addr),
            public,
            open: Arc::default(),
        }
    }

    /// Takes a push notification for webhook `id` that came with `token`.
    pub(crate) fn take(&self, id: &str, token: Option<&str>, body: &[u8]) -> PushTaken {
        let Ok(open) = self.open.lock() else {
            return PushTaken::NoSuchHook;
        };
        let Some(hook) = open.get(id) else {
            return PushTaken::NoSuchHook;
        };
        let same = token.is_some_and(|t| {
            subtle::ConstantTimeEq::ct_eq(t.as_bytes(), hook.token.as_bytes()).into()
        });
        if !same {
            return PushTaken::WrongToken;
        }
        let Ok(doc) = serde_json::from_slice::<Value>(body) else {
            return PushTaken::NotAnUpdate;
        };
        let update = if ["task", "statusUpdate", "artifactUpdate", "message"]
            .iter()
            .any(|k| doc.get(k).is_some())
        {
            doc
        } else if doc.get("id").is_some() && doc.get("status").is_some() {
            // A bare task (what some senders post): the task as it is now.
            json!({ "task": doc })
        } else {
            return PushTaken::NotAnUpdate;
        };
        let _ = hook.updates.send(update);
        PushTaken::Taken
    }

    /// A webhook for a task of the remote at `remote_url`: its URL, its token, its updates, and
    /// a guard that closes it. `None` when the remote could not reach the listener (no address
    /// yet, an unspecified one, or loopback while the remote is elsewhere).
    fn open_for(&self, remote_url: &str) -> Option<(String, String, OpenHook)> {
        let addr = self.base?;
        if self.public.is_none() && addr.ip().is_unspecified() {
            return None;
        }
        if self.public.is_none() && addr.ip().is_loopback() {
            let host = remote_url
                .parse::<tonic::codegen::http::Uri>()
                .ok()?
                .host()?
                .trim_matches(['[', ']'])
                .to_string();
            let local = host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if !local {
                return None;
            }
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let (updates, received) = tokio::sync::mpsc::unbounded_channel();
        self.open.lock().ok()?.insert(
            id.clone(),
            Hook {
                token: token.clone(),
                updates,
            },
        );
        let url = match &self.public {
            Some(public) => format!("{}{PUSH_PATH}/{id}", public.as_str().trim_end_matches('/')),
            None => format!("http://{addr}{PUSH_PATH}/{id}"),
        };
        Some((
            url,
            token,
            OpenHook {
                hooks: self.clone(),
                id,
                received,
            },
        ))
    }
}

/// An open webhook's updates; dropping it closes the webhook.
struct OpenHook {
    hooks: PushHooks,
    id: String,
    received: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Drop for OpenHook {
    fn drop(&mut self) {
        if let Ok(mut open) = self.hooks.open.lock() {
            open.remove(&self.id);
        }
    }
}

/// One remote A2A agent that answered with a good card.
pub(crate) struct Remote {
    pub agent_id: String,
    pub url: String,
    token: Option<secrecy::SecretString>,
    http: reqwest::Client,
    /// HTTP/2 (prior knowledge) for the gRPC binding; it connects when first used.
    grpc: GrpcChannel,
    /// Where a remote that cannot stream pushes its tasks' updates.
    hooks: PushHooks,
    /// The interface its card last offered at `url`.
    spoken: Mutex<Spoken>,
    /// The remote task each session's prompt is running as (for `CancelTask`).
    running: Mutex<HashMap<String, String>>,
    /// The remote task each session's last prompt left waiting for input (or authorization):
    /// the session's next message answers it, in that task (A2A: a message naming a task that
    /// waits for input continues it), not in a new one. Kept in the state: a restart keeps it.
    waits: Arc<super::remote_waits::RemoteWaits>,
}

/// tonic's client channel: hyper's client over HTTP/2 — in cleartext (prior knowledge) to an
/// `http://` remote, over TLS (rustls, the platform's roots, ALPN `h2`) to an `https://` one.
type GrpcChannel = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    tonic::body::Body,
>;

/// The largest gRPC message taken from a remote (an event carrying a task's file inline).
const GRPC_MESSAGE_LIMIT: usize = 64 << 20;

fn grpc_channel() -> Result<GrpcChannel, String> {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    // A unary call's trailers are not held back by Nagle's algorithm (a2a.md, Measured).
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    // `https` URIs go on to the TLS layer.
    connector.enforce_http(false);
    // One process-wide TLS provider: ring, as `http_client`'s.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .try_with_platform_verifier()
        .map_err(|e| format!("cannot load the platform's TLS roots for gRPC: {e}"))?
        .https_or_http()
        .enable_http2()
        .wrap_connector(connector);
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build(tls),
    )
}

/// The A2A binding deepcli speaks to a remote: the one its card offers at `runtime.url`, in
/// this order of preference (the order of the variants) when it offers more than one there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Wire {
    JsonRpc,
    HttpJson,
    Grpc,
}

impl Wire {
    fn of(binding: &str) -> Option<Wire> {
        if binding.eq_ignore_ascii_case("JSONRPC") {
            Some(Wire::JsonRpc)
        } else if binding.eq_ignore_ascii_case("HTTP+JSON") {
            Some(Wire::HttpJson)
        } else if binding.eq_ignore_ascii_case("GRPC") {
            Some(Wire::Grpc)
        } else {
            None
        }
    }

    fn name(self) -> &'static str {
        match self {
            Wire::JsonRpc => "JSONRPC",
            Wire::HttpJson => "HTTP+JSON",
            Wire::Grpc => "GRPC",
        }
    }
}

/// The interface of the card that deepcli speaks: its binding, the `tenant` it names (a gRPC
/// request carries it; the HTTP bindings' URL already names the agent), and whether the remote
/// streams (`capabilities.streaming`: only `false` says it does not).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spoken {
    wire: Wire,
    tenant: String,
    streaming: bool,
    /// `capabilities.pushNotifications: true`.
    push: bool,
}

impl Default for Spoken {
    fn default() -> Spoken {
        Spoken {
            wire: Wire::JsonRpc,
            tenant: String::new(),
            streaming: true,
            push: false,
        }
    }
}

/// A task's events as they arrive, each a `StreamResponse` in ProtoJSON; an error is
/// `(delivered, why)` as [`Remote::prompt`]'s.
type Events<'a> = std::pin::Pin<Box<dyn Stream<Item = Result<Value, (bool, String)>> + Send + 'a>>;

/// How long a remote that cannot stream is left before its task is read again: the first
/// wait, and the longest (each wait doubles).
const POLL_FIRST: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(5);
/// Reads of the task that may fail in a row before the task is given up as unknown.
const POLL_FAILURES: u32 = 3;

/// A call answered once: `SendMessage` (its params) or `GetTask` (the task's id).
enum Unary {
    Send(Value),
    Get(String),
}

/// How a remote task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteAnswer {
    /// The artifacts' text (or, when the task asks back or fails, its status message).
    pub text: String,
    /// The final A2A task state (`TASK_STATE_…`).
    pub state: String,
    /// The file parts of its artifacts (a task's assignee hands them in: tasks.md).
    pub files: Vec<RemoteFile>,
}

/// A file part a remote sent: its bytes when they came inline, else its URL (never fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteFile {
    pub name: Option<String>,
    pub media_type: Option<String>,
    pub bytes: Option<Vec<u8>>,
    pub url: Option<String>,
}

/// The file parts of `parts` (1.0 `raw`/`url`, 0.3 `file.bytes`/`file.uri`).
fn files_in(parts: Option<&Value>) -> Vec<RemoteFile> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for part in parts.and_then(Value::as_array).into_iter().flatten() {
        let (holder, bytes, url, media, name) = match part.get("file") {
            Some(f) if f.is_object() => (f, "bytes", "uri", "mimeType", "name"),
            _ if part.get("raw").is_some() || part.get("url").is_some() => {
                (part, "raw", "url", "mediaType", "filename")
            }
            _ => continue,
        };
        let s = |k: &str| {
            holder
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let config = base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
        let engine = base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, config);
        out.push(RemoteFile {
            name: s(name),
            media_type: s(media),
            bytes: s(bytes).and_then(|b| engine.decode(b).ok()),
            url: s(url),
        });
    }
    out
}

/// The `contextId` a session's messages go in: fixed per (agent, session key).
pub(crate) fn context_id(agent_id: &str, session_key: &str) -> String {
    let hash = crate::hash::of(format!("{agent_id}\n{session_key}").as_bytes());
    format!("deepcli-{}", &hash.trim_start_matches("sha256:")[..32])
}

/// The text of a remote's parts: text as it is; a data part as its JSON on a line of its own;
/// a file part as a line saying what arrived (its name, media type, size or URL, SHA-256 of
/// inline bytes) — its bytes are not kept (a2a.md), but never dropped without a word.
fn text_of(parts: Option<&Value>) -> String {
    let mut out = String::new();
    for part in parts.and_then(Value::as_array).into_iter().flatten() {
        let line = if let Some(t) = part.get("text").and_then(Value::as_str) {
            out.push_str(t);
            continue;
        } else if let Some(data) = part.get("data") {
            data.to_string()
        } else if let Some(file) = file_of(part) {
            file
        } else {
            continue;
        };
        // On a line of its own.
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
        out.push('\n');
    }
    if out.ends_with('\n')
        && parts
            .and_then(Value::as_array)
            .and_then(|p| p.last())
            .is_some_and(|p| p.get("text").is_none())
    {
        out.pop();
    }
    out
}

/// What a file part holds, said in one line; `None` when it is not one.
fn file_of(part: &Value) -> Option<String> {
    use base64::Engine as _;
    let (holder, bytes, url, media, name) = match part.get("file") {
        Some(f) if f.is_object() => (f, "bytes", "uri", "mimeType", "name"),
        _ if part.get("raw").is_some() || part.get("url").is_some() => {
            (part, "raw", "url", "mediaType", "filename")
        }
        _ => return None,
    };
    let s = |k: &str| {
        holder
            .get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let mut said = format!(
        "[file from the remote: `{}`, {}",
        s(name).unwrap_or("(no name)"),
        s(media).unwrap_or("no media type")
    );
    if let Some(b64) = s(bytes) {
        let config = base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent);
        match base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, config).decode(b64) {
            Ok(content) => said.push_str(&format!(
                ", {} bytes, sha256 {} — not kept by deepcli]",
                content.len(),
                crate::hash::of(&content).trim_start_matches("sha256:")
            )),
            Err(_) => said.push_str(", bytes that are not base64 — not kept by deepcli]"),
        }
    } else if let Some(url) = s(url) {
        said.push_str(&format!(", at {url} — not fetched by deepcli]"));
    } else {
        said.push_str(", empty]");
    }
    Some(said)
}

/// The public key a remote's Agent Card must be signed with (`runtime.cardKey`, a JWK).
#[derive(Debug, Clone)]
pub(crate) enum CardKey {
    /// ES256: the uncompressed point.
    P256(Vec<u8>),
    /// EdDSA.
    Ed25519(Vec<u8>),
    /// RS256 or PS256: modulus and exponent.
    Rsa { n: Vec<u8>, e: Vec<u8> },
}

impl CardKey {
    /// A JWK (JSON): `EC` on P-256, `OKP` on Ed25519, or `RSA`.
    pub(crate) fn parse(text: &str) -> Result<CardKey, String> {
        let jwk: Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("not a JWK (JSON): {e}"))?;
        let part = |name: &str| -> Result<Vec<u8>, String> {
            let text = jwk[name]
                .as_str()
                .ok_or_else(|| format!("the JWK has no `{name}`"))?;
            base64_url(text).map_err(|e| format!("the JWK's `{name}` is not base64url: {e}"))
        };
        match (jwk["kty"].as_str(), jwk["crv"].as_str()) {
            (Some("EC"), Some("P-256")) => {
                let mut point = vec![4];
                point.extend(part("x")?);
                point.extend(part("y")?);
                Ok(CardKey::P256(point))
            }
            (Some("OKP"), Some("Ed25519")) => Ok(CardKey::Ed25519(part("x")?)),
            (Some("RSA"), _) => Ok(CardKey::Rsa {
                n: part("n")?,
                e: part("e")?,
            }),
            (kty, crv) => Err(format!(
                "a JWK of kty {} and crv {} is not taken: give an EC P-256, an OKP Ed25519 or an RSA public key",
                kty.unwrap_or("(none)"),
                crv.unwrap_or("(none)")
            )),
        }
    }

    /// At least one of `card`'s signatures (A2A's `signatures`: JWS over the card without
    /// them, canonicalized by RFC 8785) verifies with this key.
    fn check(&self, card: &Value) -> Result<(), String> {
        use base64::Engine as _;
        let signatures = card["signatures"].as_array().cloned().unwrap_or_default();
        if signatures.is_empty() {
            return Err(
                "the agent card is not signed, and runtime.cardKey asks for a signature".into(),
            );
        }
        let mut unsigned = card.clone();
        if let Some(map) = unsigned.as_object_mut() {
            map.remove("signatures");
        }
        let payload = serde_jcs::to_vec(&unsigned)
            .map_err(|e| format!("the agent card cannot be canonicalized: {e}"))?;
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
        let mut why = Vec::new();
        for signature in &signatures {
            match self.verify(signature, &payload) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            }
        }
        Err(format!(
            "no signature of the agent card verifies with runtime.cardKey ({})",
            why.join("; ")
        ))
    }

    fn verify(&self, signature: &Value, payload: &str) -> Result<(), String> {
        use ring::signature as sig;
        let protected = signature["protected"].as_str().unwrap_or_default();
        let header: Value = base64_url(protected)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or("its protected header is not base64url JSON")?;
        let alg = header["alg"].as_str().unwrap_or_default();
        let bytes = base64_url(signature["signature"].as_str().unwrap_or_default())
            .map_err(|_| "its signature is not base64url".to_string())?;
        let input = format!("{protected}.{payload}");
        let checked = match (self, alg) {
            (CardKey::P256(point), "ES256") => {
                sig::UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point)
                    .verify(input.as_bytes(), &bytes)
            }
            (CardKey::Ed25519(key), "EdDSA" | "Ed25519") => {
                sig::UnparsedPublicKey::new(&sig::ED25519, key).verify(input.as_bytes(), &bytes)
            }
            (CardKey::Rsa { n, e }, "RS256") => sig::RsaPublicKeyComponents { n, e }.verify(
                &sig::RSA_PKCS1_2048_8192_SHA256,
                input.as_bytes(),
                &bytes,
            ),
            (CardKey::Rsa { n, e }, "PS256") => sig::RsaPublicKeyComponents { n, e }.verify(
                &sig::RSA_PSS_2048_8192_SHA256,
                input.as_bytes(),
                &bytes,
            ),
            (_, alg) => return Err(format!("alg `{alg}` is not the key's")),
        };
        checked.map_err(|_| format!("the {alg} signature does not verify"))
    }
}

fn base64_url(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text.trim_end_matches('='))
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// An interface's URL as a URL: a gRPC interface may name its target as `host:port`, which is
/// `http://host:port`.
fn interface_url(wire: Wire, url: &str) -> String {
    if wire == Wire::Grpc && !url.contains("://") {
        format!("http://{url}")
    } else {
        url.to_string()
    }
}

/// Checks a remote's card: it must offer JSON-RPC, HTTP+JSON or gRPC with protocol 1.0 at
/// `url`. The interface to speak, and what the status shows of the card.
fn check_card(card: &Value, url: &str) -> Result<(Spoken, Value), String> {
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let spoken: Vec<(Wire, &Value)> = interfaces
        .iter()
        .filter_map(|i| Some((Wire::of(i["protocolBinding"].as_str()?)?, i)))
        .collect();
    if spoken.is_empty() {
        return Err("the agent card offers no JSON-RPC, HTTP+JSON or gRPC interface (A2A 1.0 `supportedInterfaces` with `protocolBinding: JSONRPC`, `HTTP+JSON` or `GRPC`)".into());
    }
    let here: Vec<&(Wire, &Value)> = spoken
        .iter()
        .filter(|(w, i)| {
            i["url"]
                .as_str()
                .is_some_and(|u| same_url(&interface_url(*w, u), url))
        })
        .collect();
    if here.is_empty() {
        let named: Vec<String> = spoken
            .iter()
            .filter_map(|(w, i)| Some(format!("`{}` ({})", i["url"].as_str()?, w.name())))
            .collect();
        return Err(format!(
            "the agent card's urls are {} — not `runtime.url` {url}: fix runtime.url, or the remote's card",
            named.join(", ")
        ));
    }
    let current = |(_, i): &&&(Wire, &Value)| {
        i["protocolVersion"]
            .as_str()
            .is_some_and(|v| v == "1.0" || v.starts_with("1.0."))
    };
    let Some((wire, interface)) = here.iter().filter(current).min_by_key(|(w, _)| *w) else {
        return Err(
            "the agent card offers this url only in another protocol version than A2A 1.0".into(),
        );
    };
    let wire = *wire;
    let tenant = interface["tenant"].as_str().unwrap_or_default().to_string();
    let streaming = card["capabilities"]["streaming"].as_bool() != Some(false);
    let push = card["capabilities"]["pushNotifications"].as_bool() == Some(true);
    Ok((
        Spoken {
            wire,
            tenant,
            streaming,
            push,
        },
        json!({
            "card": {
                "name": card["name"],
                "description": card["description"],
                "version": card["version"],
                "url": url,
                "protocolVersion": "1.0",
                "protocolBinding": wire.name(),
                "streaming": card["capabilities"]["streaming"],
                "skills": card["skills"].as_array().map(|s| s.iter().filter_map(|k| k["id"].as_str()).collect::<Vec<_>>()),
            }
        }),
    ))
}

/// Why a prompt to a remote got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RemoteFailure {
    /// The remote did not take the message (unreachable, refused): nothing began.
    NotTaken(String),
    /// The stream broke after the remote took the message: it may have acted on it.
    Broken(String),
}

impl Remote {
    /// [`Remote::prompt`] with its failure typed.
    pub(crate) async fn ask(
        &self,
        session_key: &str,
        text: &str,
        files: &[super::PromptFile],
    ) -> Result<RemoteAnswer, RemoteFailure> {
        self.prompt(session_key, text, files)
            .await
            .map_err(|(delivered, why)| match delivered {
                true => RemoteFailure::Broken(why),
                false => RemoteFailure::NotTaken(why),
            })
    }
}

impl Remote {
    /// The remote's card: at `<url>/.well-known/agent-card.json` (a hub's agent, as deepcli
    /// serves its own), or where that is not found, at the well-known place of `url`'s origin
    /// (A2A's for a server of one agent).
    async fn card(&self, key: Option<&CardKey>) -> Result<Value, String> {
        let mut places = vec![format!(
            "{}/.well-known/agent-card.json",
            self.url.trim_end_matches('/')
        )];
        if let Ok(url) = url::Url::parse(&self.url)
            && let Ok(origin) = url.join("/.well-known/agent-card.json")
            && origin.as_str() != places[0]
        {
            places.push(origin.into());
        }
        let mut card = None;
        for (i, card_url) in places.iter().enumerate() {
            let response = self
                .http
                .get(card_url)
                .header("A2A-Version", "1.0")
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "cannot read the agent card at {card_url}: {}",
                        error_chain(&e)
                    )
                })?;
            let status = response.status();
            if status == reqwest::StatusCode::NOT_FOUND && i + 1 < places.len() {
                continue;
            }
            if !status.is_success() {
                let also = if i > 0 {
                    format!(" ({} answered 404)", places[0])
                } else {
                    String::new()
                };
                return Err(format!(
                    "the agent card at {card_url} answered {status}{also}"
                ));
            }
            card = Some(
                response
                    .json::<Value>()
                    .await
                    .map_err(|e| format!("the agent card at {card_url} is not JSON: {e}"))?,
            );
            break;
        }
        let Some(card) = card else {
            return Err(format!("no agent card at {}", places.join(" or ")));
        };
        if let Some(key) = key {
            key.check(&card)?;
        }
        let (spoken, mut info) = check_card(&card, &self.url)?;
        if key.is_some() {
            info["card"]["signatureVerified"] = json!(true);
        }
        if let Ok(mut w) = self.spoken.lock() {
            *w = spoken;
        }
        Ok(info)
    }

    fn spoken(&self) -> Spoken {
        self.spoken.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// A request to `url` (JSON-RPC), or to `path` under it (HTTP+JSON).
    fn post(&self, wire: Wire, path: &str, body: &Value, stream: bool) -> reqwest::RequestBuilder {
        let url = match wire {
            Wire::HttpJson => format!("{}/{path}", self.url.trim_end_matches('/')),
            Wire::JsonRpc | Wire::Grpc => self.url.clone(),
        };
        let mut req = self
            .http
            .post(url)
            .header("A2A-Version", "1.0")
            .header(
                "Accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(body);
        if let Some(token) = &self.token {
            req = req.bearer_auth(secrecy::ExposeSecret::expose_secret(token));
        }
        req
    }

    /// Sends `text` as a message in session `session_key`'s context, with `files` as file
    /// parts (their bytes inline; a file whose bytes are gone is left to the text's line), and
    /// streams the task to its end (or until it asks back). Errors: `Err((delivered, why))`,
    /// `delivered` when the remote may have started on it.
    pub(crate) async fn prompt(
        &self,
        session_key: &str,
        text: &str,
        files: &[super::PromptFile],
    ) -> Result<RemoteAnswer, (bool, String)> {
        use base64::Engine as _;
        let context = context_id(&self.agent_id, session_key);
        let spoken = self.spoken();
        let mut parts = vec![json!({"text": text})];
        for file in files {
            let Some(bytes) = &file.bytes else { continue };
            let mut part = json!({
                "raw": base64::engine::general_purpose::STANDARD.encode(bytes),
                "filename": file.name,
            });
            if let Some(media) = &file.media_type {
                part["mediaType"] = json!(media);
            }
            parts.push(part);
        }
        let mut message = json!({
            "messageId": uuid::Uuid::new_v4().to_string(),
            "role": "ROLE_USER",
            "contextId": context,
            "parts": parts,
        });
        let answers = self.waiting(session_key, None).await;
        if let Some(task) = &answers {
            message["taskId"] = json!(task);
        }
        let params = json!({ "message": message });
        let mut events = match spoken.wire {
            _ if !spoken.streaming => self.send_and_poll(&spoken, params).await?,
            Wire::Grpc => self.stream_grpc(&spoken.tenant, params).await?,
            wire => self.stream_sse(wire, params).await?,
        };
        let mut reply = String::new();
        let mut files = Vec::new();
        let mut task_id: Option<String> = None;
        let mut first = true;
        let mut standing: Option<Value> = None;
        let result = loop {
            let r = match events.next().await {
                Some(Ok(r)) => r,
                Some(Err(e)) => break Err(e),
                None => {
                    break Err((
                        true,
                        "the remote closed the stream before the task ended".to_string(),
                    ));
                }
            };
            let (task, status) = if let Some(t) = r.get("task") {
                // A completed task is whole: its artifacts are the reply (a remote polled, or
                // one that ends its stream with the task).
                if t["status"]["state"].as_str() == Some("TASK_STATE_COMPLETED")
                    && let Some(artifacts) = t["artifacts"].as_array().filter(|a| !a.is_empty())
                {
                    let texts: Vec<String> =
                        artifacts.iter().map(|a| text_of(a.get("parts"))).collect();
                    reply = texts.join("\n");
                    files = artifacts
                        .iter()
                        .flat_map(|a| files_in(a.get("parts")))
                        .collect();
                }
                (t["id"].as_str(), Some(&t["status"]))
            } else if let Some(u) = r.get("statusUpdate") {
                (u["taskId"].as_str(), Some(&u["status"]))
            } else if let Some(a) = r.get("artifactUpdate") {
                if !a["append"].as_bool().unwrap_or(false) && !reply.is_empty() {
                    reply.push('\n');
                }
                reply.push_str(&text_of(a["artifact"].get("parts")));
                files.extend(files_in(a["artifact"].get("parts")));
                (a["taskId"].as_str(), None)
            } else if let Some(m) = r.get("message") {
                // A reply without a task: it is the whole answer.
                break Ok(RemoteAnswer {
                    text: text_of(m.get("parts")),
                    state: "TASK_STATE_COMPLETED".into(),
                    files: files_in(m.get("parts")),
                });
            } else {
                (None, None)
            };
            if let Some(id) = task
                && task_id.as_deref() != Some(id)
            {
                task_id = Some(id.to_string());
                if let Ok(mut running) = self.running.lock() {
                    running.insert(session_key.to_string(), id.to_string());
                }
            }
            // The task as it stands opens the stream: one that waited for this answer still
            // says so there, and is not asking again — nor is the same status read again from
            // the task (a remote polled).
            if std::mem::take(&mut first)
                && r.get("task").is_some()
                && answers.is_some()
                && task == answers.as_deref()
            {
                standing = status.cloned();
            }
            if let Some(status) = status {
                let state = status["state"].as_str().unwrap_or_default().to_string();
                let asked_before = r.get("task").is_some()
                    && standing.as_ref() == Some(status)
                    && matches!(
                        state.as_str(),
                        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
                    );
                if !asked_before
                    && matches!(
                        state.as_str(),
                        "TASK_STATE_COMPLETED"
                            | "TASK_STATE_FAILED"
                            | "TASK_STATE_CANCELED"
                            | "TASK_STATE_REJECTED"
                            | "TASK_STATE_INPUT_REQUIRED"
                            | "TASK_STATE_AUTH_REQUIRED"
                    )
                {
                    let said = text_of(status["message"].get("parts"));
                    let text = if state == "TASK_STATE_COMPLETED" || said.is_empty() {
                        std::mem::take(&mut reply)
                    } else {
                        said
                    };
                    let files = std::mem::take(&mut files);
                    break Ok(RemoteAnswer { text, state, files });
                }
            }
        };
        if let Ok(mut running) = self.running.lock() {
            running.remove(session_key);
        }
        if let (Ok(answer), Some(task)) = (&result, task_id)
            && matches!(
                answer.state.as_str(),
                "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
            )
        {
            self.waiting(session_key, Some(task)).await;
        }
        result
    }

    /// Session `session_key`'s remote task waiting for input: taken (it is being answered), or
    /// with `Some(task)` recorded. A store that fails is said in the log: the answer then goes
    /// as a new task.
    async fn waiting(&self, session_key: &str, task: Option<String>) -> Option<String> {
        let (waits, agent, key) = (
            self.waits.clone(),
            self.agent_id.clone(),
            session_key.to_string(),
        );
        let done = tokio::task::spawn_blocking(move || match task {
            Some(task) => waits.wait(&agent, &key, &task).map(|()| None),
            None => waits.take(&agent, &key),
        })
        .await;
        match done {
            Ok(Ok(task)) => task,
            Ok(Err(e)) => {
                tracing::warn!(agent = %self.agent_id, error = %e, "a2a remote: the task waiting for input was not kept");
                None
            }
            Err(_) => None,
        }
    }

    /// `SendStreamingMessage` over JSON-RPC or HTTP+JSON: the Server-Sent Events of its answer,
    /// each event's `StreamResponse` (JSON-RPC wraps it in `result`; HTTP+JSON sends it bare).
    async fn stream_sse(&self, wire: Wire, params: Value) -> Result<Events<'_>, (bool, String)> {
        let body = match wire {
            Wire::JsonRpc => json!({
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": params,
            }),
            _ => params,
        };
        let response = self
            .post(wire, "message:stream", &body, true)
            .send()
            .await
            .map_err(|e| {
                (
                    false,
                    format!("cannot reach {}: {}", self.url, error_chain(&e)),
                )
            })?;
        let status = response.status();
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() || !is_sse {
            let text = response.text().await.unwrap_or_default();
            let why = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(300).collect());
            return Err((false, format!("the remote answered {status}: {why}")));
        }
        use eventsource_stream::{EventStreamError, Eventsource};
        let events = response.bytes_stream().eventsource().map(move |event| {
            let data = match event {
                Ok(event) => event.data,
                Err(EventStreamError::Transport(e)) => {
                    return Err((true, format!("the stream broke: {}", error_chain(&e))));
                }
                Err(e) => return Err((true, format!("the stream broke: {e}"))),
            };
            let Ok(mut doc) = serde_json::from_str::<Value>(&data) else {
                return Err((
                    true,
                    format!(
                        "the remote sent an event that is not JSON: {}",
                        data.chars().take(200).collect::<String>()
                    ),
                ));
            };
            if let Some(e) = doc.get("error") {
                return Err((
                    true,
                    format!("the remote: {}", e["message"].as_str().unwrap_or("error")),
                ));
            }
            Ok(match wire {
                Wire::JsonRpc => doc.get_mut("result").map(Value::take).unwrap_or_default(),
                _ => doc,
            })
        });
        Ok(Box::pin(events))
    }

    /// `SendStreamingMessage` over gRPC: the server stream's messages as ProtoJSON.
    async fn stream_grpc(&self, tenant: &str, params: Value) -> Result<Events<'_>, (bool, String)> {
        let mut request: pb::SendMessageRequest = serde_json::from_value(params)
            .map_err(|e| (false, format!("cannot make the gRPC message: {e}")))?;
        request.tenant = tenant.to_string();
        let mut client = self.grpc_client().map_err(|why| (false, why))?;
        let stream = client
            .send_streaming_message(self.grpc_request(request))
            .await
            .map_err(|status| (false, format!("the remote answered {}", said(&status))))?
            .into_inner();
        let events = stream.map(|item| match item {
            Ok(event) => serde_json::to_value(&event)
                .map_err(|e| (true, format!("the remote's event cannot be read: {e}"))),
            Err(status) => Err((true, format!("the stream broke: {}", said(&status)))),
        });
        Ok(Box::pin(events))
    }

    /// A remote that cannot stream: `SendMessage` answering at once (`returnImmediately`), then
    /// the task's updates as the remote pushes them to a webhook of its own (when its card
    /// offers push notifications and it can reach the listener), and its task read again
    /// (`GetTask`) after 100 ms, 200 ms, … up to every 5 s (with a webhook: every 5 s, in case
    /// an update is lost), each update or read an event until the task stops working. A read
    /// that fails three times in a row ends it: what the remote did is then unknown.
    async fn send_and_poll(
        &self,
        spoken: &Spoken,
        mut params: Value,
    ) -> Result<Events<'_>, (bool, String)> {
        params["configuration"] = json!({"returnImmediately": true});
        let mut hook = spoken
            .push
            .then(|| self.hooks.open_for(&self.url))
            .flatten();
        let mut with_hook = params.clone();
        if let Some((url, token, _)) = &hook {
            with_hook["configuration"]["taskPushNotificationConfig"] =
                json!({"url": url, "token": token});
        }
        let sent = match self.unary(spoken, Unary::Send(with_hook)).await {
            Ok(sent) => sent,
            // A remote that refuses the webhook (its own guard against private targets, say)
            // took no message: it is sent again without one, and its task read back.
            Err(_) if hook.is_some() => {
                hook = None;
                self.unary(spoken, Unary::Send(params))
                    .await
                    .map_err(|why| (false, why))?
            }
            Err(why) => return Err((false, why)),
        };
        let Some(task) = sent["task"]["id"].as_str().map(str::to_string) else {
            // A message (or nothing to follow): the whole answer.
            return Ok(Box::pin(futures_util::stream::iter([Ok(sent)])));
        };
        let spoken = spoken.clone();
        let first_wait = if hook.is_some() { POLL_MAX } else { POLL_FIRST };
        let reads = futures_util::stream::unfold((first_wait, 0u32), move |(wait, failed)| {
            let (spoken, task) = (spoken.clone(), task.clone());
            async move {
                let mut failed = failed;
                let mut wait = wait;
                loop {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(POLL_MAX);
                    match self.unary(&spoken, Unary::Get(task.clone())).await {
                        Ok(read) => return Some((Ok(read), (wait, 0))),
                        Err(why) => {
                            failed += 1;
                            if failed >= POLL_FAILURES {
                                let why = format!("the task cannot be read: {why}");
                                return Some((Err((true, why)), (wait, failed)));
                            }
                        }
                    }
                }
            }
        });
        let sent = futures_util::stream::iter([Ok(sent)]);
        let Some((_, _, hook)) = hook else {
            return Ok(Box::pin(sent.chain(reads)));
        };
        // The webhook stays open as long as the stream: the hook is its state.
        let pushed = futures_util::stream::unfold(hook, |mut hook| async move {
            let update = hook.received.recv().await?;
            Some((Ok(update), hook))
        });
        Ok(Box::pin(
            sent.chain(futures_util::stream::select(pushed, reads)),
        ))
    }

    /// A call answered once, in the spoken binding: its result as ProtoJSON (`GetTask`'s task
    /// as a `StreamResponse`, `{"task": …}`), or why there is none.
    async fn unary(&self, spoken: &Spoken, call: Unary) -> Result<Value, String> {
        if spoken.wire == Wire::Grpc {
            let mut client = self.grpc_client()?;
            let answered = match call {
                Unary::Send(params) => {
                    let mut request: pb::SendMessageRequest = serde_json::from_value(params)
                        .map_err(|e| format!("cannot make the gRPC message: {e}"))?;
                    request.tenant.clone_from(&spoken.tenant);
                    let call = client.send_message(self.grpc_request(request));
                    match tokio::time::timeout(Duration::from_secs(30), call).await {
                        Ok(Ok(r)) => serde_json::to_value(r.into_inner()),
                        Ok(Err(status)) => {
                            return Err(format!("the remote answered {}", said(&status)));
                        }
                        Err(_) => return Err("the remote did not answer within 30 s".into()),
                    }
                }
                Unary::Get(id) => {
                    let request = pb::GetTaskRequest {
                        tenant: spoken.tenant.clone(),
                        id,
                        ..Default::default()
                    };
                    let call = client.get_task(self.grpc_request(request));
                    match tokio::time::timeout(Duration::from_secs(30), call).await {
                        Ok(Ok(r)) => {
                            serde_json::to_value(r.into_inner()).map(|t| json!({"task": t}))
                        }
                        Ok(Err(status)) => {
                            return Err(format!("the remote answered {}", said(&status)));
                        }
                        Err(_) => return Err("the remote did not answer within 30 s".into()),
                    }
                }
            };
            return answered.map_err(|e| format!("the remote's answer cannot be read: {e}"));
        }
        let request = match (&call, spoken.wire) {
            (Unary::Send(params), Wire::JsonRpc) => self.post(
                Wire::JsonRpc,
                "",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}),
                false,
            ),
            (Unary::Get(id), Wire::JsonRpc) => self.post(
                Wire::JsonRpc,
                "",
                &json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}}),
                false,
            ),
            (Unary::Send(params), _) => self.post(Wire::HttpJson, "message:send", params, false),
            (Unary::Get(id), _) => {
                let url = format!("{}/tasks/{id}", self.url.trim_end_matches('/'));
                let mut req = self.http.get(url).header("A2A-Version", "1.0");
                if let Some(token) = &self.token {
                    req = req.bearer_auth(secrecy::ExposeSecret::expose_secret(token));
                }
                req
            }
        };
        let response = request
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| format!("cannot reach {}: {}", self.url, error_chain(&e)))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let doc: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if let Some(why) = doc["error"]["message"].as_str() {
            return Err(format!("the remote answered {status}: {why}"));
        }
        if !status.is_success() || doc.is_null() {
            let text: String = text.chars().take(300).collect();
            return Err(format!("the remote answered {status}: {text}"));
        }
        let result = match spoken.wire {
            Wire::JsonRpc => doc["result"].clone(),
            _ => doc,
        };
        Ok(match call {
            Unary::Get(_) => json!({ "task": result }),
            Unary::Send(_) => result,
        })
    }

    /// A gRPC client of the remote: `url`'s scheme and authority are the origin.
    fn grpc_client(&self) -> Result<pb::a2a_service_client::A2aServiceClient<GrpcChannel>, String> {
        let uri: tonic::codegen::http::Uri = self
            .url
            .parse()
            .map_err(|e| format!("runtime.url {} is not a URL: {e}", self.url))?;
        let origin = tonic::codegen::http::Uri::builder()
            .scheme(uri.scheme_str().unwrap_or("http"))
            .authority(uri.authority().map_or("", |a| a.as_str()))
            .path_and_query("/")
            .build()
            .map_err(|e| format!("runtime.url {} has no host: {e}", self.url))?;
        Ok(
            pb::a2a_service_client::A2aServiceClient::with_origin(self.grpc.clone(), origin)
                .max_decoding_message_size(GRPC_MESSAGE_LIMIT),
        )
    }

    /// `message` with the metadata every call carries: the protocol version, the token.
    fn grpc_request<M>(&self, message: M) -> tonic::Request<M> {
        let mut request = tonic::Request::new(message);
        let metadata = request.metadata_mut();
        metadata.insert(
            "a2a-version",
            tonic::metadata::MetadataValue::from_static("1.0"),
        );
        if let Some(token) = &self.token
            && let Ok(v) = format!("Bearer {}", secrecy::ExposeSecret::expose_secret(token)).parse()
        {
            metadata.insert("authorization", v);
        }
        request
    }

    /// Asks the remote to cancel the task session `session_key`'s prompt runs as
    /// (`CancelTask`); whether the remote took the request.
    pub(crate) async fn cancel(&self, session_key: &str) -> bool {
        let task = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(session_key).cloned());
        let Some(task) = task else {
            return false;
        };
        let spoken = self.spoken();
        let (path, body) = match spoken.wire {
            Wire::JsonRpc => (
                String::new(),
                json!({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task}}),
            ),
            Wire::HttpJson => (format!("tasks/{task}:cancel"), json!({})),
            Wire::Grpc => {
                let Ok(mut client) = self.grpc_client() else {
                    return false;
                };
                let request = pb::CancelTaskRequest {
                    tenant: spoken.tenant,
                    id: task,
                    ..Default::default()
                };
                let call = client.cancel_task(self.grpc_request(request));
                return matches!(
                    tokio::time::timeout(Duration::from_secs(10), call).await,
                    Ok(Ok(_))
                );
            }
        };
        match self
            .post(spoken.wire, &path, &body, false)
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }
}

/// A gRPC status as a reason: its code and message.
fn said(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

/// Keeps one remote's card checked until told to stop; publishes it while its card is good.
pub(super) async fn supervise(
    spec: RuntimeSpec,
    mut stop: oneshot::Receiver<StopAck>,
    mut report: Reporter,
    remotes: RemoteMap,
    (hooks, waits): (PushHooks, Arc<super::remote_waits::RemoteWaits>),
    every: Duration,
) {
    let Some(url) = spec.url.clone() else {
        report.publish(|s| {
            s.status = Phase::Failed;
            s.last_error = Some("runtime.kind a2a without `url`".into());
        });
        let _ = stop.await.map(|ack| ack.send(()));
        return;
    };
    let token = match &spec.token {
        None => Ok(None),
        Some(r) => crate::runtime::resolve_token(r).map(Some),
    };
    // A public key: written inline in agents.yaml, or where a reference says.
    let card_key = match &spec.card_key {
        None => Ok(None),
        Some(crate::config::model::Secret::Inline(jwk)) => CardKey::parse(jwk).map(Some),
        Some(r) => crate::runtime::resolve_token(r)
            .and_then(|text| CardKey::parse(secrecy::ExposeSecret::expose_secret(&text)))
            .map(Some),
    };
    let http = crate::http_client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    let grpc = match grpc_channel() {
        Ok(grpc) => grpc,
        Err(e) => {
            report.publish(|s| {
                s.status = Phase::Failed;
                s.last_error = Some(e);
            });
            let _ = stop.await.map(|ack| ack.send(()));
            return;
        }
    };
    let remote = Arc::new(Remote {
        agent_id: spec.agent_id.clone(),
        url,
        token: token.clone().ok().flatten(),
        http,
        grpc,
        hooks,
        spoken: Mutex::new(Spoken::default()),
        running: Mutex::new(HashMap::new()),
        waits,
    });
    report.publish(|s| s.started_at = Some(crate::clock::now()));
    loop {
        let checked = match (&token, &card_key) {
            (Err(e), _) => Err(format!("runtime.token: {e}")),
            (_, Err(e)) => Err(format!("runtime.cardKey: {e}")),
            (Ok(_), Ok(key)) => remote.card(key.as_ref()).await,
        };
        match checked {
            Ok(info) => {
                if let Ok(mut map) = remotes.lock() {
                    map.insert(spec.agent_id.clone(), remote.clone());
                }
                report.publish(|s| {
                    s.status = Phase::Ready;
                    s.info = Some(info);
                    s.last_error = None;
                });
            }
            Err(why) => {
                if let Ok(mut map) = remotes.lock() {
                    map.remove(&spec.agent_id);
                }
                if report.current.last_error.as_deref() != Some(why.as_str()) {
                    tracing::warn!(agent = %spec.agent_id, error = %why, "A2A remote not usable");
                }
                report.publish(|s| {
                    s.status = Phase::Failed;
                    s.last_error = Some(why);
                });
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            ack = &mut stop => {
                if let Ok(mut map) = remotes.lock() {
                    map.remove(&spec.agent_id);
                }
                report.publish(|s| s.status = Phase::Stopped);
                if let Ok(ack) = ack {
                    let _ = ack.send(());
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(url: &str, version: &str) -> Value {
        json!({"name": "R", "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": version},
        ]})
    }

    #[test]
    fn a_card_must_name_this_url_with_a2a_1_0() {
        assert_eq!(
            check_card(&card("http://h/a2a/", "1.0"), "http://h/a2a")
                .unwrap()
                .0
                .wire,
            Wire::JsonRpc
        );
        let wrong = check_card(&card("http://other/a2a", "1.0"), "http://h/a2a").unwrap_err();
        assert!(
            wrong.contains("`http://other/a2a` (JSONRPC) — not `runtime.url` http://h/a2a"),
            "{wrong}"
        );
        assert!(check_card(&card("http://h/a2a", "0.3"), "http://h/a2a").is_err());
        assert!(check_card(&json!({"name": "R"}), "http://h/a2a").is_err());
    }

    #[test]
    fn json_rpc_is_spoken_where_the_card_offers_it_else_http_json() {
        let both = |rest_first: bool| {
            let rpc = json!({"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"});
            let rest = json!({"url": "http://h/a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"});
            let list = if rest_first { [rest, rpc] } else { [rpc, rest] };
            json!({"supportedInterfaces": list})
        };
        for order in [true, false] {
            assert_eq!(
                check_card(&both(order), "http://h/a2a").unwrap().0.wire,
                Wire::JsonRpc
            );
        }
        let rest = json!({"supportedInterfaces": [
            {"url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://h/a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://h/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        let (spoken, info) = check_card(&rest, "http://h/a2a").unwrap();
        assert_eq!(spoken.wire, Wire::HttpJson);
        assert_eq!(info["card"]["protocolBinding"], "HTTP+JSON");
        let unknown = json!({"supportedInterfaces": [
            {"url": "http://h/a2a", "protocolBinding": "SLIMRPC", "protocolVersion": "1.0"},
        ]});
        assert!(
            check_card(&unknown, "http://h/a2a")
                .unwrap_err()
                .contains("no JSON-RPC, HTTP+JSON or gRPC interface")
        );
    }

    /// gRPC is spoken where the card offers nothing else at the url (its target as `host:port`
    /// is that url), with the card's tenant; over TLS at an `https` url.
    #[test]
    fn grpc_is_spoken_where_the_card_offers_only_it_with_its_tenant() {
        let grpc = |url: &str| {
            json!({"supportedInterfaces": [
                {"url": url, "protocolBinding": "GRPC", "protocolVersion": "1.0", "tenant": "rev"},
            ]})
        };
        for named in ["http://h:50051", "h:50051", "http://h:50051/"] {
            let (spoken, info) = check_card(&grpc(named), "http://h:50051").unwrap();
            assert_eq!(
                spoken,
                Spoken {
                    wire: Wire::Grpc,
                    tenant: "rev".into(),
                    streaming: true,
                    push: false,
                },
                "{named}"
            );
            assert_eq!(info["card"]["protocolBinding"], "GRPC");
        }
        let mut with_rest = grpc("http://h:50051");
        with_rest["supportedInterfaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"url": "http://h:50051", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}));
        assert_eq!(
            check_card(&with_rest, "http://h:50051").unwrap().0.wire,
            Wire::HttpJson
        );
        let mut not_streaming = grpc("h:50051");
        not_streaming["capabilities"] = json!({"streaming": false});
        assert!(
            !check_card(&not_streaming, "http://h:50051")
                .unwrap()
                .0
                .streaming
        );
        let tls = check_card(&grpc("https://h:50051"), "https://h:50051").unwrap();
        assert_eq!(tls.0.wire, Wire::Grpc);
        assert!(check_card(&grpc("other:50051"), "http://h:50051").is_err());
    }

    /// A card is taken when one of its signatures verifies with the configured key over the
    /// card without them, canonicalized (RFC 8785) — not when it was changed after signing,
    /// not signed, or signed with another algorithm.
    #[test]
    fn a_card_is_taken_only_with_a_signature_that_verifies() {
        use base64::Engine as _;
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let jwk =
            json!({"kty": "EC", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..])});
        let key = CardKey::parse(&jwk.to_string()).unwrap();
        // Keys in an order JCS changes, and text it keeps as it is.
        let card = json!({"name": "R", "description": "Ünïcode \"q\"", "capabilities": {"streaming": true}, "version": "1.0.0"});
        let sign = |card: &Value, alg: &str| {
            let protected = b64(json!({"alg": alg, "kid": "k1"}).to_string().as_bytes());
            let payload = b64(&serde_jcs::to_vec(card).unwrap());
            let signature = pair
                .sign(&rng, format!("{protected}.{payload}").as_bytes())
                .unwrap();
            json!({"protected": protected, "signature": b64(signature.as_ref())})
        };
        let mut signed = card.clone();
        signed["signatures"] = json!([sign(&card, "ES256")]);
        key.check(&signed).unwrap();

        let mut changed = signed.clone();
        changed["description"] = json!("another");
        let e = key.check(&changed).unwrap_err();
        assert!(e.contains("does not verify"), "{e}");
        let e = key.check(&card).unwrap_err();
        assert!(e.contains("not signed"), "{e}");
        let mut other_alg = card.clone();
        other_alg["signatures"] = json!([sign(&card, "RS256")]);
        assert!(key.check(&other_alg).unwrap_err().contains("alg `RS256`"));
        // Two signatures: one that verifies is enough.
        let mut two = card.clone();
        two["signatures"] = json!([{"protected": "e30", "signature": "AA"}, sign(&card, "ES256")]);
        key.check(&two).unwrap();

        let e =
            CardKey::parse(r#"{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}"#).unwrap_err();
        assert!(e.contains("is not taken"), "{e}");
        assert!(
            CardKey::parse("not json")
                .unwrap_err()
                .contains("not a JWK")
        );
    }

    /// A webhook takes an update only with its token, only while its prompt holds it open,
    /// and is given only to a remote that can reach the listener.
    #[test]
    fn a_push_webhook_takes_updates_with_its_token_while_open() {
        let hooks = PushHooks::default();
        assert!(
            hooks.open_for("http://127.0.0.1:9/a2a").is_none(),
            "no listener yet"
        );
        let hooks = PushHooks::listening_on("127.0.0.1:7430".parse().unwrap(), None);
        assert!(
            hooks.open_for("http://agents.example/a2a").is_none(),
            "a loopback listener is not given to a remote elsewhere"
        );
        let (url, token, mut hook) = hooks.open_for("http://127.0.0.1:9/a2a").unwrap();
        let id = url
            .strip_prefix("http://127.0.0.1:7430/a2a-remote-push/")
            .unwrap()
            .to_string();
        let update = br#"{"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_WORKING"}}}"#;
        assert_eq!(hooks.take(&id, None, update), PushTaken::WrongToken);
        assert_eq!(
            hooks.take(&id, Some("guess"), update),
            PushTaken::WrongToken
        );
        assert_eq!(
            hooks.take("other", Some(&token), update),
            PushTaken::NoSuchHook
        );
        assert_eq!(
            hooks.take(&id, Some(&token), b"[1]"),
            PushTaken::NotAnUpdate
        );
        assert_eq!(hooks.take(&id, Some(&token), update), PushTaken::Taken);
        let bare = br#"{"id":"t","status":{"state":"TASK_STATE_COMPLETED"}}"#;
        assert_eq!(hooks.take(&id, Some(&token), bare), PushTaken::Taken);
        assert_eq!(
            hook.received.try_recv().unwrap()["statusUpdate"]["taskId"],
            "t"
        );
        assert_eq!(
            hook.received.try_recv().unwrap()["task"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        drop(hook);
        assert_eq!(hooks.take(&id, Some(&token), update), PushTaken::NoSuchHook);
        let unspecified = PushHooks::listening_on("0.0.0.0:7430".parse().unwrap(), None);
        assert!(unspecified.open_for("http://127.0.0.1:9/a2a").is_none());
        // With the URL others reach it at (`--public-url`): that URL, for every remote.
        let public = Some("https://hub.example/deepcli/".parse().unwrap());
        let behind = PushHooks::listening_on("0.0.0.0:7430".parse().unwrap(), public);
        for remote in ["http://agents.example/a2a", "http://127.0.0.1:9/a2a"] {
            let (url, _, _) = behind.open_for(remote).unwrap();
            assert!(
                url.starts_with("https://hub.example/deepcli/a2a-remote-push/"),
                "{url}"
            );
        }
    }

    #[test]
    fn a_session_keeps_one_context() {
        let a = context_id("remote", "agent:remote:main");
        assert_eq!(a, context_id("remote", "agent:remote:main"));
        assert_ne!(a, context_id("remote", "agent:remote:other"));
        assert!(a.starts_with("deepcli-") && a.len() == 40, "{a}");
    }
}
