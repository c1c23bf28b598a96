-- PostgreSQL migration 1: the state's schema on PostgreSQL, as far as the stores on the
-- backend seam (src/state/db) go. It grows, unreleased, as stores move onto the seam; the
-- release that first opens a PostgreSQL state freezes it, and later changes are migrations
-- of their own, as SQLite's are. Types: every integer is `bigint` (SQLite's), text `text`,
-- bytes `bytea`, so a statement binds and reads the same values on both.
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

-- SQLite's migration 28 (cluster.sql): replicas, claims and fencing tokens.
CREATE TABLE replicas (
    id          TEXT PRIMARY KEY,
    url         TEXT NOT NULL,
    started_ms  BIGINT NOT NULL,
    seen_ms     BIGINT NOT NULL
);
CREATE TABLE claims (
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    holder      TEXT NOT NULL,
    token       BIGINT NOT NULL,
    expires_ms  BIGINT NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE fencing (
    id    BIGINT PRIMARY KEY CHECK (id = 1),
    last  BIGINT NOT NULL
);
INSERT INTO fencing (id, last) VALUES (1, 0);

-- SQLite's migrations 8 (adapters.sql) and 13 (turns.sql, `adapter_inbox.posted`): what the
-- platform adapters keep so that a restart neither loses nor repeats a message.
CREATE TABLE adapter_offsets (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    next       BIGINT NOT NULL,
    at         TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);
CREATE TABLE adapter_inbox (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    body       TEXT NOT NULL,
    at         TEXT NOT NULL,
    posted     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (channel, account_id, event_id)
);
CREATE TABLE adapter_identities (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    bot_user_id TEXT NOT NULL,
    bot_name    TEXT,
    team_id     TEXT,
    at          TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);
CREATE TABLE discussions (
    channel      TEXT NOT NULL,
    team_id      TEXT NOT NULL,
    conversation TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    rounds       BIGINT NOT NULL,
    state        TEXT NOT NULL,
    notice_sent  BIGINT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (channel, team_id, conversation, thread_id)
);
CREATE TABLE adapter_logouts (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    at         TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);
