-- deepcli state, migration 11: budgets, cancels and loop pauses (approvals.md). What a budget
-- counts, and what it refused, so that a restarted controller counts on and the audit trail
-- (`deepcli audit`) can tell it; the cancels of turns and their outcome.

-- One row per turn delivered to an agent's session (with the usage its runtime reported:
-- NULL is unknown, never 0), per spawn, and per turn or spawn a budget refused.
CREATE TABLE budget_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id    TEXT NOT NULL,
    kind        TEXT NOT NULL,        -- turn | spawn | refusal
    at_ms       INTEGER NOT NULL,     -- ms since the epoch (windows are counted on it)
    at          TEXT NOT NULL,
    session_key TEXT,
    run_id      TEXT,                 -- the Hub run, when a run carried the turn
    tokens      INTEGER,              -- turn: tokens the runtime reported; NULL: unknown
    cost_micros INTEGER,              -- turn: cost in micro-USD the runtime reported; NULL: unknown
    budget      TEXT,                 -- refusal: the budget (turnsPerHour, …)
    detail      TEXT                  -- refusal: the sentence the caller got
);
CREATE INDEX budget_events_by_time ON budget_events (at_ms);
CREATE INDEX budget_events_by_session ON budget_events (session_key);

-- A cancel of a running turn (ACP session/cancel): asked for by the operator, by turnSeconds
-- or by an inbound message's prompt timeout, and what came of it.
CREATE TABLE turn_cancels (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id    TEXT NOT NULL,
    session_key TEXT NOT NULL,
    run_id      TEXT,
    why         TEXT NOT NULL,        -- operator | turnSeconds | timeout
    state       TEXT NOT NULL,        -- requested | confirmed | uncertain
    note        TEXT,
    requested_at TEXT NOT NULL,
    decided_at  TEXT
);
CREATE INDEX turn_cancels_by_session ON turn_cancels (session_key);

-- A loop the Hub paused (approvals.md, "Loop pauses"): two sessions waking each other past
-- budgets.loopTurns within budgets.loopWindowSeconds, or a tree of sessions whose runs passed
-- budgets.treeTurns. The send that passed it waits as a `paused` run until the operator
-- decides (`deepcli runs resume|stop <run id>`); counting starts over after a decision.
CREATE TABLE loop_pauses (
    run_id      TEXT PRIMARY KEY,     -- the paused run
    kind        TEXT NOT NULL,        -- pair | tree
    scope       TEXT NOT NULL,        -- pair: the two session keys, sorted, joined by a space; tree: its root
    count       INTEGER NOT NULL,     -- what was counted when it paused
    bound       INTEGER NOT NULL,     -- the bound it passed
    state       TEXT NOT NULL,        -- paused | resumed | stopped
    created_at  TEXT NOT NULL,
    decided_at  TEXT,
    after_rowid INTEGER,              -- decided: the last hub_runs rowid then; counting resumes after it
    note        TEXT
);
CREATE INDEX loop_pauses_by_scope ON loop_pauses (scope, created_at);
