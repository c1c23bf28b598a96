-- Migration 21: the indexes the reads of a year-old state need (scripts/bench-state: 10M
-- transcript rows, 500k Hub runs), each where a read scanned a whole table.
-- `runs list` and the Hub's run pages: the newest runs first.
CREATE INDEX hub_runs_by_created ON hub_runs (created_at);
-- `audit --since`: the runs' events and the budget refusals from a time on.
CREATE INDEX hub_run_events_by_at ON hub_run_events (at);
CREATE INDEX budget_refusals_by_at ON budget_events (at) WHERE kind = 'refusal';
-- Where a session's current segment begins (its last `/new`): every turn's prompt and
-- `sessions history` look it up, and a session without one read all its rows to know.
CREATE INDEX transcript_resets ON transcript (session_key, id) WHERE provenance = 'reset';
