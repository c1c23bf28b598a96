//! The outbox's carriers (conversations.md, "One outbound path"): one pass looks at the oldest
//! row of every conversation the outbox holds, and each conversation is drained by one task,
//! row after row, in the order they were queued. A row goes by its account's platform adapter
//! when one runs here (Slack, Telegram, Discord), else by its reply sink (a bridge account); with
//! neither, it is held with the reason, and tried again on every pass. A pass runs when a row
//! is queued, and every [`PASS`] for what waits (held rows, a restart's leftovers).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{AdapterCx, RunningAccount};
use crate::access::outbox::{Conversation, Failed, PostedPrompt, Queued};
use crate::ids::AccountKey;
use crate::platform::Platform;

/// How often a pass runs when nothing rings.
const PASS: Duration = Duration::from_secs(1);

/// What became of a row.
enum Carried {
    /// By this carrier; the platform's id of the message, when it gave one.
    Posted(&'static str, Option<String>),
    Dead(&'static str, Failed),
    /// No carrier: why.
    Held(String),
}

/// The conversations being drained now.
type Draining = Arc<Mutex<HashSet<Conversation>>>;

/// Runs the passes until the controller stops.
pub(super) async fn run(cx: Arc<AdapterCx>) {
    let rang = cx.access.outbox_queued();
    let draining = Draining::default();
    loop {
        pass(&cx, &draining).await;
        tokio::select! {
            () = rang.notified() => {}
            () = tokio::time::sleep(PASS) => {}
        }
    }
}

/// Starts a drain for every conversation with a row waiting that none drains yet.
async fn pass(cx: &Arc<AdapterCx>, draining: &Draining) {
    let access = cx.access.clone();
    let read = tokio::task::spawn_blocking(move || {
        let store = access.store();
        Ok::<_, crate::state::StateError>((store.outbox_heads()?, store.outbox_counts()?))
    })
    .await;
    let (heads, counts) = match read {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot read the outbox");
            return;
        }
        Err(_) => return,
    };
    let metrics = &cx.access.metrics;
    use std::sync::atomic::Ordering::Relaxed;
    metrics.outbox_waiting.store(counts.waiting, Relaxed);
    metrics.outbox_held.store(counts.held, Relaxed);
    let placement = cx.access.placement();
    for head in heads {
        let to = head.said.to.clone();
        // Several replicas: the one that holds the account's claim posts its rows.
        if placement.is_some_and(|p| !p.carries(&to.channel, &to.account_id)) {
            continue;
        }
        let fresh = match draining.lock() {
            Ok(mut d) => d.insert(to.clone()),
            Err(_) => false,
        };
        if fresh {
            tokio::spawn(drain(cx.clone(), to, draining.clone()));
        }
    }
}

/// Posts conversation `to`'s rows one after the other, until none is left or one is held.
async fn drain(cx: Arc<AdapterCx>, to: Conversation, draining: Draining) {
    let mut moved = false;
    loop {
        let head = {
            let (access, to) = (cx.access.clone(), to.clone());
            tokio::task::spawn_blocking(move || access.store().outbox_head(&to)).await
        };
        let Ok(Ok(Some(queued))) = head else {
            break;
        };
        let carried = carry(&cx, &queued).await;
        if !settle(&cx, &queued, carried).await {
            break;
        }
        moved = true;
    }
    if let Ok(mut d) = draining.lock() {
        d.remove(&to);
    }
    // A row queued while this drain was ending waits for no timer. Only after progress: a
    // drain that stopped at a held row would otherwise ring the next pass at once, forever.
    if moved {
        cx.access.outbox_queued().notify_one();
    }
}

/// Posts one row by its account's carrier.
async fn carry(cx: &Arc<AdapterCx>, queued: &Queued) -> Carried {
    let account = AccountKey::new(&queued.said.to.channel, &queued.said.to.account_id);
    let running = cx
        .accounts
        .read()
        .ok()
        .and_then(|a| a.get(&account).cloned());
    // An adapter without its credentials cannot post: the reply sink, if any, carries.
    let (running, cannot) = match running {
        Some(r) => match r.spec.missing() {
            None => (Some(r), None),
            Some(missing) => (None, Some(missing)),
        },
        None => (None, None),
    };
    if let Some(running) = running {
        let platform = running.spec.platform;
        let carried = match platform {
            Platform::Slack => super::slack::carry(&running, queued).await,
            Platform::Telegram => super::telegram::carry(&running, queued).await,
            Platform::Discord => super::discord::carry(&running, queued).await,
        };
        let name = platform.as_str();
        return match carried {
            Ok(posted_id) => {
                running.posted(1);
                Carried::Posted(name, posted_id)
            }
            Err(failed) => {
                running.dead_lettered(&failed.error);
                Carried::Dead(name, failed)
            }
        };
    }
    match cx.access.carry_by_sink(queued).await {
        Ok(Ok(())) => Carried::Posted("reply-sink", None),
        Ok(Err(failed)) => Carried::Dead("reply-sink", failed),
        Err(why) => match cannot {
            Some(missing) => Carried::Held(format!(
                "no carrier for `{account}`: its adapter cannot connect ({missing}) and it has no reply sink"
            )),
            None => Carried::Held(why),
        },
    }
}

/// Records what became of a row, in the state, `/metrics` and the channel's log; whether the
/// conversation's next row may go.
async fn settle(cx: &Arc<AdapterCx>, queued: &Queued, carried: Carried) -> bool {
    let said = &queued.said;
    let seq = queued.seq;
    let cause = said.cause.as_str();
    let what = format!(
        "cause={cause} id={} session={} to={}",
        said.cause_id, said.session_key, said.to
    );
    let access = cx.access.clone();
    let (line, go_on) = match carried {
        Carried::Posted(carrier, posted_id) => {
            let done = tokio::task::spawn_blocking(move || {
                access
                    .store()
                    .outbox_posted(seq, carrier, posted_id.as_deref())
            })
            .await;
            if !matches!(done, Ok(Ok(()))) {
                tracing::warn!(
                    seq,
                    "cannot mark an outbox row posted; it may be posted again"
                );
            }
            cx.access.metrics.outbound(cause, carrier, false);
            (format!("outbound {what} carrier={carrier}"), true)
        }
        Carried::Dead(carrier, failed) => {
            tracing::warn!(%cause, to = %said.to, error = %failed.error, "a message deepcli said could not be posted; kept as a dead letter");
            let line = format!(
                "dead-letter {what} carrier={carrier} target={} attempts={} error={}",
                failed.target, failed.attempts, failed.error
            );
            let _ = tokio::task::spawn_blocking(move || {
                access.store().outbox_dead(seq, carrier, &failed)
            })
            .await;
            cx.access.metrics.outbound(cause, carrier, true);
            (line, true)
        }
        Carried::Held(why) => {
            let reason = why.clone();
            let first =
                tokio::task::spawn_blocking(move || access.store().outbox_hold(seq, &reason)).await;
            if !matches!(first, Ok(Ok(true))) {
                return false;
            }
            tracing::warn!(%cause, to = %said.to, %why, "a message deepcli said waits: no carrier");
            (format!("outbound-held {what} why={why}"), false)
        }
    };
    cx.access.log_call(Some(&said.to.channel), &line).await;
    go_on
}

impl RunningAccount {
    /// Approval `approval_id`'s prompt, when this platform (`carrier`) posted it: what its
    /// outcome edits.
    pub(super) async fn posted_prompt(
        &self,
        approval_id: &str,
        carrier: &str,
    ) -> Option<PostedPrompt> {
        let (access, id) = (self.cx.access.clone(), approval_id.to_string());
        tokio::task::spawn_blocking(move || access.store().outbox_prompt(&id))
            .await
            .ok()?
            .ok()?
            .filter(|p| p.carrier == carrier)
    }

    /// The platform took the first `pieces` pieces of outbox row `seq`: a retry after a crash
    /// posts only the rest.
    pub(super) async fn outbox_progress(&self, seq: i64, pieces: usize) {
        let access = self.cx.access.clone();
        let _ =
            tokio::task::spawn_blocking(move || access.store().outbox_progress(seq, pieces)).await;
    }
}
