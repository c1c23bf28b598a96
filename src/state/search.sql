-- Migration 24: the transcript's words, indexed for a search across every session
-- (`sessions/search`, the console's Conversations page; docs/state.md "Searching the
-- transcript"). An FTS5 index over `transcript.text` with external content (the text is kept
-- once, in `transcript`); triggers keep it on every path that writes the transcript — turns,
-- resets, a trash move or restore, the retention prune — so none of them has to know it.
CREATE VIRTUAL TABLE transcript_fts USING fts5(
    text,
    content = 'transcript',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER transcript_fts_of_insert AFTER INSERT ON transcript BEGIN
    INSERT INTO transcript_fts (rowid, text) VALUES (NEW.id, NEW.text);
END;

CREATE TRIGGER transcript_fts_of_delete AFTER DELETE ON transcript BEGIN
    INSERT INTO transcript_fts (transcript_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
END;

CREATE TRIGGER transcript_fts_of_update AFTER UPDATE OF text ON transcript BEGIN
    INSERT INTO transcript_fts (transcript_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text);
    INSERT INTO transcript_fts (rowid, text) VALUES (NEW.id, NEW.text);
END;

-- What the transcript holds already (one pass over it).
INSERT INTO transcript_fts (transcript_fts) VALUES ('rebuild');
