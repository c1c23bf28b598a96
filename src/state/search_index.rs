//! The transcript's search index, in a database of its own beside the state's (`search.db`),
//! so that nothing it does — taking a row's words, dropping them, merging its segments — holds
//! the state database's write lock (migration 26; docs/state.md "Searching the transcript").
//!
//! Every write of a transcript row leaves its id in `search_queue` (a trigger, in the write's
//! own transaction); the state's upkeep thread ([`super::Checkpointer`]) takes the queue in
//! steps: it re-reads each queued row (gone rows leave the index, others are indexed anew),
//! writes the index, and only then deletes the ids it took. A step is done again whole after
//! a crash between the two, which changes nothing: indexing a row is "drop its words, add
//! what it holds now". A new index (none yet, or one made for another state) is filled from
//! the transcript itself, oldest row first, between the queue's steps.
//!
//! On PostgreSQL the same queue (kept by PL/pgSQL triggers) feeds `transcript_words`, a
//! `tsvector` of each row's words under a GIN index in the state itself: a step there is one
//! write transaction ([`pg_step`]). Both keep the words as [`words_of`] cuts them, so a search
//! finds the same lines on either.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::db::{Behavior, Conn, DbResult, Query, params as db_params};
use super::{StateDir, wait_for_the_lock};

/// The name the search index is attached under on a connection to the state.
pub(crate) const SCHEMA: &str = "search";

/// The index: contentless (the text stays once, in the state's `transcript`), its rows the
/// transcript rows' ids, deletable by id.
const TABLES: &str = "
    CREATE VIRTUAL TABLE IF NOT EXISTS words USING fts5(
        text,
        content = '',
        contentless_delete = 1,
        tokenize = 'unicode61 remove_diacritics 2'
    );
    -- `lineage`: the state this index is of; `filled`: the transcript id the first fill reached
    -- (`done` once it reached the end).
    CREATE TABLE IF NOT EXISTS progress (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The most rows one step takes.
const STEP_ROWS: i64 = 1000;
/// The most time one [`SearchIndexer::run`] takes before the checkpoint has its turn.
pub(crate) const RUN: Duration = Duration::from_millis(200);

/// Where the indexer deletes the queue's rows it took: a write of the state's database, so
/// one that holds its write lock. The upkeep thread runs at nice 10, and a turn waiting for a
/// niced holder waits for it to get a core: under a prune's millions of queued rows, a
/// turn's write waited 103 ms for the lock with no batch of the prune's holding it 30 ms.
/// `Away` deletes on a thread of the priority of the one that started it, on a connection of
/// its own; `Here`, on the indexer's connection to the state (`catch_up`, a thread that
/// could not start or is gone).
pub(crate) enum QueueDrops {
    Here,
    Away {
        asks: std::sync::mpsc::Sender<i64>,
        answers: std::sync::mpsc::Receiver<rusqlite::Result<usize>>,
    },
}

impl QueueDrops {
    /// Starts the thread that deletes, at the calling thread's priority, on a connection of
    /// its own to `dir`'s state; `Here` when it cannot be.
    pub(crate) fn start(dir: &StateDir) -> QueueDrops {
        // Its commits leave the WAL to the checkpointer, as a layer's do: copied back here, at
        // the serving priority, it would take a core from the turns.
        let opened = super::connect(&dir.db()).and_then(|conn| {
            conn.pragma_update(None, "wal_autocheckpoint", super::LAYER_AUTOCHECKPOINT)
                .map(|()| conn)
        });
        let conn = match opened {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "state: the search queue is dropped on the upkeep's connection");
                return QueueDrops::Here;
            }
        };
        let (asks, asked) = std::sync::mpsc::channel::<i64>();
        let (answer, answers) = std::sync::mpsc::channel();
        let started = std::thread::Builder::new()
            .name("search-queue".into())
            .spawn(move || {
                for through in asked {
                    if answer.send(drop_through(&conn, through)).is_err() {
                        break;
                    }
                }
            });
        match started {
            Ok(_) => QueueDrops::Away { asks, answers },
            Err(e) => {
                tracing::debug!(error = %e, "state: the search queue is dropped on the upkeep's connection");
                QueueDrops::Here
            }
        }
    }

    /// Deletes the queue's rows through `through`: how many.
    fn through(&mut self, state: &Connection, through: i64) -> rusqlite::Result<usize> {
        if let QueueDrops::Away { asks, answers } = self {
            if asks.send(through).is_ok()
                && let Ok(answer) = answers.recv()
            {
                return answer;
            }
            // Its thread is gone (a panic): here from now on, on a connection that may write.
            *self = QueueDrops::Here;
            state.pragma_update(None, "query_only", false)?;
        }
        drop_through(state, through)
    }
}

