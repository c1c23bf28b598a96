-- deepcli state, migration 11: budgets, cancels and loop pauses (budgets.md). What a budget
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
