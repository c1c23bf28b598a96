-- deepcli state, migration 6: the inbound policy (policy.md). Pairing requests and the senders
-- the operator approved (the config files are not rewritten: approvals live here), and the
-- group messages kept as context for an agent's next answer in their session.

-- One pending pairing request per sender of a channel account. A sender asking again while
-- its code is valid gets no new code.
CREATE TABLE pairing_requests (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT,
    code        TEXT NOT NULL,       -- never logged
    created_at  TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,    -- unix seconds
    PRIMARY KEY (channel, account_id, sender_id)
);

-- When each code was given, per sender: the rate limit on codes.
CREATE TABLE pairing_issued (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    sender_id  TEXT NOT NULL,
    at         INTEGER NOT NULL      -- unix seconds
);
CREATE INDEX pairing_issued_by_sender ON pairing_issued (channel, account_id, sender_id, at);

-- Wrong codes given to `pairing approve`, per channel: the rate limit on guesses.
CREATE TABLE pairing_failures (
    channel TEXT NOT NULL,
    at      INTEGER NOT NULL         -- unix seconds
);
CREATE INDEX pairing_failures_by_channel ON pairing_failures (channel, at);

-- Senders the operator approved: they may send direct messages like those in allowFrom.
CREATE TABLE paired_senders (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT,
    approved_at TEXT NOT NULL,
    PRIMARY KEY (channel, account_id, sender_id)
);

-- Group messages gated `not-mentioned`: context for the next delivered message of their
-- session (at most historyLimit per session), then deleted.
CREATE TABLE kept_context (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    sender      TEXT,                -- JSON
    text        TEXT NOT NULL,
    at          TEXT NOT NULL
);
CREATE INDEX kept_context_by_session ON kept_context (session_key, id);
