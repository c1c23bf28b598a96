-- deepcli state, migration 17: the system section each session was last given
-- (conversations.md, "What the agent is told"). The turn engine gives an agent's section again
-- when the one composed now has another hash; `sessions show KEY --prompt` prints what was
-- given. One row per session key, replaced each time: what an agent was told before is in its
-- runtime's own history, not here.
CREATE TABLE system_sections (
    session_key        TEXT PRIMARY KEY,
    agent_id           TEXT NOT NULL,
    runtime_session_id TEXT NOT NULL,   -- the runtime session it was given in
    hash               TEXT NOT NULL,   -- of everything but the date and time
    text               TEXT NOT NULL,
    at                 TEXT NOT NULL
);
CREATE INDEX system_sections_by_agent ON system_sections (agent_id);
