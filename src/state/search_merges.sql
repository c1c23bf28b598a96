-- Migration 26: no write merges the search index's segments (docs/state.md "Searching the
-- transcript"). FTS5 merges as part of the write that fills a segment: every 64 pages written,
-- that write merges 64 pages per level of the index, up to 80 ms at a year's size, so a turn's
-- commit (or a prune batch, holding the write lock) paid it. With `automerge` off, the writes
-- only add segments; the state's upkeep thread (`state::Checkpointer`) merges them in steps of
-- a few milliseconds, resting between steps. A level that still reaches 16 segments is merged
-- by its writer (`crisismerge`, FTS5's default): the backstop, small while the upkeep keeps up.
INSERT INTO transcript_fts (transcript_fts, rank) VALUES ('automerge', 0);
