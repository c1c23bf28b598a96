//! One seam over the state's two backends: SQLite, embedded (the default: a state directory),
//! and PostgreSQL (a state URL: several controllers on one state, issue 43).
//!
//! A store written on this seam runs the same statements on both. They are written in the
//! dialect both take — numbered parameters `?1`, `ON CONFLICT … DO …` upserts, `RETURNING`,
//! explicit integer keys — and [`postgres`] turns `?N` into PostgreSQL's `$N`. What only one
//! backend can say is chosen by [`Query::backend`], in the store, where it can be read.
//!
//! Values cross the seam as [`Value`] (what a parameter is) and [`Column`] (what a row holds):
//! the five kinds SQLite stores. PostgreSQL's typed columns take them by the column's type (an
//! integer into `bigint`, `integer` or `boolean`), so one store binds an `i64` or a `bool`
//! whatever the backend.
//!
//! Transactions keep SQLite's meaning on PostgreSQL ([`Behavior`]): a transaction that writes
//! takes the state's write lock first (SQLite's `BEGIN IMMEDIATE`; an advisory lock in
//! PostgreSQL), so a read that decides a write is never raced by another writer, whichever
//! replica it runs on. A statement run outside a transaction that writes takes it too.

mod pg_schema;
pub(crate) mod postgres;
mod value;

pub(crate) use pg_schema::migrate as migrate_postgres;
pub(crate) use postgres::{PgConn, PgUrl};
pub(crate) use value::{Column, FromColumn, ToValue, Value};

/// Which database a connection speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The function that takes the larger of its arguments: SQLite's scalar `max`,
    /// PostgreSQL's `greatest`.
    pub(crate) fn greatest(self) -> &'static str {
        match self {
            Backend::Sqlite => "max",
            Backend::Postgres => "greatest",
        }
    }
}

/// What went wrong in a statement.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", postgres::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A statement that must return a row returned none.
    #[error("no row")]
    NoRow,
    /// A write made for a claim that its writer no longer holds ([`crate::state::cluster`]).
    #[error("{0}")]
    Fenced(String),
    /// A column or parameter whose value the store cannot take.
    #[error("{0}")]
    Value(String),
}

pub(crate) type DbResult<T> = std::result::Result<T, DbError>;

/// `Ok(None)` for a statement that found no row (rusqlite's `optional()`).
pub(crate) trait Optional<T> {
    fn optional(self) -> DbResult<Option<T>>;
}

impl<T> Optional<T> for DbResult<T> {
    fn optional(self) -> DbResult<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRow) => Ok(None),
            Err(DbError::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The parameters of a statement: `params![a, b]`.
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::state::db::ToValue]
    };
    ($($x:expr),+ $(,)?) => {
        &[$(&$x as &dyn $crate::state::db::ToValue),+] as &[&dyn $crate::state::db::ToValue]
    };
}
pub(crate) use params;

/// How a transaction begins. Every transaction of the stores on the seam writes so far; one
/// that only reads (a snapshot: PostgreSQL's `REPEATABLE READ`) comes with the first store
/// that needs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    /// One that writes: it holds the state's write lock from its start, so what it read still
    /// holds when it writes (SQLite's `BEGIN IMMEDIATE`; in PostgreSQL `READ COMMITTED` under a
    /// transaction-scoped advisory lock of the state's schema).
    Write,
}

/// A connection, borrowed: what a store's statements run on.
pub(crate) enum Conn<'a> {
    Sqlite(&'a mut rusqlite::Connection),
    Postgres(&'a mut PgConn),
}

impl Conn<'_> {
    /// Begins a transaction; it rolls back when dropped uncommitted.
    pub(crate) fn transaction(&mut self, behavior: Behavior) -> DbResult<Tx<'_>> {
        Ok(match self {
            Conn::Sqlite(c) => Tx::Sqlite(c.transaction_with_behavior(match behavior {
                Behavior::Write => rusqlite::TransactionBehavior::Immediate,
            })?),
            Conn::Postgres(c) => Tx::Postgres(c.begin(behavior)?),
        })
    }
}

/// A connection, owned: a store that holds one of its own (the controller's state store).
pub(crate) enum Owned {
    Sqlite(rusqlite::Connection),
    Postgres(PgConn),
}

impl Owned {
    /// Borrowed, for a transaction. A PostgreSQL session that PostgreSQL closed (it
    /// restarted, or could not be reached) is opened again first, if it can be: else the
    /// call fails as on the closed one, and the next tries again.
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            Owned::Sqlite(c) => Conn::Sqlite(c),
            Owned::Postgres(c) => {
                if let Ok(true) = c.reopen() {
                    tracing::info!("state: a closed PostgreSQL session was opened again");
                }
                Conn::Postgres(c)
            }
        }
    }
}

impl Query for Owned {
    fn target(&self) -> Target<'_> {
        match self {
            Owned::Sqlite(c) => Target::Sqlite(c),
            Owned::Postgres(c) => Target::Postgres {
                conn: c,
                in_tx: false,
            },
        }
    }
}

/// A transaction open on a connection.
pub(crate) enum Tx<'a> {
    Sqlite(rusqlite::Transaction<'a>),
    Postgres(postgres::PgTx<'a>),
}

impl Tx<'_> {
    pub(crate) fn commit(self) -> DbResult<()> {
        match self {
            Tx::Sqlite(tx) => Ok(tx.commit()?),
            Tx::Postgres(tx) => tx.commit(),
        }
    }
}

