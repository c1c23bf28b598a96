-- deepcli state, migration 1. Times are RFC 3339 UTC text; JSON columns hold serde output
-- with secret references only, never secret values.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One writer at a time (see lease.rs).
CREATE TABLE lease (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    pid           INTEGER NOT NULL,
    host          TEXT NOT NULL,
    process_start TEXT,
    purpose       TEXT NOT NULL,
    acquired_at   TEXT NOT NULL,
    heartbeat_at  TEXT NOT NULL
);

-- Managed agents as last applied.
CREATE TABLE agents (
    id             TEXT PRIMARY KEY,
    spec_hash      TEXT NOT NULL,
    spec           TEXT NOT NULL,
    workspace      TEXT NOT NULL,
    agent_dir      TEXT NOT NULL,
    sessions_dir   TEXT NOT NULL,
    protect        INTEGER NOT NULL,
    -- which paths deepcli created or adopted for this agent: only those ever go to trash
    owns_workspace INTEGER NOT NULL,
    owns_agent_dir INTEGER NOT NULL,
    owns_sessions  INTEGER NOT NULL,
    applied_serial INTEGER NOT NULL
);

-- Bootstrap files deepcli wrote, with the hash of what it wrote.
CREATE TABLE bootstrap_files (
    agent_id TEXT NOT NULL,
    name     TEXT NOT NULL,
    path     TEXT NOT NULL,
    hash     TEXT NOT NULL,
    PRIMARY KEY (agent_id, name)
);

CREATE TABLE channel_accounts (
    channel TEXT NOT NULL,
    account TEXT NOT NULL,
    spec    TEXT NOT NULL,
    hash    TEXT NOT NULL,
    PRIMARY KEY (channel, account)
);

CREATE TABLE bindings (
    key      TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    spec     TEXT NOT NULL,
    position INTEGER NOT NULL
);

-- What the controller runs (issue: deepcli up); apply records the desired state.
CREATE TABLE runtimes (
    agent_id      TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    spec_hash     TEXT NOT NULL,
    desired       TEXT NOT NULL,
    status        TEXT NOT NULL,
    pid           INTEGER,
    process_start TEXT,
    started_at    TEXT,
    restarts      INTEGER NOT NULL DEFAULT 0,
    last_exit     TEXT,
    last_error    TEXT,
    info          TEXT,
    updated_at    TEXT NOT NULL
);

CREATE TABLE routing_plans (
    generation   INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL,
    config_hash  TEXT NOT NULL,
    bindings     INTEGER NOT NULL,
    published_at TEXT NOT NULL
);

-- Every apply step, recorded before (started) and after (done).
CREATE TABLE journal (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    serial      INTEGER NOT NULL,
    step        TEXT NOT NULL,
    detail      TEXT,
    status      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT
);
-- Steps a crash left open: looked up on every apply, however long the journal grows.
CREATE INDEX journal_open ON journal (step) WHERE status = 'started';

CREATE TABLE trash (
    entry       TEXT PRIMARY KEY,
    agent_id    TEXT NOT NULL,
    dir         TEXT NOT NULL,
    serial      INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    manifest    TEXT NOT NULL,
    restored_at TEXT
);

CREATE TABLE history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    serial      INTEGER NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    user        TEXT NOT NULL,
    host        TEXT NOT NULL,
    source      TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    git_commit  TEXT,
    added       INTEGER NOT NULL DEFAULT 0,
    changed     INTEGER NOT NULL DEFAULT 0,
    removed     INTEGER NOT NULL DEFAULT 0,
    outcome     TEXT NOT NULL,
    error       TEXT
);
