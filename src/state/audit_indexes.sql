-- Migration 32: `audit --since` reads, from a time on, the outbox's rows posted, dead or held,
-- the approvals' and the tasks' events and the turns' cancels. Each read scanned its whole
-- table, and the outbox alone holds a year of a busy hub's announces, prompts and heartbeats.
-- Plain indexes, so a prune reads their pages before it takes the write lock (as it does every
-- plain index's); the outbox's is sought as `done_at >= ? OR (done_at IS NULL AND at >= ?)`.
CREATE INDEX outbox_by_done ON outbox (done_at, at);
CREATE INDEX approval_events_by_at ON approval_events (at);
CREATE INDEX task_events_by_at ON task_events (at);
CREATE INDEX turn_cancels_by_requested ON turn_cancels (requested_at);
