-- Migration 20: the trace of an inbound message and of a Hub run (`up --otlp-endpoint`),
-- written once its delivery or run has begun in a traced controller; NULL otherwise. The audit
-- shows it.
ALTER TABLE deliveries ADD COLUMN trace_id TEXT;
ALTER TABLE hub_runs ADD COLUMN trace_id TEXT;
