-- deepcli state, migration 2: the Access layer (access.md). Conversations, what was said in
-- them, and which deliveries happened, so that a restart resumes sessions and a redelivered
-- envelope is answered from here instead of reaching the agent twice.

-- One row per session key: the runtime session it maps to.
CREATE TABLE sessions (
    session_key        TEXT PRIMARY KEY,
    agent_id           TEXT NOT NULL,
    -- the ACP session id the agent gave at session/new
    runtime_session_id TEXT,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);

-- The persistent session of an `acp` binding: its UUID is fixed on first use and kept.
CREATE TABLE acp_bindings (
    binding_key TEXT PRIMARY KEY,   -- agent, channel, account, peer kind and id
    session_key TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- Every message and reply, in order, with where it came from.
CREATE TABLE transcript (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    provenance  TEXT NOT NULL,       -- inbound | agent | inter_session | acp
    message_id  TEXT,
    sender      TEXT,                -- JSON
    text        TEXT NOT NULL,
    route       TEXT,                -- JSON route result
    at          TEXT NOT NULL
);
CREATE INDEX transcript_by_session ON transcript (session_key, id);

-- Delivered envelopes, by channel, account and message id: the idempotency record.
CREATE TABLE deliveries (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,
    response    TEXT NOT NULL,       -- JSON: the response as first sent
    at          TEXT NOT NULL,
    PRIMARY KEY (channel, account_id, message_id)
);

-- Replies the reply sink could not hand over after its retries.
CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    url         TEXT NOT NULL,
    body        TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    last_error  TEXT NOT NULL,
    at          TEXT NOT NULL
);
