-- deepcli state, migration 16: the outbox (conversations.md, "One outbound path"). What deepcli
-- says into a conversation on its own (a Hub announce, a heartbeat answer, an approval prompt
-- and its outcome) is written here in the transaction of the event that caused it; a carrier
-- (the account's platform adapter, or its reply sink) posts it and marks it posted only after
-- the platform took it. Posted and dead rows stay as the record `audit` and `channels logs`
-- read.

CREATE TABLE outbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order events happened in
    channel     TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    peer_kind   TEXT NOT NULL,       -- normalized, '' when the conversation names no peer
    peer_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL,       -- '' when none
    reply_to    TEXT,                -- the platform message it answers (a prompt's origin), if any
    session_key TEXT NOT NULL,
    cause       TEXT NOT NULL,       -- announce | heartbeat | approval | approval-outcome
    cause_id    TEXT NOT NULL,       -- the run, the approval, the beat's time
    text        TEXT NOT NULL,
    state       TEXT NOT NULL,       -- waiting | held | posted | dead
    carrier     TEXT,                -- slack | telegram | reply-sink, once one took it
    pieces      INTEGER NOT NULL DEFAULT 0,  -- pieces the platform took (a retry posts the rest)
    posted_id   TEXT,                -- the platform's id of the last piece (Slack ts, Telegram message_id)
    attempts    INTEGER NOT NULL DEFAULT 0,
    reason      TEXT,                -- why held (no carrier) or dead (the platform's last error)
    at          TEXT NOT NULL,
    done_at     TEXT
);
-- The queue: what is not posted yet, oldest first.
CREATE INDEX outbox_open ON outbox (seq) WHERE state IN ('waiting', 'held');
CREATE INDEX outbox_session ON outbox (session_key, seq);
