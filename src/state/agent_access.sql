-- deepcli state, migration 6: an agent's conversations belong to it. Deleting the agent moves
-- its Access rows (session map, transcripts, delivery records, acp binding sessions, last
-- route) into its trash entry, so that a new agent with the same id starts clean; restoring the
-- entry moves them back. And each agent's last external route is kept, for heartbeat replies.

-- The conversation of the last message delivered to each agent from outside (a channel
-- account): where a heartbeat reply that is not `HEARTBEAT_OK` goes.
CREATE TABLE agent_routes (
    agent_id    TEXT PRIMARY KEY,
    session_key TEXT NOT NULL,
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,       -- normalized kind, '' when the envelope named no peer
    peer_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,       -- '' when none
    at          TEXT NOT NULL
);

-- The rows deleting an agent took out of the Access tables, by trash entry (`trash.entry`).
CREATE TABLE trash_sessions (
    entry              TEXT NOT NULL,
    session_key        TEXT NOT NULL,
    agent_id           TEXT NOT NULL,
    runtime_session_id TEXT,
    runtime_instance   TEXT,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);
CREATE INDEX trash_sessions_by_entry ON trash_sessions (entry);

CREATE TABLE trash_transcript (
    entry       TEXT NOT NULL,
    id          INTEGER NOT NULL,    -- the row's id in `transcript`, kept for its order
    session_key TEXT NOT NULL,
    provenance  TEXT NOT NULL,
    message_id  TEXT,
    sender      TEXT,
    text        TEXT NOT NULL,
    route       TEXT,
    at          TEXT NOT NULL
);
CREATE INDEX trash_transcript_by_entry ON trash_transcript (entry);

CREATE TABLE trash_deliveries (
    entry       TEXT NOT NULL,
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,
    peer_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,
    response    TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX trash_deliveries_by_entry ON trash_deliveries (entry);

CREATE TABLE trash_acp_bindings (
    entry       TEXT NOT NULL,
    binding_key TEXT NOT NULL,
    session_key TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX trash_acp_bindings_by_entry ON trash_acp_bindings (entry);

CREATE TABLE trash_agent_routes (
    entry       TEXT NOT NULL,
    agent_id    TEXT NOT NULL,
    session_key TEXT NOT NULL,
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,
    peer_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX trash_agent_routes_by_entry ON trash_agent_routes (entry);
