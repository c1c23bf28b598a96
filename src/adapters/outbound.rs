//! What every adapter does with a reply: whether to post it at all (`NO_REPLY`, empty), how to
//! cut a long one at the platform's limit, how long to wait on a rate limit, and the dead
//! letter a reply becomes when it cannot be sent.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tracing::Instrument;

use super::RunningAccount;
use crate::access::Access;
use crate::access::store::DeliveryKey;

/// The reply an agent gives when it has nothing to say: never posted (docs/channels.md).
pub(crate) const NO_REPLY: &str = "NO_REPLY";

/// Attempts of one chunk, at most, rate limits and transient failures included.
pub(crate) const ATTEMPTS: u32 = 5;

/// The longest `retry_after` honoured; a platform asking for more gets a dead letter.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Whether a reply is posted: not when it is empty or exactly `NO_REPLY`.
pub(crate) fn postable(text: &str) -> bool {
    let trimmed = text.trim();
    !trimmed.is_empty() && trimmed != NO_REPLY
}

/// Ends the last piece of a reply cut at `maxReplyMessages`.
pub(crate) const CUT_NOTE: &str = "\n[deepcli: the reply goes on; the rest is not posted here (maxReplyMessages). The whole reply is in the conversation's transcript.]";

/// Cuts `text` into at most `max` pieces of at most `limit` units (`measure` counts a piece),
/// on a paragraph break if one falls in the second half of the piece, else a line break, else
/// a space, else anywhere (between characters). Nothing is lost but the break the cut fell on,
/// unless the text needs more than `max` pieces: then the last one ends with [`CUT_NOTE`] and
/// the rest is not posted. However long the text, no more than `max` pieces are measured.
pub(crate) fn split(
    text: &str,
    limit: usize,
    measure: fn(&str) -> usize,
    max: usize,
) -> Vec<String> {
    let limit = limit.max(1);
    let max = max.max(1);
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let Some(end) = prefix_within(rest, limit, measure) else {
            if !rest.trim().is_empty() {
                out.push(rest.to_string());
            }
            return out;
        };
        if out.len() + 1 == max {
            // The last piece allowed, and the text goes on: as much as fits with the note.
            let room = limit.saturating_sub(measure(CUT_NOTE));
            let head = match prefix_within(rest, room, measure) {
                Some(end) if room > 0 => &rest[..end],
                _ => "",
            };
            out.push(format!("{head}{CUT_NOTE}").trim_start().to_string());
            return out;
        }
        let head = &rest[..end];
        let half = head.len() / 2;
        let cut = ["\n\n", "\n", " "].iter().find_map(|sep| {
            head.rfind(sep)
                .filter(|&at| at >= half)
                .map(|at| (at, sep.len()))
        });
        let (piece, skip) = match cut {
            Some((at, len)) => (&rest[..at], at + len),
            None => (head, end),
        };
        if !piece.trim().is_empty() {
            out.push(piece.to_string());
        }
        rest = &rest[skip..];
    }
}

/// `None` when the whole of `text` is within `limit` units; else the end of its longest prefix
/// within the limit, on a character boundary (one character wider than the limit is taken
/// alone). Reads no further than the limit.
fn prefix_within(text: &str, limit: usize, measure: fn(&str) -> usize) -> Option<usize> {
    let mut end = 0;
    let mut units = 0;
    for (i, c) in text.char_indices() {
        let mut buf = [0u8; 4];
        let w = measure(c.encode_utf8(&mut buf));
        if units + w > limit {
            if end == 0 {
                return Some(c.len_utf8());
            }
            return Some(end);
        }
        units += w;
        end = i + c.len_utf8();
    }
    None
}

/// Characters (Unicode scalar values).
pub(crate) fn chars(text: &str) -> usize {
    text.chars().count()
}

/// UTF-16 code units: how Telegram counts a message's length.
pub(crate) fn utf16(text: &str) -> usize {
    text.encode_utf16().count()
}

/// How a platform call that failed is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The platform asked to wait this long.
    RateLimited(Duration),
    /// No answer: tried again after a growing wait.
    Transport,
    /// Refused: not tried again.
    Final,
}

/// The waits between attempts of a piece after a transport failure: 500 ms doubling, for
/// [`ATTEMPTS`] attempts in all (a rate limit waits what the platform asks instead).
fn send_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_factor(2.0)
        .without_max_delay()
        .with_max_times(ATTEMPTS as usize - 1)
}

/// Whether a failure is tried again, and after how long: `None` for not again.
fn retry_after(failure: Failure, attempts: u32, backoff: Option<Duration>) -> Option<Duration> {
    match failure {
        _ if attempts >= ATTEMPTS => None,
        Failure::RateLimited(wait) if wait <= MAX_RETRY_AFTER => Some(wait),
        Failure::Transport => backoff,
        _ => None,
    }
}

/// Sends one piece with `send` (platform method `method`), rate limits honoured and transport
/// failures tried again; the attempts made and the error when it could not be sent.
pub(crate) async fn send_piece<T, E, Fut>(
    running: &RunningAccount,
    method: &str,
    send: impl FnMut() -> Fut,
    classify: impl Fn(&E) -> Failure,
) -> Result<T, (u32, String)>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    let attempts = AtomicU32::new(0);
    let mut send = send;
    let attempt = || {
        let sent = send();
        let (attempts, classify) = (&attempts, &classify);
        async move {
            let made = attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let e = match sent.await {
                Ok(sent) => return Ok(sent),
                Err(e) => e,
            };
            let failure = classify(&e);
            if let Failure::RateLimited(wait) = failure
                && retry_after(failure, made, None).is_some()
            {
                running
                    .log(&format!(
                        "rate-limited method={method} retry_after_s={}",
                        wait.as_secs()
                    ))
                    .await;
            }
            Err((failure, e.to_string()))
        }
    };
    let span = crate::traces::outbound_post(&running.spec.channel, method);
    let sent = attempt
        .retry(send_backoff())
        .sleep(tokio::time::sleep)
        .adjust(|(failure, _), backoff| {
            retry_after(*failure, attempts.load(Ordering::Relaxed), backoff)
        })
        .instrument(span.clone())
        .await
        .map_err(|(_, error)| (attempts.load(Ordering::Relaxed), error));
    if let Err((_, error)) = &sent {
        crate::traces::failed(&span, error);
    }
    sent
}

