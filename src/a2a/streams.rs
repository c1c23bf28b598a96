//! The A2A server's open streams (`SendStreamingMessage`, `SubscribeToTask`): at most so many
//! per peer and in all (a2a.md). A stream holds a [`StreamSlot`] for as long as its response
//! body lives; dropping the body (the task ended, or the peer went away) gives the slot back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A peer's open streams when channels.yaml sets no `a2a.peers.<name>.maxStreams`.
pub(crate) const DEFAULT_PER_PEER: usize = 16;
/// Open streams of all peers together when channels.yaml sets no `a2a.maxStreams`.
pub(crate) const DEFAULT_TOTAL: usize = 256;

/// Which cap a stream would go over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamCap {
    /// The peer's own (`a2a.peers.<name>.maxStreams`).
    Peer(usize),
    /// All peers' together (`a2a.maxStreams`).
    Total(usize),
}

#[derive(Default)]
struct Open {
    total: usize,
    by_peer: HashMap<String, usize>,
}

/// The open streams, counted per peer and in all.
#[derive(Default)]
pub(crate) struct StreamSlots {
    open: Mutex<Open>,
}

/// One open stream; its slot is given back when this is dropped.
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    peer: String,
}

impl StreamSlots {
    fn lock(&self) -> MutexGuard<'_, Open> {
        match self.open.lock() {
            Ok(o) => o,
            Err(p) => p.into_inner(),
        }
    }

    /// A slot for a stream of `peer`'s, unless it would have more than `per_peer` open, or
    /// all peers more than `total`.
    pub(crate) fn take(
        self: &Arc<Self>,
        peer: &str,
        per_peer: usize,
        total: usize,
    ) -> Result<StreamSlot, StreamCap> {
        let mut open = self.lock();
        let mine = open.by_peer.get(peer).copied().unwrap_or(0);
        if mine >= per_peer {
            return Err(StreamCap::Peer(per_peer));
        }
        if open.total >= total {
            return Err(StreamCap::Total(total));
        }
        open.total += 1;
        *open.by_peer.entry(peer.to_string()).or_default() += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            peer: peer.to_string(),
        })
    }

    /// Streams open now, in all.
    pub(crate) fn open(&self) -> usize {
        self.lock().total
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_cannot_hold_more_streams_than_its_cap_and_a_closed_one_frees_its_slot() {
        let slots = Arc::new(StreamSlots::default());
        let mut held: Vec<_> = (0..3)
            .map(|_| slots.take("partner", 3, 10).unwrap())
            .collect();
        assert_eq!(slots.take("partner", 3, 10).err(), Some(StreamCap::Peer(3)));
        // Another peer has its own count.
        let other = slots.take("vendor", 3, 10).unwrap();
        assert_eq!(slots.open(), 4);
        held.pop();
        assert!(slots.take("partner", 3, 10).is_ok());
        drop(other);
        assert_eq!(slots.open(), 2);
    }

    #[test]
    fn all_peers_together_cannot_hold_more_streams_than_the_total_cap() {
        let slots = Arc::new(StreamSlots::default());
        let a = slots.take("a", 16, 2).unwrap();
        let _b = slots.take("b", 16, 2).unwrap();
        assert_eq!(slots.take("c", 16, 2).err(), Some(StreamCap::Total(2)));
        drop(a);
        assert!(slots.take("c", 16, 2).is_ok());
    }
}
