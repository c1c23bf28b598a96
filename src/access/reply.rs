//! The reply sink: a reply also goes to the channel account's `replyUrl`, POSTed and signed
//! like an inbound call (`X-Deepcli-Signature`), retried with backoff, and kept as a dead
//! letter in the state database when it keeps failing. A reply runs in the background: the
//! response to the inbound call never waits for it. The sink is also the outbox's carrier for
//! a bridge account ([`ReplySink::carry`]).

use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;
use tracing::Instrument;

use serde::Serialize;

use super::outbox::{Cause, Failed, Queued};
use super::store::{AccessStore, DeliveryKey};
use crate::ids::AccountKey;
use crate::routing::input::Peer;

/// What the reply sink POSTs (access.md, "Reply sink"): the conversation, the reply, and what
/// it is: the answer to a message, or what deepcli says on its own (the outbox's causes).
#[derive(Debug, Clone)]
pub(super) struct ReplyPost {
    pub channel: String,
    pub account_id: String,
    /// The message answered; none for a heartbeat's reply.
    pub message_id: Option<String>,
    pub session_key: String,
    pub peer: Option<Peer>,
    pub thread_id: Option<String>,
    pub text: String,
    pub about: About,
}

/// What a reply is beside an answer, marked by more fields.
#[derive(Debug, Clone)]
pub(super) enum About {
    /// The answer to the message `messageId` names.
    Answer,
    /// Said on its own: `"cause"` and `"causeId"`, and the key a bridge knew it by before:
    /// `"heartbeat"`, `"announce"`, `"loop_pause"` (`true`), an approval's prompt or outcome
    /// `"approval": {"id": …}`.
    Said { cause: Cause, id: String },
}

impl Serialize for ReplyPost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(Serialize)]
        struct Text<'a> {
            text: &'a str,
        }
        #[derive(Serialize)]
        struct Id<'a> {
            id: &'a str,
        }
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("channel", &self.channel)?;
        map.serialize_entry("accountId", &self.account_id)?;
        map.serialize_entry("messageId", &self.message_id)?;
        map.serialize_entry("sessionKey", &self.session_key)?;
        map.serialize_entry("peer", &self.peer)?;
        map.serialize_entry("threadId", &self.thread_id)?;
        map.serialize_entry("reply", &Text { text: &self.text })?;
        if let About::Said { cause, id } = &self.about {
            map.serialize_entry("cause", cause.as_str())?;
            map.serialize_entry("causeId", id)?;
            match cause {
                Cause::Heartbeat => map.serialize_entry("heartbeat", &true)?,
                Cause::Approval | Cause::ApprovalOutcome => {
                    map.serialize_entry("approval", &Id { id })?
                }
                // The keys a bridge read before the outbox, kept.
                Cause::Announce => map.serialize_entry("announce", &true)?,
                Cause::LoopPause => map.serialize_entry("loop_pause", &true)?,
                Cause::Notice => {}
                Cause::Task | Cause::TaskVerdict | Cause::TaskVerdictOutcome => {
                    map.serialize_entry("task", &Id { id })?
                }
            }
        }
        map.end()
    }
}

impl super::Access {
    /// Posts `queued` to its account's reply sink: `None` when the account has none (nor a
    /// platform adapter: `has_adapter` is the carriers' word), with why it waits.
    pub(crate) async fn carry_by_sink(
        &self,
        queued: &Queued,
    ) -> Result<Result<(), Failed>, String> {
        let said = &queued.said;
        let account = AccountKey::new(&said.to.channel, &said.to.account_id);
        let no_carrier = |why: &str| format!("no carrier for `{account}`: {why}");
        let Some(plan) = self.plan() else {
            return Err(no_carrier("no config in force yet"));
        };
        let Some(access) = plan.accounts.get(&account) else {
            return Err(no_carrier("it is not a declared account (any more)"));
        };
        let (Some(url), Ok(secret)) = (&access.reply_url, &access.webhook_secret) else {
            return Err(no_carrier(
                "no platform adapter runs it and it has no reply sink (a `replyUrl` and a usable `webhookSecret`); the message stays in the transcript and waits here",
            ));
        };
        let post = ReplyPost {
            channel: said.to.channel.clone(),
            account_id: said.to.account_id.clone(),
            message_id: said.reply_to.clone(),
            session_key: said.session_key.clone(),
            peer: (!said.to.peer_id.is_empty()).then(|| Peer {
                kind: said.to.peer_kind.clone(),
                id: said.to.peer_id.clone(),
            }),
            thread_id: (!said.to.thread_id.is_empty()).then(|| said.to.thread_id.clone()),
            text: said.text.clone(),
            about: About::Said {
                cause: said.cause,
                id: said.cause_id.clone(),
            },
        };
        Ok(self.reply.carry(url.clone(), secret, &post).await)
    }
}

/// The waits between attempts: 200 ms, 1 s, 5 s; 4 attempts in all.
fn retries() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_factor(5.0)
        .with_max_delay(Duration::from_secs(5))
        .with_max_times(3)
}
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub(super) struct ReplySink {
    client: reqwest::Client,
    store: Arc<AccessStore>,
    failures: Arc<std::sync::atomic::AtomicU64>,
}

