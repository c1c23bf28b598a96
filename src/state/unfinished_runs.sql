-- Migration 30: the runs not yet in a final state, which a controller reconciles at every start
-- (`unfinished_runs`): found through this index instead of reading every run (3.4 s at
-- 500,000 runs, measured with scripts/bench-state). Its condition is the query's, word for word.
CREATE INDEX hub_runs_unfinished ON hub_runs (created_at)
    WHERE state NOT IN ('completed', 'failed', 'timed_out', 'cancelled', 'uncertain', 'paused');
