-- deepcli state, migration 18: tasks (tasks.md). Delegated work with an acceptance condition,
-- its state machine's every move as an event, its plan's steps and the artifacts handed in.
-- A final task (accepted, rejected, cancelled, uncertain, failed) never moves again: a late
-- event is recorded as late and changes nothing.
CREATE TABLE tasks (
    id             TEXT PRIMARY KEY,   -- task-<uuid>
    title          TEXT NOT NULL,
    acceptance     TEXT NOT NULL,      -- the condition a person accepts it on
    requester      TEXT NOT NULL,      -- a person's platform id, a session key, or `operator`
    requester_kind TEXT NOT NULL,      -- person | session | operator
    owner_agent    TEXT NOT NULL,      -- accountable to the requester; reviews
    assignee_agent TEXT NOT NULL,      -- does the work, in `session_key`
    session_key    TEXT NOT NULL,      -- agent:<assignee>:task:<id>: one per task and assignee
    room           TEXT,               -- the session key of the conversation it is discussed in
    parent_id      TEXT,
    state          TEXT NOT NULL,
    runtime_state  TEXT,               -- the raw state the runtime last reported (ACP stop reason, A2A state)
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE INDEX tasks_by_room ON tasks (room);
CREATE INDEX tasks_by_state ON tasks (state);

-- Every event of a task, in order: who, from which door, what it did (the state it moved the
-- task to; none for a late one), and its detail (the question, the verdict, the reason).
CREATE TABLE task_events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    actor      TEXT NOT NULL,
    door       TEXT NOT NULL,          -- cli | http | rpc | room | mcp | a2a | hub
    from_state TEXT NOT NULL,
    to_state   TEXT,                   -- NULL: late, it changed nothing
    detail     TEXT NOT NULL,          -- JSON
    at         TEXT NOT NULL
);
CREATE INDEX task_events_by_task ON task_events (task_id, seq);

-- The plan's steps (seed 000 §2.7): each runs through sessions_send or sessions_spawn and
-- records its run.
CREATE TABLE task_steps (
    task_id      TEXT NOT NULL,
    step_id      TEXT NOT NULL,
    title        TEXT NOT NULL,
    target_agent TEXT,
    session_key  TEXT,
    runtime      TEXT,
    run_id       TEXT,
    acceptance   TEXT,
    status       TEXT NOT NULL,
    notes        TEXT,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (task_id, step_id)
);

-- What the assignee handed in, copied into the task's artifact store with its content hash.
CREATE TABLE task_artifacts (
    task_id      TEXT NOT NULL,
    name         TEXT NOT NULL,         -- a relative path, no `..`
    sha256       TEXT NOT NULL,
    size         INTEGER NOT NULL,
    handed_in_by TEXT NOT NULL,
    at           TEXT NOT NULL,
    PRIMARY KEY (task_id, name)
);