impl ReplySink {
    pub(super) fn new(
        store: Arc<AccessStore>,
        failures: Arc<std::sync::atomic::AtomicU64>,
    ) -> ReplySink {
        ReplySink {
            // The default client is the fallback when the TLS settings cannot be loaded.
            client: crate::http_client::direct()
                .timeout(ATTEMPT_TIMEOUT)
                .build()
                .unwrap_or_default(),
            store,
            failures,
        }
    }

    /// Sends `post` to `url` in the background; a dead letter when it keeps failing.
    pub(super) fn send(
        &self,
        url: String,
        secret: secrecy::SecretString,
        key: DeliveryKey,
        post: ReplyPost,
    ) {
        let sink = self.clone();
        let trace = tracing::Span::current();
        tokio::spawn(async move {
            let Err(failed) = sink.carry(url, &secret, &post).instrument(trace).await else {
                return;
            };
            sink.failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(url = %failed.target, message = %key.message_id, error = %failed.error, attempts = failed.attempts, "reply sink failed; kept as a dead letter");
            let store = sink.store.clone();
            let _ = tokio::task::spawn_blocking(move || {
                store.dead_letter(
                    &key,
                    &failed.target,
                    &failed.body,
                    failed.attempts,
                    &failed.error,
                )
            })
            .await;
        });
    }

    /// Posts `post` to `url`, signed, tried again as [`retries`] says; what failed when it
    /// kept failing.
    pub(super) async fn carry(
        &self,
        url: String,
        secret: &secrecy::SecretString,
        post: &ReplyPost,
    ) -> Result<(), Failed> {
        let body = serde_json::to_string(post).map_err(|e| Failed {
            target: url.clone(),
            body: String::new(),
            attempts: 0,
            error: format!("cannot write the body: {e}"),
        })?;
        let signature = super::sign(
            secrecy::ExposeSecret::expose_secret(secret).as_bytes(),
            body.as_bytes(),
        );
        let mut attempts = 1;
        let span = crate::traces::outbound_post(&post.channel, "reply-sink");
        let sent = (|| self.post(&url, &signature, &body))
            .retry(retries())
            .sleep(tokio::time::sleep)
            .notify(|_, _| attempts += 1)
            .instrument(span.clone())
            .await;
        if let Err(error) = &sent {
            crate::traces::failed(&span, error);
        }
        sent.map_err(|error| Failed {
            target: url,
            body,
            attempts,
            error,
        })
    }

    async fn post(&self, url: &str, signature: &str, body: &str) -> Result<(), String> {
        let response = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("x-deepcli-signature", signature)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| {
                if e.is_builder() {
                    format!("bad reply URL: {e}")
                } else if e.is_timeout() {
                    format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs())
                } else {
                    failure(&e)
                }
            })?;
        let status = response.status();
        let _ = response.bytes().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {status}"))
        }
    }
}

/// A failed attempt as a dead letter records it: the I/O cause when there is one.
fn failure(e: &reqwest::Error) -> String {
    match crate::http_client::io_cause(e) {
        Some(io) => format!("{e}: {io}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder;

    /// Within float rounding (backon multiplies in `f32`): a nanosecond is nothing to a timer.
    fn close(got: Vec<Duration>, want: &[Duration]) -> bool {
        got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .all(|(g, w)| g.abs_diff(*w) < Duration::from_micros(1))
    }

    #[test]
    fn a_reply_post_reads_as_it_always_did() {
        let post = |about| ReplyPost {
            channel: "slack".into(),
            account_id: "w".into(),
            message_id: Some("m1".into()),
            session_key: "agent:a:main".into(),
            peer: Some(Peer {
                kind: "direct".into(),
                id: "U1".into(),
            }),
            thread_id: None,
            text: "hi".into(),
            about,
        };
        let head = r#"{"channel":"slack","accountId":"w","messageId":"m1","sessionKey":"agent:a:main","peer":{"kind":"direct","id":"U1"},"threadId":null,"reply":{"text":"hi"}"#;
        let text = |about| serde_json::to_string(&post(about)).unwrap();
        assert_eq!(text(About::Answer), format!("{head}}}"));
        let said = |cause, id: &str| About::Said {
            cause,
            id: id.into(),
        };
        assert_eq!(
            text(said(Cause::Approval, "ap-1")),
            format!(r#"{head},"cause":"approval","causeId":"ap-1","approval":{{"id":"ap-1"}}}}"#)
        );
        assert_eq!(
            text(said(Cause::Heartbeat, "t")),
            format!(r#"{head},"cause":"heartbeat","causeId":"t","heartbeat":true}}"#)
        );
        assert_eq!(
            text(said(Cause::Announce, "run-1")),
            format!(r#"{head},"cause":"announce","causeId":"run-1","announce":true}}"#)
        );
    }

    #[test]
    fn a_reply_is_tried_four_times_200ms_1s_and_5s_apart() {
        let waits: Vec<Duration> = retries().build().collect();
        let want = [
            Duration::from_millis(200),
            Duration::from_secs(1),
            Duration::from_secs(5),
        ];
        assert!(close(waits.clone(), &want), "{waits:?}");
    }
}