/// Where a statement runs: a connection (each statement its own transaction) or a transaction.
#[doc(hidden)]
pub(crate) enum Target<'a> {
    Sqlite(&'a rusqlite::Connection),
    /// `in_tx`: inside a transaction (a write needs no lock of its own).
    Postgres {
        conn: &'a PgConn,
        in_tx: bool,
    },
}

/// The statements, on a connection or in a transaction.
pub(crate) trait Query {
    #[doc(hidden)]
    fn target(&self) -> Target<'_>;

    fn backend(&self) -> Backend {
        match self.target() {
            Target::Sqlite(_) => Backend::Sqlite,
            Target::Postgres { .. } => Backend::Postgres,
        }
    }

    /// Runs statements separated by `;`, with no parameters: a schema's change, in a
    /// transaction (on PostgreSQL it takes no write lock of its own).
    fn batch(&self, sql: &str) -> DbResult<()> {
        match self.target() {
            Target::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Target::Postgres { conn, .. } => conn.batch(sql),
        }
    }

    /// Runs a statement; the rows it changed.
    fn execute(&self, sql: &str, params: &[&dyn ToValue]) -> DbResult<usize> {
        match self.target() {
            Target::Sqlite(c) => {
                let values = value::sqlite_params(params)?;
                Ok(c.prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(values))?)
            }
            Target::Postgres { conn, in_tx } => conn.execute(sql, params, in_tx),
        }
    }

    /// The first row a statement returns, made by `f`; [`DbError::NoRow`] when there is none
    /// (`.optional()` makes that `None`).
    fn query_row<T>(
        &self,
        sql: &str,
        params: &[&dyn ToValue],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        match self.target() {
            Target::Sqlite(c) => {
                let values = value::sqlite_params(params)?;
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
                match rows.next()? {
                    Some(row) => f(&Row::Sqlite(row)),
                    None => Err(DbError::NoRow),
                }
            }
            Target::Postgres { conn, in_tx } => {
                let rows = conn.query(sql, params, in_tx)?;
                match rows.first() {
                    Some(row) => f(&Row::Postgres(row)),
                    None => Err(DbError::NoRow),
                }
            }
        }
    }

    /// Every row a statement returns, each made by `f`.
    fn query_map<T>(
        &self,
        sql: &str,
        params: &[&dyn ToValue],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        match self.target() {
            Target::Sqlite(c) => {
                let values = value::sqlite_params(params)?;
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(f(&Row::Sqlite(row))?);
                }
                Ok(out)
            }
            Target::Postgres { conn, in_tx } => conn
                .query(sql, params, in_tx)?
                .iter()
                .map(|row| f(&Row::Postgres(row)))
                .collect(),
        }
    }
}

impl Query for Conn<'_> {
    fn target(&self) -> Target<'_> {
        match self {
            Conn::Sqlite(c) => Target::Sqlite(c),
            Conn::Postgres(c) => Target::Postgres {
                conn: c,
                in_tx: false,
            },
        }
    }
}

impl Query for Tx<'_> {
    fn target(&self) -> Target<'_> {
        match self {
            Tx::Sqlite(tx) => Target::Sqlite(tx),
            Tx::Postgres(tx) => Target::Postgres {
                conn: tx.conn(),
                in_tx: true,
            },
        }
    }
}

/// A store not yet moved onto the seam calls a moved function with its own SQLite connection
/// or transaction, and gets its errors back as SQLite's: the two meet while stores move.
impl Query for rusqlite::Connection {
    fn target(&self) -> Target<'_> {
        Target::Sqlite(self)
    }
}

impl Query for rusqlite::Transaction<'_> {
    fn target(&self) -> Target<'_> {
        Target::Sqlite(self)
    }
}

impl From<DbError> for rusqlite::Error {
    fn from(e: DbError) -> rusqlite::Error {
        match e {
            DbError::Sqlite(e) => e,
            DbError::NoRow => rusqlite::Error::QueryReturnedNoRows,
            other => rusqlite::Error::ToSqlConversionFailure(Box::new(other)),
        }
    }
}

/// A row a statement returned.
pub(crate) enum Row<'a> {
    Sqlite(&'a rusqlite::Row<'a>),
    Postgres(&'a tokio_postgres::Row),
}

impl Row<'_> {
    /// Column `index` (from 0), as `T`.
    pub(crate) fn get<T: FromColumn>(&self, index: usize) -> DbResult<T> {
        let column = match self {
            Row::Sqlite(r) => Column::from(r.get_ref(index)?),
            Row::Postgres(r) => postgres::column(r, index)?,
        };
        T::from_column(column).map_err(|what| {
            DbError::Value(format!(
                "column {index} ({}): {what}",
                self.column_name(index)
            ))
        })
    }

    fn column_name(&self, index: usize) -> String {
        match self {
            Row::Sqlite(r) => r
                .as_ref()
                .column_name(index)
                .map_or_else(|_| "?".into(), str::to_owned),
            Row::Postgres(r) => r
                .columns()
                .get(index)
                .map_or_else(|| "?".into(), |c| c.name().to_owned()),
        }
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
