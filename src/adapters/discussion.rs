//! Discussions between bots in one thread (seed 001, adapters.md; docs/channels.md, "Several
//! bots in one workspace: discussions"), enforced by the hub for Slack and Discord alike: a
//! round is one bot reply in a thread, reserved in the state database (shared by every account
//! of the workspace or guild) before it is posted; after `maxRounds`, a stall or the close
//! marker, bot messages in the thread are held back; a human message re-opens it. The
//! platform's adapter says where a message is ([`Discussed`]) and posts the notice.

use std::sync::Arc;

use super::RunningAccount;
use super::store::{Thread, ThreadKey, ThreadState};

/// `discussion` defaults (docs/channels.md).
pub(crate) const MAX_ROUNDS: u32 = 8;
pub(crate) const CLOSE_MARKER: &str = "DISCUSSION_CLOSE";
pub(crate) const STALL_ROUNDS: u32 = 2;

/// A discussed thread and its limits.
#[derive(Debug, Clone)]
pub(super) struct Discussed {
    pub key: ThreadKey,
    pub max_rounds: u32,
    pub close_marker: String,
    pub stall_rounds: u32,
}

/// The discussion of thread `thread` in `conversation` (of workspace or guild `team`), if the
/// conversation's `groups` entry or the account has `discussion` settings.
pub(super) fn of(
    running: &RunningAccount,
    team: &str,
    conversation: &str,
    thread: &str,
) -> Option<Discussed> {
    let d = running.spec.discussion_for(conversation)?;
    Some(Discussed {
        key: ThreadKey {
            channel: running.spec.channel.clone(),
            team_id: team.to_string(),
            conversation: conversation.to_string(),
            thread_id: thread.to_string(),
        },
        max_rounds: d.max_rounds.unwrap_or(MAX_ROUNDS),
        close_marker: d
            .close_marker
            .clone()
            .unwrap_or_else(|| CLOSE_MARKER.to_string()),
        stall_rounds: d.stall_rounds.unwrap_or(STALL_ROUNDS),
    })
}

pub(super) async fn blocking<T: Send + 'static>(
    running: &RunningAccount,
    f: impl FnOnce(&super::store::AdapterStore) -> Result<T, crate::state::StateError> + Send + 'static,
) -> Option<T> {
    let store = running.cx.store.clone();
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "adapter state");
            None
        }
        Err(_) => None,
    }
}

/// A message in a discussed thread, as its platform saw it.
pub(super) struct Heard<'a> {
    /// Its id on the platform, for the log.
    pub message_id: &'a str,
    pub sender_id: Option<&'a str>,
    pub is_bot: bool,
    pub text: &'a str,
}

/// Whether a message in a discussed thread reaches the agent. A human message re-opens the
/// thread (or closes it, with the marker); a bot message is held back once the thread reached
/// its rounds or was closed, and closes it with the marker.
pub(super) async fn admitted(
    running: &Arc<RunningAccount>,
    d: &Discussed,
    heard: &Heard<'_>,
) -> bool {
    let key = &d.key;
    let marked = heard.text.contains(&d.close_marker);
    let own = running
        .identity()
        .is_some_and(|i| heard.sender_id == Some(i.bot_user_id.as_str()));
    if own {
        // The self-loop gate answers it; the thread's state is this bot's own doing.
        return true;
    }
    let k = key.clone();
    let thread = blocking(running, move |s| s.thread(&k)).await.flatten();
    if !heard.is_bot {
        let next = if marked {
            Thread {
                rounds: thread.as_ref().map_or(0, |t| t.rounds),
                state: ThreadState::Closed,
                notice_sent: true,
            }
        } else {
            // A human speaks: the discussion starts over.
            Thread {
                rounds: 0,
                state: ThreadState::Open,
                notice_sent: false,
            }
        };
        if thread.as_ref() != Some(&next) {
            let k = key.clone();
            blocking(running, move |s| s.set_thread(&k, &next)).await;
            if let Ok(mut stalls) = running.cx.stalls.lock() {
                stalls.remove(key);
            }
        }
        return true;
    }
    if marked {
        let closed = Thread {
            rounds: thread.as_ref().map_or(0, |t| t.rounds),
            state: ThreadState::Closed,
            notice_sent: thread.as_ref().is_some_and(|t| t.notice_sent),
        };
        let k = key.clone();
        blocking(running, move |s| s.set_thread(&k, &closed)).await;
        running
            .log(&format!(
                "discussion closed thread={} by=close-marker",
                key.thread_id
            ))
            .await;
        return false;
    }
    match thread.map(|t| t.state) {
        Some(state @ (ThreadState::Limit | ThreadState::Closed)) => {
            running
                .log(&format!(
                    "held message={} thread={} why=discussion-{} (a human reply re-opens it)",
                    heard.message_id,
                    key.thread_id,
                    state.as_str()
                ))
                .await;
            false
        }
        _ => true,
    }
}

