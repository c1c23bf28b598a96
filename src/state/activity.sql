-- Migration 22: what a year-old state's reads need kept, not recomputed (scripts/bench-state).
--
-- Each session's last activity, for the session lists (newest first, a page at a time): the
-- newest of its transcript's rows, its runtime session's last use and its spawn. Triggers on
-- those tables keep it, so every path that writes them (turns, resets, spawns, a trash
-- restore) keeps it too. A row outlives its session (a trash move, a prune): the lists show a
-- session only while one of those tables still holds it.
CREATE TABLE session_activity (
    session_key    TEXT PRIMARY KEY,
    -- the agent its runtime session or spawn records; NULL while neither is known
    recorded_agent TEXT,
    -- the agent the key names (`agent:<id>:<rest>`, both parts non-empty), as
    -- `hub::store::agent_of` reads it (a unit test holds the two equal), else the recorded one
    agent_id       TEXT GENERATED ALWAYS AS (coalesce(
        CASE WHEN substr(session_key, 1, 6) = 'agent:'
                  AND instr(substr(session_key, 7), ':') > 1
                  AND length(session_key) > 6 + instr(substr(session_key, 7), ':')
             THEN substr(session_key, 7, instr(substr(session_key, 7), ':') - 1) END,
        recorded_agent)) VIRTUAL,
    last_at        TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_activity_by_last ON session_activity (last_at);
CREATE INDEX session_activity_by_agent ON session_activity (agent_id, last_at);

CREATE TRIGGER session_activity_of_transcript AFTER INSERT ON transcript BEGIN
    INSERT INTO session_activity (session_key, last_at) VALUES (NEW.session_key, NEW.at)
    ON CONFLICT (session_key) DO UPDATE SET last_at = max(last_at, excluded.last_at);
END;

CREATE TRIGGER session_activity_of_session AFTER INSERT ON sessions BEGIN
    INSERT INTO session_activity (session_key, recorded_agent, last_at)
    VALUES (NEW.session_key, NEW.agent_id, NEW.updated_at)
    ON CONFLICT (session_key) DO UPDATE SET
        last_at = max(last_at, excluded.last_at), recorded_agent = excluded.recorded_agent;
END;

CREATE TRIGGER session_activity_of_session_use AFTER UPDATE OF updated_at ON sessions BEGIN
    INSERT INTO session_activity (session_key, recorded_agent, last_at)
    VALUES (NEW.session_key, NEW.agent_id, NEW.updated_at)
    ON CONFLICT (session_key) DO UPDATE SET
        last_at = max(last_at, excluded.last_at), recorded_agent = excluded.recorded_agent;
END;

CREATE TRIGGER session_activity_of_spawn AFTER INSERT ON hub_sessions BEGIN
    INSERT INTO session_activity (session_key, recorded_agent, last_at)
    VALUES (NEW.session_key, NEW.agent_id, NEW.created_at)
    ON CONFLICT (session_key) DO UPDATE SET
        last_at = max(last_at, excluded.last_at),
        recorded_agent = coalesce(recorded_agent, excluded.recorded_agent);
END;

-- What the state holds already: the newest transcript row of each session is found through
-- its index (one pass over the index).
INSERT INTO session_activity (session_key, recorded_agent, last_at)
SELECT k, max(agent), max(at)
FROM (SELECT session_key AS k, agent_id AS agent, updated_at AS at FROM sessions
      UNION ALL SELECT session_key, agent_id, created_at FROM hub_sessions
      UNION ALL SELECT t.session_key, NULL, t.at FROM transcript t
          JOIN (SELECT session_key, max(id) AS last FROM transcript GROUP BY session_key) l
            ON t.id = l.last)
GROUP BY k;

-- The transcript rows a delivery recorded (its message, then the agent's reply), kept with it
-- so the audit points at them without searching the session's transcript: `asked_rows` the
-- ids of the message's rows, comma-separated ('' when it recorded none), `reply_row` the
-- reply's. NULL for a delivery recorded before this migration: the audit searches for those.
ALTER TABLE deliveries ADD COLUMN asked_rows TEXT;
ALTER TABLE deliveries ADD COLUMN reply_row INTEGER;