fn drop_through(state: &Connection, through: i64) -> rusqlite::Result<usize> {
    state.execute("DELETE FROM search_queue WHERE seq <= ?1", [through])
}

/// The search index's file beside the state database at `db`.
pub(crate) fn beside(db: &Path) -> PathBuf {
    db.with_file_name("search.db")
}

/// Attaches the search index to `conn` (a connection to the state) as [`SCHEMA`], once.
pub(crate) fn attach(conn: &Connection) -> rusqlite::Result<()> {
    let attached: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_database_list WHERE name = ?1)",
        [SCHEMA],
        |r| r.get(0),
    )?;
    if attached {
        return Ok(());
    }
    let db = conn.path().map(Path::new).unwrap_or(Path::new(""));
    // Read-only, so a search never makes the file (the upkeep makes it, private, at the
    // controller's start): one that is not there is an error, not an empty index.
    conn.execute(
        &format!("ATTACH DATABASE ?1 AS {SCHEMA}"),
        [read_only_uri(&beside(db))],
    )
    .map(drop)
}

/// `path` as an SQLite URI that opens it read-only.
fn read_only_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro");
    uri
}

/// What one [`SearchIndexer::run`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Indexed {
    /// Queued rows taken (indexed anew or dropped).
    pub queued: u64,
    /// Transcript rows the first fill indexed.
    pub filled: u64,
    /// Whether the index caught up: the queue empty and the first fill done.
    pub caught_up: bool,
}

/// Keeps the search index: the upkeep thread's half of this module.
pub(crate) struct SearchIndexer {
    index: Connection,
}

