-- deepcli state, migration 14: A2A messageId dedupe (a2a.md). A peer's
-- retried message (the same `messageId`) is answered with the task it made the first time; the
-- lookup is by (peer, messageId), over the runs that carry the messages.
CREATE INDEX a2a_task_runs_by_message ON a2a_task_runs (message_id);
