-- deepcli state, migration 10: approvals (approvals.md). A person's decision on what an agent
-- asked to do: an ACP `session/request_permission` of its runtime, or a management request
-- through the Hub's `management_request` tool. Every request is kept with what happened to it,
-- also those a mode or a rule answered without a person, so the audit trail can read them.

CREATE TABLE approvals (
    id                 TEXT PRIMARY KEY,  -- short and unguessable (10 base32 characters)
    source             TEXT NOT NULL,     -- permission | management
    agent_id           TEXT NOT NULL,
    session_key        TEXT,              -- the agent's session that asked
    runtime_session_id TEXT,              -- the ACP session id (permission requests)
    run_id             TEXT,              -- the Hub run whose turn asked, if any
    requester          TEXT NOT NULL,     -- provenance JSON: agent, session, the turn's origin
    action             TEXT NOT NULL,     -- JSON: the tool call (id, kind, title, content) or {method, params, reason}
    content_hash       TEXT NOT NULL,     -- sha256 of the action: what a decision is bound to
    options            TEXT NOT NULL,     -- JSON: the options the agent offered
    policy_hash        TEXT NOT NULL,     -- the agent's `permissions` when it asked: a change voids
    route              TEXT NOT NULL,     -- operator | origin | both
    origin             TEXT,              -- JSON: the conversation asked in (route origin|both)
    state              TEXT NOT NULL,     -- pending | approved | denied | expired | void
    created_at         TEXT NOT NULL,
    expires_at         TEXT NOT NULL,
    decided_at         TEXT,
    decided_by         TEXT,              -- operator | <channel>:<senderId> | mode:<mode> | rule:<id> | deepcli
    decision           TEXT,              -- the option kind answered: allow_once, allow_always, reject_once, reject_always
    note               TEXT NOT NULL DEFAULT ''  -- why void or expired; a management request's result
);
CREATE INDEX approvals_pending ON approvals (state, created_at);
CREATE INDEX approvals_agent ON approvals (agent_id, created_at);

-- What happened to each approval, in order: asked, notified, decided, refused (a chat sender
-- not in `approvers`), expired, voided, auto (a mode or rule answered), executed.
CREATE TABLE approval_events (
    id          INTEGER PRIMARY KEY,
    approval_id TEXT NOT NULL,
    at          TEXT NOT NULL,
    event       TEXT NOT NULL,
    actor       TEXT,                     -- who: operator, <channel>:<senderId>, deepcli
    note        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX approval_events_of ON approval_events (approval_id, id);

-- `allow_always` answers: the agent's later requests of the same tool kind and title are
-- allowed without asking, until revoked.
CREATE TABLE approval_rules (
    id            TEXT PRIMARY KEY,       -- short (10 base32 characters)
    agent_id      TEXT NOT NULL,
    tool_kind     TEXT NOT NULL,
    title_pattern TEXT NOT NULL,          -- the exact title; `*` matches any run of characters
    created_at    TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    approval_id   TEXT NOT NULL,          -- the approval answered with --always
    revoked_at    TEXT,
    revoked_by    TEXT
);
CREATE INDEX approval_rules_live ON approval_rules (agent_id) WHERE revoked_at IS NULL;