impl SearchIndexer {
    /// Opens (or makes, private to its owner) the search index of `dir`'s state; an index of
    /// another state (a restore, a state made anew) is emptied, to be filled again, and one
    /// that is not a database (a torn or foreign file: it is derived, nothing is lost) is made
    /// anew.
    pub(crate) fn open(dir: &StateDir, state: &Connection) -> rusqlite::Result<SearchIndexer> {
        match Self::open_as_is(dir, state) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                tracing::warn!(
                    path = %dir.search_db().display(),
                    "state: the search index is not a database; it is made anew"
                );
                for file in dir.search_db_files() {
                    let _ = std::fs::remove_file(file);
                }
                Self::open_as_is(dir, state)
            }
            opened => opened,
        }
    }

    fn open_as_is(dir: &StateDir, state: &Connection) -> rusqlite::Result<SearchIndexer> {
        let path = dir.search_db();
        make_private_file(&path).map_err(|e| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("{}: {e}", path.display())),
            )
        })?;
        let mut index = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        index.busy_handler(Some(wait_for_the_lock))?;
        index.pragma_update(None, "journal_mode", "WAL")?;
        index.pragma_update(None, "synchronous", "NORMAL")?;
        index.execute_batch(TABLES)?;
        let lineage: Option<String> = state
            .query_row("SELECT value FROM meta WHERE key = 'lineage'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let lineage = lineage.unwrap_or_default();
        let indexer = SearchIndexer { index };
        indexer.in_step(|index| {
            let of: Option<String> = progress(index, "lineage")?;
            if of.as_deref() != Some(lineage.as_str()) {
                index.execute("INSERT INTO words (words) VALUES ('delete-all')", [])?;
                index.execute("DELETE FROM progress", [])?;
                set_progress(index, "lineage", &lineage)?;
                // The fill reads every row as it is then: what is queued now is in it.
                let queued: i64 =
                    state.query_row("SELECT coalesce(max(seq), 0) FROM search_queue", [], |r| {
                        r.get(0)
                    })?;
                set_progress(index, "skip", &queued.to_string())?;
            }
            Ok(())
        })?;
        Ok(indexer)
    }

    /// Takes the queue and fills the index until it caught up or [`RUN`] has passed, resting
    /// after each step as long as it took: the index is kept on at most half of a core, the
    /// rest left to the turns (a prune queues millions of rows; the index may lag behind it,
    /// never the turns).
    pub(crate) fn run(
        &mut self,
        state: &Connection,
        drops: &mut QueueDrops,
    ) -> rusqlite::Result<Indexed> {
        let start = Instant::now();
        let mut indexed = Indexed::default();
        loop {
            let step = Instant::now();
            let queued = self.take_queue(state, drops)?;
            let filled = self.fill(state)?;
            indexed.queued += queued;
            indexed.filled += filled;
            if queued == 0 && filled == 0 {
                indexed.caught_up = true;
                return Ok(indexed);
            }
            if start.elapsed() >= RUN {
                return Ok(indexed);
            }
            std::thread::sleep(step.elapsed());
        }
    }

    /// One step of the queue: the rows it names, each as the transcript holds it now. The
    /// step holds the index's write lock from its read of the queue to its delete of the ids,
    /// so two processes' indexers never interleave.
    fn take_queue(&self, state: &Connection, drops: &mut QueueDrops) -> rusqlite::Result<u64> {
        self.in_step(|index| {
            let skip = progress(index, "skip")?.and_then(|s| s.parse::<i64>().ok());
            if let Some(skip) = skip {
                // Queued before the index was made: dropped a step at a time, not indexed.
                let first: Option<i64> =
                    state.query_row("SELECT min(seq) FROM search_queue", [], |r| r.get(0))?;
                match first {
                    Some(first) if first <= skip => {
                        let dropped = drops.through(state, skip.min(first + STEP_ROWS - 1))?;
                        return Ok(dropped as u64);
                    }
                    _ => {
                        index.execute("DELETE FROM progress WHERE key = 'skip'", [])?;
                    }
                }
            }
            let rows: Vec<(i64, i64, Option<String>)> = state
                .prepare_cached(
                    "SELECT q.seq, q.row_id, t.text FROM search_queue q
                     LEFT JOIN transcript t ON t.id = q.row_id
                     ORDER BY q.seq LIMIT ?1",
                )?
                .query_map([STEP_ROWS], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let Some(&(last, _, _)) = rows.last() else {
                return Ok(0);
            };
            for (_, id, text) in &rows {
                put(index, *id, text.as_deref())?;
            }
            // Once the words are in the index; a crash before this takes the step again.
            index.execute_batch("COMMIT; BEGIN IMMEDIATE")?;
            drops.through(state, last)?;
            Ok(rows.len() as u64)
        })
    }

    /// One step of the first fill: the next transcript rows by id.
    fn fill(&self, state: &Connection) -> rusqlite::Result<u64> {
        self.in_step(|index| {
            let reached = match progress(index, "filled")? {
                Some(done) if done == "done" => return Ok(0),
                Some(id) => id.parse::<i64>().unwrap_or(0),
                None => 0,
            };
            let rows: Vec<(i64, String)> = state
                .prepare_cached(
                    "SELECT id, text FROM transcript WHERE id > ?1 ORDER BY id LIMIT ?2",
                )?
                .query_map(params![reached, STEP_ROWS], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for (id, text) in &rows {
                put(index, *id, Some(text))?;
            }
            let next = match rows.last() {
                Some(&(id, _)) if rows.len() as i64 == STEP_ROWS => id.to_string(),
                _ => "done".to_string(),
            };
            set_progress(index, "filled", &next)?;
            Ok(rows.len() as u64)
        })
    }

    /// `step` in one write transaction of the index, committed when it returns `Ok`.
    fn in_step<T>(
        &self,
        step: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.index.execute_batch("BEGIN IMMEDIATE")?;
        match step(&self.index) {
            Ok(done) => {
                self.index.execute_batch("COMMIT")?;
                Ok(done)
            }
            Err(e) => {
                let _ = self.index.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// Row `id`'s words as `text` holds them (`None`: the row is gone, and so are its words).
fn put(index: &Connection, id: i64, text: Option<&str>) -> rusqlite::Result<()> {
    index
        .prepare_cached("DELETE FROM words WHERE rowid = ?1")?
        .execute([id])?;
    if let Some(text) = text {
        index
            .prepare_cached("INSERT INTO words (rowid, text) VALUES (?1, ?2)")?
            .execute(params![id, text])?;
    }
    Ok(())
}

fn progress(index: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    index
        .query_row("SELECT value FROM progress WHERE key = ?1", [key], |r| {
            r.get(0)
        })
        .optional()
}

fn set_progress(index: &Connection, key: &str, value: &str) -> rusqlite::Result<()> {
    index
        .execute(
            "INSERT INTO progress (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, value],
        )
        .map(drop)
}

/// Makes the index's file readable by its owner alone (made so, or made so now) before SQLite
/// opens it, so its WAL and shared memory files get the same mode: it holds the transcript's
/// words.
fn make_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::owner_only::restrict(path)
        }
        Err(e) => Err(e),
    }
}

/// Brings `dir`'s search index up to date now, as the upkeep thread does at each checkpoint.
#[cfg(test)]
pub(crate) fn catch_up(dir: &StateDir) -> rusqlite::Result<Indexed> {
    let state = super::connect(&dir.db())?;
    let mut indexer = SearchIndexer::open(dir, &state)?;
    let mut total = Indexed::default();
    loop {
        let run = indexer.run(&state, &mut QueueDrops::Here)?;
        total.queued += run.queued;
        total.filled += run.filled;
        if run.caught_up {
            total.caught_up = true;
            return Ok(total);
        }
    }
}

/// Where each word of `text` is: runs of letters and digits, as the index's tokenizer cuts
/// (SQLite's `unicode61`).
pub(crate) fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(at),
            (false, Some(s)) => {
                spans.push((s, at));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

/// `word` in lower case without its accents, as the index compares words (SQLite's
/// `remove_diacritics 2`).
pub(crate) fn folded(word: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    word.nfd()
        .filter(|c| !unicode_normalization::char::is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The words of `text`, folded, in order: what a search looks for.
pub(crate) fn query_words(text: &str) -> Vec<String> {
    word_spans(text)
        .into_iter()
        .map(|(a, b)| folded(&text[a..b]))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The words of `text` as PostgreSQL's index keeps them: [`query_words`], each once,
/// separated by spaces (made a `tsvector` as they are, no parser or dictionary between).
pub(crate) fn words_of(text: &str) -> String {
    let mut words = query_words(text);
    words.sort_unstable();
    words.dedup();
    words.join(" ")
}

/// One step of the search queue on PostgreSQL, one write transaction: the words of each
/// queued row as the transcript holds it now written to `transcript_words` (a row gone, its
/// words dropped), the ids taken out of the queue. Every writer of the transcript holds the
/// state's write lock, so the queue read here is all there is until the commit. The rows
/// taken.
pub(crate) fn pg_step(conn: &mut Conn<'_>) -> DbResult<u64> {
    let tx = conn.transaction(Behavior::Write)?;
    let rows: Vec<(i64, i64, Option<String>)> = tx.query_map(
        "SELECT q.seq, q.row_id, t.text FROM search_queue q
         LEFT JOIN transcript t ON t.id = q.row_id
         ORDER BY q.seq LIMIT ?1",
        db_params![STEP_ROWS],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let Some(&(last, _, _)) = rows.last() else {
        return Ok(0);
    };
    for (_, id, text) in &rows {
        match text {
            Some(text) => tx.execute(
                "INSERT INTO transcript_words (id, words)
                 VALUES (?1, array_to_tsvector(string_to_array(?2, ' ')))
                 ON CONFLICT (id) DO UPDATE SET words = excluded.words",
                db_params![id, words_of(text)],
            )?,
            None => tx.execute("DELETE FROM transcript_words WHERE id = ?1", db_params![id])?,
        };
    }
    tx.execute("DELETE FROM search_queue WHERE seq <= ?1", db_params![last])?;
    tx.commit()?;
    Ok(rows.len() as u64)
}

/// [`pg_step`] until the queue is empty; the rows taken (what the upkeep does, at once).
#[cfg(test)]
pub(crate) fn pg_catch_up(conn: &mut Conn<'_>) -> DbResult<u64> {
    let mut total = 0;
    loop {
        match pg_step(conn)? {
            0 => return Ok(total),
            n => total += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateStore;

    fn said(state: &Connection, text: &str) -> i64 {
        state
            .execute(
                "INSERT INTO transcript (session_key, provenance, text, at)
                 VALUES ('agent:a:main', 'inbound', ?1, '2026-01-01T00:00:00Z')",
                [text],
            )
            .unwrap();
        state.last_insert_rowid()
    }

    fn found(dir: &StateDir, word: &str) -> Vec<i64> {
        let index = Connection::open(dir.search_db()).unwrap();
        index
            .prepare("SELECT rowid FROM words WHERE words MATCH ?1 ORDER BY rowid")
            .unwrap()
            .query_map([word], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn queued(state: &Connection) -> i64 {
        state
            .query_row("SELECT count(*) FROM search_queue", [], |r| r.get(0))
            .unwrap()
    }

    /// A write only queues its row; the indexer takes the queue, and a row that went or
    /// changed leaves or changes in the index.
    #[test]
    fn the_index_follows_the_transcript_through_its_queue() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let state = store.sqlite_for_tests();
        let first = said(state, "the deploy failed");
        let second = said(state, "deploy again");
        assert_eq!(queued(state), 2);
        let done = catch_up(&dir).unwrap();
        assert!(done.caught_up);
        assert_eq!(found(&dir, "deploy"), [first, second]);
        assert_eq!(queued(state), 0, "the ids taken are dequeued");
        state
            .execute("DELETE FROM transcript WHERE id = ?1", [first])
            .unwrap();
        state
            .execute(
                "UPDATE transcript SET text = 'rolled back' WHERE id = ?1",
                [second],
            )
            .unwrap();
        assert_eq!(found(&dir, "deploy"), [first, second], "not yet taken");
        catch_up(&dir).unwrap();
        assert!(found(&dir, "deploy").is_empty());
        assert_eq!(found(&dir, "rolled"), [second]);
    }

    /// The queue's deletes run on a connection of their own, whose commits leave even a long
    /// WAL to the checkpointer: none copies it back on the serving threads' priority.
    #[test]
    fn the_queue_is_dropped_without_copying_the_wal_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let state = store.sqlite_for_tests();
        state.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        // Past SQLite's own threshold of 1,000 pages.
        state
            .execute_batch(
                "CREATE TABLE ballast (b BLOB);
                 INSERT INTO ballast VALUES (zeroblob(8 * 1024 * 1024));",
            )
            .unwrap();
        let last = said(state, "queued");
        let db_len = || std::fs::metadata(dir.db()).unwrap().len();
        let before = db_len();
        let mut drops = QueueDrops::start(&dir);
        assert!(matches!(drops, QueueDrops::Away { .. }));
        assert!(drops.through(state, last).unwrap() >= 1);
        assert_eq!(queued(state), 0);
        assert_eq!(db_len(), before, "the delete's commit copied the WAL back");
    }

    /// An index of another state (a restore; a state made anew beside an old index) is
    /// emptied and filled from the transcript; a fill goes on where it stopped.
    #[test]
    fn a_new_index_is_filled_from_the_transcript() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let state = store.sqlite_for_tests();
        let ids: Vec<i64> = (0..STEP_ROWS + 5)
            .map(|n| said(state, &format!("line {n} of the deploy")))
            .collect();
        // What was queued before the index was made is in the fill: dropped, not indexed.
        let indexer = SearchIndexer::open(&dir, state).unwrap();
        assert_eq!(
            indexer.take_queue(state, &mut QueueDrops::Here).unwrap(),
            STEP_ROWS as u64
        );
        assert_eq!(indexer.take_queue(state, &mut QueueDrops::Here).unwrap(), 5);
        assert_eq!(indexer.take_queue(state, &mut QueueDrops::Here).unwrap(), 0);
        assert_eq!(queued(state), 0);
        assert!(found(&dir, "deploy").is_empty(), "dropped, not indexed");
        assert_eq!(indexer.fill(state).unwrap(), STEP_ROWS as u64);
        // A restart between two steps of the fill: it goes on.
        drop(indexer);
        let mut indexer = SearchIndexer::open(&dir, state).unwrap();
        assert!(indexer.run(state, &mut QueueDrops::Here).unwrap().caught_up);
        assert_eq!(found(&dir, "deploy"), ids);
        // Another state's index: emptied, then filled with this one's rows.
        indexer
            .index
            .execute(
                "UPDATE progress SET value = 'another' WHERE key = 'lineage'",
                [],
            )
            .unwrap();
        indexer
            .index
            .execute(
                "INSERT INTO words (rowid, text) VALUES (999999, 'deploy elsewhere')",
                [],
            )
            .unwrap();
        drop(indexer);
        catch_up(&dir).unwrap();
        assert_eq!(found(&dir, "deploy"), ids);
        assert!(found(&dir, "elsewhere").is_empty());
    }

    /// A torn or foreign file where the index goes is made anew, and filled.
    #[test]
    fn an_index_that_is_not_a_database_is_made_anew() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = StateStore::open(&dir).unwrap();
        let id = said(store.sqlite_for_tests(), "deploy");
        std::fs::write(dir.search_db(), vec![0x5a; 8192]).unwrap();
        catch_up(&dir).unwrap();
        assert_eq!(found(&dir, "deploy"), [id]);
    }

    /// The index holds the transcript's words: its owner's alone, even when a file was there
    /// before with another mode.
    #[test]
    fn the_index_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let _store = StateStore::open(&dir).unwrap();
        catch_up(&dir).unwrap();
        let mode = || {
            std::fs::metadata(dir.search_db())
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(), 0o600);
        std::fs::set_permissions(dir.search_db(), std::fs::Permissions::from_mode(0o644)).unwrap();
        catch_up(&dir).unwrap();
        assert_eq!(mode(), 0o600);
    }

    /// A search attaches the index read-only, wherever the state is, and never makes it.
    #[test]
    fn a_search_attaches_the_index_read_only_and_never_makes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path().join("a dir?#%"));
        let store = StateStore::open(&dir).unwrap();
        assert!(
            attach(store.sqlite_for_tests()).is_err(),
            "no index yet: an error"
        );
        assert!(!dir.search_db().exists(), "and no file made");
        let id = said(store.sqlite_for_tests(), "deploy");
        catch_up(&dir).unwrap();
        attach(store.sqlite_for_tests()).unwrap();
        attach(store.sqlite_for_tests()).unwrap();
        let found: i64 = store
            .sqlite_for_tests()
            .query_row(
                "SELECT rowid FROM search.words WHERE words MATCH 'deploy'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(found, id);
        let refused = store
            .sqlite_for_tests()
            .execute("INSERT INTO search.words (rowid, text) VALUES (7, 'x')", []);
        assert!(refused.is_err(), "read-only");
    }
}
