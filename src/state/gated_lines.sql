-- Migration 27: gated inbound messages in their session's history (docs/state.md, "Gated
-- messages in the history"). A message the inbound policy gated is recorded as a delivery,
-- never as a transcript row (the agent never saw it; nothing that reads the transcript for
-- the agent or the search must find it). Its delivery now keeps what `sessions/history`
-- shows of it among the session's lines:
--   line_id  its place among the transcript's ids: a number taken from the transcript's
--            AUTOINCREMENT sequence in the delivery's transaction, so it sorts among the
--            session's lines in the order they were recorded and no transcript row ever
--            takes it; NULL for every other delivery (and for a gated one before schema 27)
--   sender   the envelope's `sender`, as the transcript keeps an inbound message's (JSON)
--   text     the message's text
ALTER TABLE deliveries ADD COLUMN line_id INTEGER;
ALTER TABLE deliveries ADD COLUMN sender TEXT;
ALTER TABLE deliveries ADD COLUMN text TEXT;
-- Only gated deliveries are in it: a session with none costs the history one probe.
CREATE INDEX deliveries_gated_lines ON deliveries (session_key, line_id) WHERE line_id IS NOT NULL;

-- A deleted agent's gated lines go to the trash with its deliveries and come back with them.
ALTER TABLE trash_deliveries ADD COLUMN line_id INTEGER;
ALTER TABLE trash_deliveries ADD COLUMN sender TEXT;
ALTER TABLE trash_deliveries ADD COLUMN text TEXT;
