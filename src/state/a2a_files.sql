-- deepcli state, migration 25: A2A file parts (a2a.md, "Files"). The files an agent hands to
-- the A2A peer whose message it is answering (artifacts_put with the run's id): copied into
-- the artifact store under their SHA-256, as a task's are; and the media types a peer said it
-- takes in answers (`acceptedOutputModes`).

CREATE TABLE run_artifacts (
    run_id       TEXT NOT NULL,         -- the Hub run (an A2A peer's message) it answers
    name         TEXT NOT NULL,         -- a relative path, no `..`
    sha256       TEXT NOT NULL,
    size         INTEGER NOT NULL,
    media_type   TEXT NOT NULL,
    handed_in_by TEXT NOT NULL,
    at           TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);

-- A JSON list of media types; NULL: the peer said nothing (it takes anything).
ALTER TABLE a2a_tasks ADD COLUMN output_modes TEXT;
