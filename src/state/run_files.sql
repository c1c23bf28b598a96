-- Migration 29: the files a run's message carried (an A2A peer's file parts, written into the
-- agent's workspace), kept with the run so that its prompt can give them to the agent as ACP
-- content blocks whenever the run is delivered: a JSON array of {path (relative to the
-- workspace), name, mediaType, size, sha256}; NULL for none.
ALTER TABLE hub_runs ADD COLUMN files TEXT;
