-- Migration 19: what `state.retention` pruned, when and by whom (the controller, or
-- `deepcli state prune`): the audit timeline's `prune` lines.
CREATE TABLE prunes (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      TEXT NOT NULL,
    by      TEXT NOT NULL,      -- controller | cli
    rows    INTEGER NOT NULL,   -- rows deleted, every kind
    detail  TEXT NOT NULL       -- per kind: "120 transcripts, 4 runs"
);
-- Pruning by age reads the oldest rows first: indexes on the times it compares.
CREATE INDEX transcript_by_at ON transcript (at);
CREATE INDEX deliveries_by_at ON deliveries (at);
CREATE INDEX hub_runs_by_finished ON hub_runs (finished_at) WHERE finished_at IS NOT NULL;
