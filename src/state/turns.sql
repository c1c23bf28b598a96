-- deepcli state, migration 13: crash safety of a turn. Inbound turns that have begun (access.md, "Crashes"). A row is
-- written before the agent is prompted and taken out in the transaction that records the
-- turn's outcome, so a row found at start belongs to a turn the last controller did not see
-- end: the agent may have acted on it. It becomes an `uncertain` delivery (never prompted
-- again), its transcript rows and the budget turn it took.
CREATE TABLE turns_started (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,
    peer_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,   -- when the turn was admitted: its budget event's time
    route       TEXT NOT NULL,      -- JSON: the route, as the delivery's response gives it
    sender      TEXT,               -- JSON
    text        TEXT NOT NULL,      -- the message as the envelope carried it
    at          TEXT NOT NULL,
    PRIMARY KEY (channel, account_id, peer_kind, peer_id, thread_id, message_id)
);

-- How many pieces of an inbox event's reply the platform has taken: a replay after a crash
-- posts only the rest (channels.md, "A crash during a reply").
ALTER TABLE adapter_inbox ADD COLUMN posted INTEGER NOT NULL DEFAULT 0;