/// Keeps a reply that cannot be sent as a dead letter, with the reason, and says so in the
/// channel's log (`deepcli channels logs`).
pub(crate) async fn dead_letter(
    access: &Arc<Access>,
    key: DeliveryKey,
    target: String,
    body: String,
    attempts: u32,
    error: String,
) {
    let line = format!(
        "dead-letter account={} peer={}:{} message={} target={target} attempts={attempts} error={error}",
        key.account_id, key.peer_kind, key.peer_id, key.message_id
    );
    tracing::warn!(channel = %key.channel, account = %key.account_id, message = %key.message_id, %error, "a reply could not be sent; kept as a dead letter");
    access
        .metrics
        .reply_failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let channel = key.channel.clone();
    let store = access.clone();
    let _ = tokio::task::spawn_blocking(move || {
        store
            .store()
            .dead_letter(&key, &target, &body, attempts, &error)
    })
    .await;
    access.log_call(Some(&channel), &line).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_is_tried_five_times_after_growing_waits_or_the_platforms() {
        use backon::BackoffBuilder;
        let waits: Vec<Duration> = send_backoff().build().collect();
        assert_eq!(
            waits,
            [500, 1000, 2000, 4000].map(Duration::from_millis),
            "250 ms << attempt, as before"
        );
        let backoff = Some(Duration::from_millis(500));
        assert_eq!(retry_after(Failure::Transport, 1, backoff), backoff);
        assert_eq!(retry_after(Failure::Transport, ATTEMPTS, backoff), None);
        let asked = Duration::from_secs(7);
        assert_eq!(
            retry_after(Failure::RateLimited(asked), 4, backoff),
            Some(asked)
        );
        assert_eq!(
            retry_after(Failure::RateLimited(MAX_RETRY_AFTER * 2), 1, backoff),
            None,
            "a platform asking for more than a minute gets a dead letter"
        );
        assert_eq!(retry_after(Failure::Final, 1, backoff), None);
    }

    #[test]
    fn no_reply_and_empty_are_not_posted() {
        assert!(!postable("NO_REPLY"));
        assert!(!postable("  NO_REPLY\n"));
        assert!(!postable(" \n"));
        assert!(postable("NO_REPLY, said the bot"));
    }

    #[test]
    fn a_long_text_is_cut_on_paragraphs_then_lines_within_the_limit() {
        let para = "a".repeat(30);
        let text = format!("{para}\n\n{para}\n\n{para}");
        let pieces = split(&text, 70, chars, 100);
        assert_eq!(pieces, [format!("{para}\n\n{para}"), para.clone()]);
        let lines = format!("{para}\n{para}\n{para}");
        assert_eq!(
            split(&lines, 40, chars, 100),
            [para.clone(), para.clone(), para]
        );
        let word = "x".repeat(25);
        assert_eq!(
            split(&word, 10, chars, 100),
            ["x".repeat(10), "x".repeat(10), "x".repeat(5)]
        );
        assert_eq!(split("short", 4096, chars, 100), ["short"]);
        assert!(split("", 10, chars, 100).is_empty());
    }

    #[test]
    fn pieces_are_measured_in_the_platforms_units_and_never_cut_a_character() {
        // 🙂 is two UTF-16 units: 3 of them fill 6 units.
        let text = "🙂".repeat(5);
        let pieces = split(&text, 6, utf16, 100);
        assert_eq!(pieces, ["🙂🙂🙂", "🙂🙂"]);
        for p in split(&"é".repeat(9000), 4096, utf16, 100) {
            assert!(utf16(&p) <= 4096);
        }
        let total: usize = split(&"é".repeat(9000), 4096, utf16, 100)
            .iter()
            .map(|p| chars(p))
            .sum();
        assert_eq!(total, 9000);
    }

    /// A reply that needs more pieces than `max` is posted as `max`, the last within the
    /// limit and ending with the note (issue E4: a 2 MiB reply became 513 Telegram messages).
    #[test]
    fn a_reply_past_its_message_cap_is_cut_with_a_note() {
        let text = "word ".repeat(2 * 1024 * 1024 / 5);
        let pieces = split(&text, 4096, utf16, 10);
        assert_eq!(pieces.len(), 10);
        for p in &pieces {
            assert!(utf16(p) <= 4096, "{}", utf16(p));
        }
        assert!(pieces[9].ends_with(CUT_NOTE));
        assert!(pieces[9].starts_with("word"), "content before the note");
        assert!(!pieces[8].contains("deepcli"));
        // Exactly `max` pieces' worth is posted whole, without a note.
        let ten = "x".repeat(100);
        let pieces = split(&ten, 10, chars, 10);
        assert_eq!(pieces.len(), 10);
        assert!(pieces.iter().all(|p| p == &"x".repeat(10)));
        // A limit smaller than the note: the note alone, never more than `max`.
        assert_eq!(split(&"y".repeat(50), 10, chars, 1).len(), 1);
    }
}
