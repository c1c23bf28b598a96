-- Migration 28: the replicas of a hub that share one state, and what one of them holds at a
-- time (docs/scale-out.md; issue 43). On SQLite there is one controller, so one replica.
-- Times are the state's own clock in milliseconds since 1970 (`now_ms`): one clock for
-- every replica, whatever their hosts' clocks say.
CREATE TABLE replicas (
    id          TEXT PRIMARY KEY,   -- --replica-id (default: the host name)
    url         TEXT NOT NULL,      -- --advertise: where the other replicas reach it
    started_ms  INTEGER NOT NULL,   -- when it (re)joined
    seen_ms     INTEGER NOT NULL    -- when it last renewed; a replica not seen for a claim's
                                    -- time is gone
);
-- A claim: the leadership (`leader`, name ''), an agent's runtime (`agent`, its id) or a
-- platform account's connection (`account`, `<channel>/<accountId>`), held by one replica
-- until `expires_ms` unless renewed. `token` is the fencing token: it grows at every change
-- of holder, and a write made for a claim checks, in its transaction, that the claim is still
-- its holder's with that token and unexpired — a replica that was frozen past its time
-- writes nothing.
CREATE TABLE claims (
    kind        TEXT NOT NULL,      -- leader | agent | account
    name        TEXT NOT NULL,
    holder      TEXT NOT NULL,      -- a replica's id
    token       INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);
-- The last fencing token given: tokens are never reused, even for a claim deleted and taken
-- again.
CREATE TABLE fencing (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    last  INTEGER NOT NULL
);
INSERT INTO fencing (id, last) VALUES (1, 0);
