-- deepcli state, migration 3: a runtime session id belongs to the runtime process that issued
-- it, and a platform message id to its conversation.

-- The runtime instance (one per start of a runtime process) that issued runtime_session_id.
-- An id from another instance is never taken as open: many agents number their sessions per
-- process, so a restarted runtime hands the same ids to other conversations.
ALTER TABLE sessions ADD COLUMN runtime_instance TEXT;

-- Platform message ids are unique per conversation (Telegram per chat, Slack per channel), so
-- the idempotency record is keyed by channel, account, peer, thread and message id. Rows from
-- before this migration have no peer and thread ('').
CREATE TABLE deliveries_v3 (
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,       -- normalized kind, '' when the envelope named no peer
    peer_id     TEXT NOT NULL,       -- as sent ('' when none)
    thread_id   TEXT NOT NULL,       -- trimmed, '' when none
    message_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,
    response    TEXT NOT NULL,       -- JSON: the response as first sent
    at          TEXT NOT NULL,
    PRIMARY KEY (channel, account_id, peer_kind, peer_id, thread_id, message_id)
);
INSERT INTO deliveries_v3 (channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at)
    SELECT channel, account_id, '', '', '', message_id, session_key, response, at FROM deliveries;
DROP TABLE deliveries;
ALTER TABLE deliveries_v3 RENAME TO deliveries;

ALTER TABLE dead_letters ADD COLUMN peer_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN peer_id TEXT NOT NULL DEFAULT '';
ALTER TABLE dead_letters ADD COLUMN thread_id TEXT NOT NULL DEFAULT '';
