-- Migration 31: the task of a remote A2A agent (`runtime.kind: a2a`) that a session's last
-- message left waiting for input or authorization: the session's next message answers it, in
-- that task — also after the controller restarted (docs/a2a.md). Cleared when answered.
CREATE TABLE remote_waits (
    agent_id    TEXT NOT NULL,
    session_key TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    at          TEXT NOT NULL,
    PRIMARY KEY (agent_id, session_key)
);
