//! What can be wrong with an existing `state.db`, found before anything writes to it. Only a
//! missing file is a new state: an empty, unreadable, cut-off or foreign file is refused, and
//! left as it is for the operator to restore (docs/state.md, "An empty or damaged state.db").

use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, ErrorCode, OptionalExtension};

use super::{StateDir, StateError};

/// Why an existing `state.db` cannot be the state. Reads after "state database `<path>`".
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    #[error("is empty (0 bytes)")]
    Empty,
    /// SQLite would replay the log onto whatever database is made next: a mix of two states.
    #[error("is missing, but its write-ahead log `state.db-wal` is there")]
    WalWithoutDb,
    #[error("cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("is not a regular file")]
    NotAFile,
    #[error("is not an SQLite database")]
    NotSqlite,
    #[error("is truncated: {len} bytes, shorter than an SQLite header")]
    CutInHeader { len: u64 },
    #[error("is truncated: {len} bytes, where its header says {expected}")]
    Truncated { len: u64, expected: u64 },
    #[error("is damaged: {0}")]
    Malformed(rusqlite::Error),
    #[error(
        "is an SQLite database but not a deepcli state (it has no `meta` table with a lineage)"
    )]
    NotDeepcli,
}

/// The first bytes of every SQLite database file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The size of the database header (sqlite.org/fileformat.html, 1.3).
const HEADER: usize = 100;

/// What is at `dir`'s `state.db` before SQLite opens it: `Ok(false)` when nothing is, nor a WAL
/// (a new state), `Ok(true)` for a file that looks like a whole SQLite database. Reads only.
pub(super) fn inspect(dir: &StateDir) -> Result<bool, StateError> {
    let db = dir.db();
    look(&db, &dir.db_wal()).map_err(|damage| damaged(&db, damage))
}

fn look(db: &Path, wal: &Path) -> Result<bool, Damage> {
    let meta = match std::fs::metadata(db) {
        Ok(meta) => meta,
        // A dangling symlink is something, not "no state yet".
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && db.symlink_metadata().is_err() => {
            return match std::fs::metadata(wal) {
                Ok(wal) if wal.len() > 0 => Err(Damage::WalWithoutDb),
                _ => Ok(false),
            };
        }
        Err(e) => return Err(Damage::Unreadable(e)),
    };
    if !meta.is_file() {
        return Err(Damage::NotAFile);
    }
    let len = meta.len();
    if len == 0 {
        return Err(Damage::Empty);
    }
    let mut header = Vec::with_capacity(HEADER);
    std::fs::File::open(db)
        .and_then(|f| f.take(HEADER as u64).read_to_end(&mut header))
        .map_err(Damage::Unreadable)?;
    if !header.starts_with(&MAGIC[..header.len().min(MAGIC.len())]) {
        return Err(Damage::NotSqlite);
    }
    if header.len() < HEADER {
        return Err(Damage::CutInHeader { len });
    }
    // The page count at offset 28 is valid when the change counter (24) equals the
    // version-valid-for number (92). A WAL may hold pages the file does not have yet (a
    // checkpoint cut short): then SQLite, which reads both, judges.
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        size => u64::from(size),
    };
    let pages = u64::from(be32(28));
    let wal_empty = std::fs::metadata(wal).map_or(true, |m| m.len() == 0);
    if be32(24) == be32(92) && pages > 0 && wal_empty && len < page_size * pages {
        return Err(Damage::Truncated {
            len,
            expected: page_size * pages,
        });
    }
    Ok(true)
}

/// That the open database at `db` is a deepcli state: SQLite can read its schema, and it has
/// a lineage. Reads only. An error that is not about the file's content (a lock held too long)
/// is SQLite's.
pub(super) fn check(conn: &Connection, db: &Path) -> Result<(), StateError> {
    let refuse = |e: rusqlite::Error| {
        let damage = match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => Damage::NotSqlite,
            Some(ErrorCode::DatabaseCorrupt) => Damage::Malformed(e),
            _ => {
                return StateError::Sqlite {
                    path: db.to_path_buf(),
                    source: e,
                };
            }
        };
        damaged(db, damage)
    };
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get(0),
        )
        .map_err(refuse)?;
    let lineage: Option<String> = if tables == 0 {
        None
    } else {
        conn.query_row("SELECT value FROM meta WHERE key = 'lineage'", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(refuse)?
    };
    match lineage {
        Some(_) => Ok(()),
        None => Err(damaged(db, Damage::NotDeepcli)),
    }
}

pub(super) fn damaged(db: &Path, damage: Damage) -> StateError {
    StateError::Damaged {
        path: db.to_path_buf(),
        damage,
    }
}
