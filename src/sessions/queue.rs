//! The per-session FIFO: one turn at a time per session key, the others waiting in the order
//! they came, up to a limit (an unbounded waiter is let in whatever waits before it).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::sync::OwnedMutexGuard;

/// One session key's FIFO: a lock held while its message is handled, and how many wait.
#[derive(Default)]
struct SessionQueue {
    turn: Arc<tokio::sync::Mutex<()>>,
    waiting: AtomicUsize,
}

impl SessionQueue {
    fn depth(&self) -> usize {
        self.waiting.load(SeqCst) + usize::from(self.turn.try_lock().is_err())
    }
}

/// A session key's turn, held: the next message of the session waits until it is dropped.
pub(crate) struct Place {
    _turn: OwnedMutexGuard<()>,
}

/// The FIFOs by session key.
#[derive(Default)]
pub(super) struct Queues {
    map: Mutex<HashMap<String, Arc<SessionQueue>>>,
}

/// The FIFO refused a waiter: `limit` already wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Full {
    pub limit: usize,
}

impl Queues {
    fn queue(&self, session_key: &str) -> Arc<SessionQueue> {
        let mut queues = match self.map.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        // Forget the queues nobody holds (bounded memory across many sessions).
        if queues.len() > 4096 {
            queues.retain(|_, q| Arc::strong_count(q) > 1);
        }
        queues.entry(session_key.to_string()).or_default().clone()
    }

    /// Waits for `session_key`'s turn. `queued` is dropped once the waiter holds its place in
    /// the FIFO (or was refused): the caller may then accept the session's next message, which
    /// lines up behind it. `metrics` counts the waiters of every session.
    pub(super) async fn enter(
        &self,
        session_key: &str,
        limit: usize,
        unbounded: bool,
        queued: Option<tokio::sync::oneshot::Sender<()>>,
        metrics: &dyn super::TurnMetrics,
    ) -> Result<Place, Full> {
        let queue = self.queue(session_key);
        let mut queued = queued;
        if let Ok(turn) = queue.turn.clone().try_lock_owned() {
            drop(queued.take());
            return Ok(Place { _turn: turn });
        }
        // Busy: this message waits, if fewer than the limit already do.
        let waiting = queue.waiting.fetch_add(1, SeqCst);
        metrics.waiting(1);
        let turn = if unbounded || waiting < limit {
            // The first poll puts this waiter in the lock's (first-come) queue.
            let mut lock = std::pin::pin!(queue.turn.clone().lock_owned());
            let first = std::future::poll_fn(|cx| Poll::Ready(lock.as_mut().poll(cx))).await;
            drop(queued.take());
            Some(match first {
                Poll::Ready(turn) => turn,
                Poll::Pending => lock.await,
            })
        } else {
            None
        };
        queue.waiting.fetch_sub(1, SeqCst);
        metrics.waiting(-1);
        turn.map(|turn| Place { _turn: turn }).ok_or(Full { limit })
    }

    /// The turn of `session_key` when it is free and nobody waits for it; `None` when busy.
    pub(super) fn try_enter(&self, session_key: &str) -> Option<Place> {
        let queue = self.queue(session_key);
        if queue.waiting.load(SeqCst) > 0 {
            return None;
        }
        let turn = queue.turn.clone().try_lock_owned().ok()?;
        Some(Place { _turn: turn })
    }

    /// Messages waiting in a session's FIFO, plus the one being handled.
    pub(super) fn depth(&self, session_key: &str) -> usize {
        let queues = match self.map.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        queues.get(session_key).map_or(0, |q| q.depth())
    }

    /// Per owner (`owner_of` a session key), messages waiting in its sessions' FIFOs plus
    /// those being handled.
    pub(super) fn depths(&self, owner_of: impl Fn(&str) -> Option<&str>) -> HashMap<String, usize> {
        let queues = match self.map.lock() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        let mut out = HashMap::new();
        for (key, q) in queues.iter() {
            let Some(owner) = owner_of(key) else {
                continue;
            };
            let depth = q.depth();
            if depth > 0 {
                *out.entry(owner.to_string()).or_default() += depth;
            }
        }
        out
    }
}
