//! The reply sink: a reply also goes to the channel account's `replyUrl`, POSTed and signed
//! like an inbound call (`X-Deepcli-Signature`), retried with backoff, and kept as a dead
//! letter in the state database when it keeps failing. It runs in the background: the response
//! to the inbound call never waits for it.

use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;

use super::store::{AccessStore, DeliveryKey};

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
pub struct ReplySink {
    client: reqwest::Client,
    store: Arc<AccessStore>,
    failures: Arc<std::sync::atomic::AtomicU64>,
}

impl ReplySink {
    pub fn new(store: Arc<AccessStore>, failures: Arc<std::sync::atomic::AtomicU64>) -> ReplySink {
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

    /// Sends `body` to `url` in the background.
    pub fn send(&self, url: String, secret: Vec<u8>, key: DeliveryKey, body: serde_json::Value) {
        let sink = self.clone();
        tokio::spawn(async move {
            let body = body.to_string();
            let signature = super::sign(&secret, body.as_bytes());
            let mut attempts = 1;
            let sent = (|| sink.post(&url, &signature, &body))
                .retry(retries())
                .sleep(tokio::time::sleep)
                .notify(|_, _| attempts += 1)
                .await;
            let Err(last_error) = sent else { return };
            sink.failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(%url, message = %key.message_id, error = %last_error, attempts, "reply sink failed; kept as a dead letter");
            let store = sink.store.clone();
            let _ = tokio::task::spawn_blocking(move || {
                store.dead_letter(&key, &url, &body, attempts, &last_error)
            })
            .await;
        });
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
