-- deepcli state, migration 8 (adapters): what the platform adapters (Slack, Telegram) keep so
-- that a restart neither loses nor repeats a message. (Another branch adds `hub.sql`; the two
-- are numbered when they meet.)

-- Where each account's Telegram long polling goes on: the next `offset` for getUpdates.
CREATE TABLE adapter_offsets (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    next       INTEGER NOT NULL,
    at         TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);

-- Events taken from a platform (acknowledged to it, or confirmed by the next getUpdates
-- offset) and not yet handled to the end: delivered and the reply posted (or dead-lettered).
-- A restart hands them in again; the Access records answer a delivered one as a duplicate.
CREATE TABLE adapter_inbox (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    event_id   TEXT NOT NULL,       -- Telegram update_id, Slack event_id
    seq        INTEGER NOT NULL,    -- the order taken
    body       TEXT NOT NULL,       -- the platform's event, JSON
    at         TEXT NOT NULL,
    PRIMARY KEY (channel, account_id, event_id)
);

-- The bot identity `channels login` (or the last connection) recorded per account.
CREATE TABLE adapter_identities (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    bot_user_id TEXT NOT NULL,
    bot_name    TEXT,
    team_id     TEXT,
    at          TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);

-- Seed 001's A2A discussions: per Slack thread (workspace, channel, thread ts) the bot replies
-- posted in it and whether bot messages there are still delivered.
CREATE TABLE discussions (
    channel     TEXT NOT NULL,
    team_id     TEXT NOT NULL,
    conversation TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    rounds      INTEGER NOT NULL,
    state       TEXT NOT NULL,       -- open | limit | closed
    notice_sent INTEGER NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (channel, team_id, conversation, thread_id)
);

-- Accounts `channels logout` took off the platform: their connection stays down until
-- `channels login`.
CREATE TABLE adapter_logouts (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    at         TEXT NOT NULL,
    PRIMARY KEY (channel, account_id)
);
