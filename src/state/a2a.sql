-- deepcli state, migration 12 (the merger renumbers): the hub as an A2A server (a2a.md). An
-- A2A task is one or more Hub runs into the session of one (peer, contextId); what the task is
-- now is read off its runs, its last known state kept here for ListTasks' filter and order.

CREATE TABLE a2a_tasks (
    task_id     TEXT PRIMARY KEY,   -- uuid, made by deepcli
    peer        TEXT NOT NULL,      -- the peer's name in channels.yaml `a2a.peers`
    agent_id    TEXT NOT NULL,      -- the exposed agent it went to
    context_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,      -- agent:<id>:a2a:<peer>:<contextId>
    state       TEXT NOT NULL,      -- A2A TaskState, the last one seen (TASK_STATE_…)
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    updated_us  INTEGER NOT NULL    -- microseconds since the epoch: ListTasks' order and cursor
);
CREATE INDEX a2a_tasks_by_peer ON a2a_tasks (peer, updated_us DESC, task_id DESC);

-- The messages of a task, in order: each is one Hub run (its message, its reply).
CREATE TABLE a2a_task_runs (
    task_id    TEXT NOT NULL REFERENCES a2a_tasks (task_id),
    seq        INTEGER NOT NULL,
    run_id     TEXT NOT NULL,
    message_id TEXT NOT NULL,       -- the peer's messageId
    PRIMARY KEY (task_id, seq)
);
