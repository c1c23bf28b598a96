-- deepcli state, migration 23: A2A push notifications (a2a.md, "Push
-- notifications"). A peer's webhooks for its tasks, and every delivery attempt to them (the
-- audit's `push` lines).

CREATE TABLE a2a_push_configs (
    task_id          TEXT NOT NULL REFERENCES a2a_tasks (task_id),
    config_id        TEXT NOT NULL,   -- the peer's id, or a uuid deepcli made
    peer             TEXT NOT NULL,   -- the task's peer: only it sees and manages the config
    url              TEXT NOT NULL,   -- checked against the SSRF rules when made
    token            TEXT,            -- sent as X-A2A-Notification-Token
    auth_scheme      TEXT,            -- `authentication.scheme` (Bearer, …)
    auth_credentials TEXT,            -- `authentication.credentials`: a secret of the peer's
    created_at       TEXT NOT NULL,
    PRIMARY KEY (task_id, config_id)
);
CREATE INDEX a2a_push_configs_by_peer ON a2a_push_configs (peer);

CREATE TABLE a2a_push_attempts (
    id        INTEGER PRIMARY KEY,
    at        TEXT NOT NULL,
    task_id   TEXT NOT NULL REFERENCES a2a_tasks (task_id),
    config_id TEXT NOT NULL,
    peer      TEXT NOT NULL,
    host      TEXT NOT NULL,          -- the webhook URL's host (never its path or query)
    event     TEXT NOT NULL,          -- what was sent: `statusUpdate TASK_STATE_…`, `artifactUpdate`
    attempt   INTEGER NOT NULL,       -- 1, 2, … for one event
    status    INTEGER,                -- the HTTP status answered
    error     TEXT                    -- or why there was none (refused, unreachable, timed out)
);
CREATE INDEX a2a_push_attempts_by_at ON a2a_push_attempts (at);
CREATE INDEX a2a_push_attempts_by_task ON a2a_push_attempts (task_id);
