-- deepcli state, migration 9: the Hub (hub.md). Session capability tokens (hashed), the child
-- sessions the Hub spawned, and runs (one sessions_send or sessions_spawn each) with what
-- happened to them, so that a restarted controller knows which runs it must reconcile.

-- A session's capability token: only its SHA-256 is kept. Bound to one agent and session key;
-- revoked when the session closes, its agent is deleted, the session is opened again (a new
-- token replaces it) or the controller restarts (its runtimes, which held the tokens, are gone).
CREATE TABLE hub_tokens (
    token_hash  TEXT PRIMARY KEY,     -- sha256:<hex> of the token
    agent_id    TEXT NOT NULL,
    session_key TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT,
    revoked_why TEXT
);
CREATE INDEX hub_tokens_live ON hub_tokens (session_key) WHERE revoked_at IS NULL;

-- The sessions sessions_spawn made: where each sits in its tree.
CREATE TABLE hub_sessions (
    session_key        TEXT PRIMARY KEY,  -- agent:<id>:subagent:<uuid> | agent:<id>:acp:<uuid>
    agent_id           TEXT NOT NULL,
    kind               TEXT NOT NULL,     -- subagent | acp
    parent_session_key TEXT NOT NULL,
    parent_agent_id    TEXT NOT NULL,
    depth              INTEGER NOT NULL,  -- 1 for a child of a session the Hub did not spawn
    label              TEXT,
    cwd                TEXT,
    mode               TEXT NOT NULL,     -- run | session
    cleanup            TEXT NOT NULL,     -- delete | keep
    run_id             TEXT NOT NULL,     -- the spawn's run
    created_at         TEXT NOT NULL,
    closed_at          TEXT
);
CREATE INDEX hub_sessions_by_parent ON hub_sessions (parent_session_key);

-- One run per sessions_send or sessions_spawn (and per operator send).
CREATE TABLE hub_runs (
    run_id                TEXT PRIMARY KEY,
    kind                  TEXT NOT NULL,  -- send | spawn
    source_tool           TEXT NOT NULL,  -- sessions_send | sessions_spawn | operator
    state                 TEXT NOT NULL,  -- accepted | running | … | uncertain (RunState)
    requester_agent_id    TEXT,           -- NULL: the operator
    requester_session_key TEXT,
    target_agent_id       TEXT NOT NULL,
    target_session_key    TEXT NOT NULL,
    correlation_id        TEXT NOT NULL,
    mode                  TEXT,           -- spawn: run | session
    cleanup               TEXT,           -- spawn: delete | keep
    timeout_seconds       INTEGER,        -- spawn: runTimeoutSeconds (NULL or 0: none)
    message               TEXT NOT NULL,  -- the message, or the spawn's task
    reply                 TEXT,
    error                 TEXT,
    created_at            TEXT NOT NULL,
    started_at            TEXT,
    finished_at           TEXT,
    updated_at            TEXT NOT NULL
);
CREATE INDEX hub_runs_by_state ON hub_runs (state);
CREATE INDEX hub_runs_by_requester ON hub_runs (requester_session_key);
CREATE INDEX hub_runs_by_target ON hub_runs (target_session_key);

-- What happened to a run, in order: each state it entered, and notes (a late event ignored).
CREATE TABLE hub_run_events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    at     TEXT NOT NULL,
    state  TEXT,                          -- the state entered; NULL for a note
    note   TEXT NOT NULL
);
CREATE INDEX hub_run_events_by_run ON hub_run_events (run_id, id);

-- The conversation a session last took a message from is found by session key (the announce
-- step posts there).
CREATE INDEX deliveries_by_session ON deliveries (session_key);