/// A bot reply in a discussed thread is a round, reserved before it is posted (none once the
/// thread is paused or closed, so at most `maxRounds` are posted); one with the close marker
/// closes the thread. Whether this reply may go (`None`: held, and logged), and whether it
/// reached `maxRounds`.
pub(super) async fn reserve_round(
    running: &Arc<RunningAccount>,
    d: &Discussed,
    reply: &str,
    reply_to: &str,
) -> Option<bool> {
    let key = d.key.clone();
    let (max_rounds, closes) = (d.max_rounds, reply.contains(&d.close_marker));
    let k = key.clone();
    let reserved = blocking(running, move |s| s.reserve_round(&k, max_rounds, closes))
        .await
        .flatten();
    let Some((thread, reached)) = reserved else {
        running
            .log(&format!(
                "held reply-to={reply_to} thread={} why=discussion-paused (a human reply re-opens it)",
                key.thread_id
            ))
            .await;
        return None;
    };
    if closes {
        running
            .log(&format!(
                "discussion closed thread={} by=close-marker rounds={}",
                key.thread_id, thread.rounds
            ))
            .await;
    }
    Some(reached)
}

/// After a round was posted: a stall (`stallRounds` replies repeating the one before) pauses
/// the thread like `maxRounds`. The notice to post in the thread, for the first to pause it.
pub(super) async fn after_round(
    running: &Arc<RunningAccount>,
    d: &Discussed,
    reply: &str,
    mut reached: bool,
) -> Option<String> {
    let key = &d.key;
    let stalled = {
        let normalized = reply.trim().to_string();
        match running.cx.stalls.lock() {
            Ok(mut stalls) => {
                let entry = stalls.entry(key.clone()).or_insert((String::new(), 0));
                if entry.0 == normalized {
                    entry.1 += 1;
                } else {
                    *entry = (normalized, 0);
                }
                entry.1 >= d.stall_rounds
            }
            Err(_) => false,
        }
    };
    if stalled && !reached {
        let k = key.clone();
        let thread = blocking(running, move |s| s.thread(&k)).await.flatten();
        if let Some(mut t) = thread.filter(|t| t.state == ThreadState::Open) {
            t.state = ThreadState::Limit;
            let k = key.clone();
            blocking(running, move |s| s.set_thread(&k, &t)).await;
            reached = true;
        }
    }
    if !reached {
        return None;
    }
    let k = key.clone();
    if blocking(running, move |s| s.claim_notice(&k)).await != Some(true) {
        return None;
    }
    let why = if stalled {
        format!("the bots repeated themselves for {} rounds", d.stall_rounds)
    } else {
        format!("it reached {} rounds", d.max_rounds)
    };
    running
        .log(&format!(
            "discussion paused thread={} why={}",
            key.thread_id,
            if stalled { "stall" } else { "max-rounds" }
        ))
        .await;
    Some(format!(
        "This discussion is paused: {why}. Bot messages in this thread are no longer delivered. A human reply here re-opens it."
    ))
}
