//! The state's schema on PostgreSQL: its migrations, each run once, all of them in one
//! transaction under the state's write lock (PostgreSQL's DDL is transactional: a migration
//! that fails leaves nothing behind, and two replicas starting together migrate once).

use super::{Behavior, Conn, DbError, DbResult, PgConn, Query, params};

/// The migrations in order (`src/state/pg/`).
const MIGRATIONS: [&str; 1] = [include_str!("../pg/baseline.sql")];

/// The newest PostgreSQL schema this build knows.
pub(crate) const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// What [`migrate`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Migrated {
    /// The schema was made: an empty state.
    Created,
    /// Migrated from this version.
    From(i64),
    Current,
}

/// Brings the state in `conn`'s schema up to [`PG_SCHEMA_VERSION`]; refuses one written by a
/// newer deepcli (`Err` naming both versions).
pub(crate) fn migrate(conn: &mut PgConn) -> DbResult<Migrated> {
    let migrated = {
        let mut c = Conn::Postgres(conn);
        let tx = c.transaction(Behavior::Write)?;
        // Asked first, not `CREATE TABLE IF NOT EXISTS`: every connection migrates, and
        // PostgreSQL's notice that it exists would be in the log of each.
        let made: bool = tx.query_row(
            "SELECT to_regclass('deepcli_schema') IS NOT NULL",
            params![],
            |r| r.get(0),
        )?;
        if !made {
            tx.execute(
                "CREATE TABLE deepcli_schema (id BIGINT PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL)",
                params![],
            )?;
        }
        let version: i64 = tx.query_row(
            "SELECT coalesce((SELECT version FROM deepcli_schema WHERE id = 1), 0)",
            params![],
            |r| r.get(0),
        )?;
        if version > PG_SCHEMA_VERSION {
            return Err(DbError::Value(format!(
                "the state was written by a newer deepcli (PostgreSQL schema {version}, this build knows up to {PG_SCHEMA_VERSION}); upgrade deepcli"
            )));
        }
        if version == PG_SCHEMA_VERSION {
            return Ok(Migrated::Current);
        }
        for migration in &MIGRATIONS[version as usize..] {
            tx.batch(migration)?;
        }
        if version == 0 {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('lineage', ?1), ('serial', '0'), ('created_at', ?2), ('created_by', ?3)",
                params![
                    uuid::Uuid::new_v4().to_string(),
                    crate::clock::now(),
                    concat!("deepcli ", env!("CARGO_PKG_VERSION"))
                ],
            )?;
        }
        tx.execute(
            "INSERT INTO deepcli_schema (id, version) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            params![PG_SCHEMA_VERSION],
        )?;
        tx.commit()?;
        match version {
            0 => Migrated::Created,
            v => Migrated::From(v),
        }
    };
    conn.forget_statements();
    Ok(migrated)
}
