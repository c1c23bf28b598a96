//! A serving part's view of its piece of the generation in force. The controller compiles one
//! generation after each apply (the Access plan, the Hub's policy, the approvals' policies, the
//! A2A plan) and publishes it with one store; each part reads only its own piece, through a
//! [`Snapshot`] the composition root hands it, so a swap is whole and no part can see a piece
//! of one generation beside a piece of another. A leaf: it knows none of the pieces.

use std::sync::Arc;

use arc_swap::ArcSwap;

/// One piece of what is in force: every [`Snapshot::load`] reads the generation published last.
pub(crate) struct Snapshot<T>(Arc<dyn Fn() -> T + Send + Sync>);

impl<T> Clone for Snapshot<T> {
    fn clone(&self) -> Snapshot<T> {
        Snapshot(self.0.clone())
    }
}

impl<T: 'static> Snapshot<T> {
    /// The piece `part` picks out of the generations published to `store`.
    pub(crate) fn of<G: Send + Sync + 'static>(
        store: &Arc<ArcSwap<G>>,
        part: fn(&G) -> T,
    ) -> Snapshot<T> {
        let store = store.clone();
        Snapshot(Arc::new(move || part(&store.load())))
    }

    /// What `part` picks out of this piece.
    pub(crate) fn map<U: 'static>(&self, part: fn(&T) -> U) -> Snapshot<U> {
        let this = self.0.clone();
        Snapshot(Arc::new(move || part(&this())))
    }

    /// The piece as it is now.
    pub(crate) fn load(&self) -> T {
        (self.0)()
    }
}

#[cfg(test)]
impl<T: Clone + Send + Sync + 'static> Snapshot<T> {
    /// A piece that never changes (a part on its own, in a test).
    pub(crate) fn fixed(value: T) -> Snapshot<T> {
        Snapshot(Arc::new(move || value.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Generation {
        a: Arc<String>,
        b: u32,
    }

    #[test]
    fn every_piece_reads_the_generation_published_last() {
        let store = Arc::new(ArcSwap::from_pointee(Generation {
            a: Arc::new("one".into()),
            b: 1,
        }));
        let a = Snapshot::of(&store, |g| g.a.clone());
        let b = Snapshot::of(&store, |g| g.b);
        let len = a.map(|s| s.len());
        assert_eq!((a.load().as_str(), b.load(), len.load()), ("one", 1, 3));
        store.store(Arc::new(Generation {
            a: Arc::new("three".into()),
            b: 3,
        }));
        assert_eq!((a.load().as_str(), b.load(), len.load()), ("three", 3, 5));
    }

    #[test]
    fn a_fixed_piece_stays() {
        let s = Snapshot::fixed(7u8);
        assert_eq!(s.clone().load(), 7);
    }
}
