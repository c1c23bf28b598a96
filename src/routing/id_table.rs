//! [`IdTable`]: the ids a plan's bindings name, each with what the index knows of it, laid out
//! so that looking one up reads one cache line in the common case.
//!
//! A plan of 100k bindings names a few hundred thousand ids: the table does not fit in a core's
//! cache, so each lookup of a message's id is a cache miss. A general hash map keeps its probe
//! metadata apart from its entries (two lines per hit), and decides hit or miss by branches on
//! the loaded data, so the misses of one message's ids are taken one after the other. Here a
//! slot is one aligned cache line holding the hash, the id and its record (open addressing,
//! linear probing, at most half full), and [`IdTable::touch`] lets a caller start the reads of
//! all of a message's ids before deciding anything, so that their misses overlap.

use std::hash::BuildHasher;

use rustc_hash::FxBuildHasher;

use super::shared_str::SharedStr;

/// One slot: empty when `tag` is 0.
#[derive(Debug, Clone, Default)]
#[repr(align(64))]
struct Slot<V> {
    /// The id's hash with its lowest bit set.
    tag: u64,
    name: SharedStr,
    value: V,
}

/// An immutable map from id to `V`, built once.
#[derive(Debug, Clone)]
pub(super) struct IdTable<V> {
    slots: Vec<Slot<V>>,
    /// `64 - log2(slots.len())`: the slot of a hash is its top bits.
    shift: u32,
}

impl<V: Default + Clone> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            slots: vec![Slot::default()],
            shift: 64,
        }
    }
}

/// The hash of an id, to look it up with [`IdTable::get`] (and [`IdTable::touch`] first).
#[derive(Debug, Clone, Copy)]
pub(super) struct IdHash(u64);

impl IdHash {
    pub fn of(id: &str) -> IdHash {
        // Fibonacci hashing spreads FxHash's bits over the top ones the slot is taken from.
        IdHash(
            FxBuildHasher
                .hash_one(id)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                | 1,
        )
    }
}

impl<V: Default + Clone> IdTable<V> {
    /// The table of `entries` (distinct ids).
    pub fn build(entries: impl ExactSizeIterator<Item = (SharedStr, V)>) -> IdTable<V> {
        let capacity = (entries.len() * 2).next_power_of_two().max(2);
        let mut table = IdTable {
            slots: vec![Slot::default(); capacity],
            shift: 64 - capacity.trailing_zeros(),
        };
        for (name, value) in entries {
            let tag = IdHash::of(&name).0;
            let mut at = table.home(tag);
            while table.slots[at].tag != 0 {
                at = (at + 1) & (capacity - 1);
            }
            table.slots[at] = Slot { tag, name, value };
        }
        table
    }

    fn home(&self, tag: u64) -> usize {
        // `shift` is 64 only for the one-slot empty table, where every id is at 0.
        tag.checked_shr(self.shift).unwrap_or(0) as usize
    }

    /// Reads the first slot of `hash`, so that the line is on its way when [`IdTable::get`]
    /// needs it; the answer means nothing.
    pub fn touch(&self, hash: IdHash) -> u64 {
        self.slots[self.home(hash.0)].tag
    }

    pub fn get(&self, id: &str, hash: IdHash) -> Option<&V> {
        let mask = self.slots.len() - 1;
        let mut at = self.home(hash.0);
        loop {
            let slot = &self.slots[at];
            if slot.tag == 0 {
                return None;
            }
            if slot.tag == hash.0 && slot.name == id {
                return Some(&slot.value);
            }
            at = (at + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_it_holds_and_nothing_else() {
        let ids: Vec<String> = (0..1000).map(|i| format!("id-{i}")).collect();
        let table = IdTable::build(
            ids.iter()
                .enumerate()
                .map(|(i, id)| (SharedStr::from(id.as_str()), i)),
        );
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(table.get(id, IdHash::of(id)), Some(&i));
        }
        for id in ["", "id-1000", "x", "id-01"] {
            assert_eq!(table.get(id, IdHash::of(id)), None);
        }
        let empty: IdTable<usize> = IdTable::default();
        assert_eq!(empty.get("a", IdHash::of("a")), None);
        let one = IdTable::build([(SharedStr::from("a"), 7)].into_iter());
        assert_eq!(one.get("a", IdHash::of("a")), Some(&7));
        assert_eq!(one.get("b", IdHash::of("b")), None);
    }
}
