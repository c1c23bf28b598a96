-- Migration 26: the transcript's search index leaves the state database for one of its own,
-- `search.db` (docs/state.md "Searching the transcript"). Kept here by triggers (migration
-- 24), it cost the writes that fed it: FTS5 merges its segments inside a write, one term's
-- whole list of rows at a time, so at a year's size a turn's commit or a prune's batch held
-- the write lock 80 ms to over a second. Now a write of the transcript only queues the row's
-- id, and the upkeep thread (`state::search_index`) indexes the queued rows in the other
-- database, whose lock no turn waits for. The new index is filled from the transcript.
DROP TRIGGER transcript_fts_of_insert;
DROP TRIGGER transcript_fts_of_delete;
DROP TRIGGER transcript_fts_of_update;
DROP TABLE transcript_fts;

-- The transcript rows whose words the index has yet to take (or drop): each row's id, queued
-- in the transaction that wrote the row.
CREATE TABLE search_queue (
    seq    INTEGER PRIMARY KEY,
    row_id INTEGER NOT NULL
);

CREATE TRIGGER search_queue_of_insert AFTER INSERT ON transcript BEGIN
    INSERT INTO search_queue (row_id) VALUES (NEW.id);
END;

CREATE TRIGGER search_queue_of_delete AFTER DELETE ON transcript BEGIN
    INSERT INTO search_queue (row_id) VALUES (OLD.id);
END;

CREATE TRIGGER search_queue_of_update AFTER UPDATE OF text ON transcript BEGIN
    INSERT INTO search_queue (row_id) VALUES (NEW.id);
END;
