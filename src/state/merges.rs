//! The search index's segments merged off the writers' path (migration 26): no write merges
//! them (`automerge` is off), so the state's upkeep thread does, in steps of a few
//! milliseconds each, resting [`REST_PER_HELD`] times as long as a step held the write lock.

use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::retention::REST_PER_HELD;

/// The FTS5 indexes whose segments the upkeep merges.
const INDEXES: [&str; 1] = ["transcript_fts"];

/// How long a step should hold the write lock.
const STEP: Duration = Duration::from_millis(5);
/// The pages a step merges, at the least, at the most, and at first.
const MIN_PAGES: i64 = 8;
const MAX_PAGES: i64 = 4096;
const FIRST_PAGES: i64 = 64;
/// The most time one [`Merges::run`] takes, rests included, before it lets the checkpoint
/// have its turn.
const RUN: Duration = Duration::from_millis(200);
/// A step that took this long is logged.
const SLOW: Duration = Duration::from_millis(50);

/// The merges' state between runs: the size of the next step.
#[derive(Debug)]
pub(super) struct Merges {
    pages: i64,
}

impl Default for Merges {
    fn default() -> Merges {
        Merges { pages: FIRST_PAGES }
    }
}

/// What one [`Merges::run`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Merged {
    /// The steps that merged something.
    pub(super) steps: u32,
    /// Whether every index was left with nothing worth merging (FTS5's `usermerge`: a level
    /// with fewer than four segments is left as it is).
    pub(super) done: bool,
}

impl Merges {
    /// Merges each index's segments until none has a level worth merging, or [`RUN`] has
    /// passed.
    pub(super) fn run(&mut self, conn: &Connection) -> rusqlite::Result<Merged> {
        let start = Instant::now();
        let mut merged = Merged::default();
        for index in INDEXES {
            loop {
                let held = match self.step(conn, index)? {
                    Some(held) => held,
                    None => break,
                };
                merged.steps += 1;
                if start.elapsed() >= RUN {
                    return Ok(merged);
                }
                std::thread::sleep((held * REST_PER_HELD).max(Duration::from_millis(1)));
            }
        }
        merged.done = true;
        Ok(merged)
    }

    /// One `merge` of [`Merges::pages`] pages of `index`: how long it held the write lock, or
    /// `None` when there was nothing to merge (FTS5 says so by changing fewer than two rows).
    fn step(&mut self, conn: &Connection, index: &str) -> rusqlite::Result<Option<Duration>> {
        super::lock_waits();
        let before = conn.total_changes();
        let started = Instant::now();
        conn.execute(
            &format!("INSERT INTO {index} ({index}, rank) VALUES ('merge', ?1)"),
            [self.pages],
        )?;
        let waited = Duration::from_millis(super::lock_waits().into());
        let held = started.elapsed().saturating_sub(waited);
        if conn.total_changes() - before < 2 {
            return Ok(None);
        }
        if held >= SLOW {
            tracing::warn!(
                index,
                pages = self.pages,
                took_ms = held.as_millis(),
                "state: a slow merge of the search index"
            );
        }
        self.pages = next_pages(self.pages, held);
        Ok(Some(held))
    }
}

/// The next step's pages after one of `pages` held the lock `held`: halved past [`STEP`],
/// doubled under half of it.
fn next_pages(pages: i64, held: Duration) -> i64 {
    if held > STEP {
        (pages / 2).max(MIN_PAGES)
    } else if held < STEP / 2 {
        (pages * 2).min(MAX_PAGES)
    } else {
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_sized_to_hold_the_lock_a_few_milliseconds() {
        assert_eq!(next_pages(64, Duration::from_millis(1)), 128);
        assert_eq!(next_pages(64, Duration::from_millis(4)), 64);
        assert_eq!(next_pages(64, Duration::from_millis(12)), 32);
        assert_eq!(next_pages(MIN_PAGES, Duration::from_secs(1)), MIN_PAGES);
        assert_eq!(next_pages(MAX_PAGES, Duration::ZERO), MAX_PAGES);
    }

    /// No write merges the index (migration 26): a turn's commit only adds a segment.
    #[test]
    fn writes_leave_the_search_index_unmerged() {
        let tmp = tempfile::tempdir().unwrap();
        let store =
            crate::state::StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap();
        let automerge: i64 = store
            .conn
            .query_row(
                "SELECT v FROM transcript_fts_config WHERE k = 'automerge'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(automerge, 0);
    }

    /// Turns' commits leave many small segments; a run merges them until FTS5 finds nothing
    /// worth merging, and the index still finds every line.
    #[test]
    fn a_run_merges_the_segments_the_writes_left() {
        let tmp = tempfile::tempdir().unwrap();
        let store =
            crate::state::StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap();
        let conn = &store.conn;
        for n in 0..300 {
            conn.execute(
                "INSERT INTO transcript (session_key, provenance, text, at)
                 VALUES ('agent:a:main', 'inbound', ?1, '2026-01-01T00:00:00Z')",
                [format!("deploy number {n} of the release")],
            )
            .unwrap();
        }
        let mut merges = Merges::default();
        let merged = merges.run(conn).unwrap();
        assert!(merged.steps > 0, "nothing was merged");
        assert!(merged.done);
        // What FTS5 itself says: nothing left worth merging.
        let before = conn.total_changes();
        conn.execute(
            "INSERT INTO transcript_fts (transcript_fts, rank) VALUES ('merge', 1000)",
            [],
        )
        .unwrap();
        assert!(
            conn.total_changes() - before < 2,
            "segments were left unmerged"
        );
        let found: i64 = conn
            .query_row(
                "SELECT count(*) FROM transcript_fts WHERE transcript_fts MATCH 'deploy'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(found, 300);
        assert_eq!(
            merges.run(conn).unwrap(),
            Merged {
                steps: 0,
                done: true
            }
        );
    }
}
