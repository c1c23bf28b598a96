//! The PostgreSQL side of the seam: a connection ([`PgConn`]) on tokio-postgres, driven by a
//! runtime of its own, and what SQLite's dialect needs to become PostgreSQL's.
//!
//! The state's callers are synchronous (a store's call is short and runs where it is called,
//! SQLite's way), some on the controller's async runtime. So the connection's socket is driven
//! by a one-thread runtime of its own ([`driver`]), and a call waits for its answer with
//! `futures_executor::block_on` on the caller's thread: the client's side of tokio-postgres is
//! channels, which need no runtime; blocking a thread that runs async tasks is what an SQLite
//! call does too. (`postgres`, the synchronous client, would start its runtime inside the
//! caller's, which tokio refuses.)

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Statement};

use super::{Behavior, Column, DbError, DbResult, ToValue, Value};

/// A state URL: `postgres://user@host:port/database?options=…` (libpq's URI, as
/// tokio-postgres reads it). Its password is never shown.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PgUrl {
    config: tokio_postgres::Config,
    /// The schema the state's tables live in (`search_path`), when the URL names one.
    shown: String,
}

impl PgUrl {
    /// `--state-url`'s value; an error says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<PgUrl, String> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| format!("`{}` is not a PostgreSQL URL: {e}", redact(url)))?;
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(format!(
                "`{}` asks for TLS (sslmode=require), which deepcli does not speak to PostgreSQL yet; use sslmode=disable on a trusted network, or a local TLS-terminating proxy",
                redact(url)
            ));
        }
        Ok(PgUrl {
            config,
            shown: redact(url),
        })
    }

    /// A copy whose sessions say `name` as their application (tests: to find them).
    #[cfg(test)]
    pub(crate) fn with_application_name(&self, name: &str) -> PgUrl {
        let mut config = self.config.clone();
        config.application_name(name);
        PgUrl {
            config,
            shown: self.shown.clone(),
        }
    }

    /// A copy whose sessions use `schema` (tests: one schema each).
    #[cfg(test)]
    pub(crate) fn with_schema(&self, schema: &str) -> PgUrl {
        let mut config = self.config.clone();
        config.options(format!("-c search_path={schema}"));
        PgUrl {
            config,
            shown: format!("{} (schema {schema})", self.shown),
        }
    }
}

impl std::fmt::Display for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl({})", self.shown)
    }
}

/// `url` with the password of its user part replaced.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// The runtime that drives every PostgreSQL connection's socket: one thread, for the process.
fn driver() -> &'static tokio::runtime::Runtime {
    static DRIVER: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    DRIVER.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("deepcli-postgres")
            .enable_all()
            .build()
            .expect("a one-thread runtime starts")
    })
}

fn wait<F: std::future::Future>(f: F) -> F::Output {
    futures_executor::block_on(f)
}

/// A connection to the state in PostgreSQL.
pub(crate) struct PgConn {
    client: Client,
    /// Prepared statements by their PostgreSQL text (SQLite's `prepare_cached`).
    statements: Mutex<HashMap<String, Statement>>,
    /// Where it was opened, to open it again.
    url: Box<PgUrl>,
}

/// How long a session may sit inside a transaction waiting for deepcli before PostgreSQL ends
/// it (and the transaction, and its locks).
pub(crate) const IDLE_IN_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(10);

/// The advisory lock a transaction that writes holds: one per schema, so states in separate
/// schemas of one database (tests) do not wait for each other.
const WRITE_LOCK: &str = "SELECT pg_advisory_xact_lock(1684366690, hashtext(current_schema()))";

impl PgConn {
    /// Opens the session again if PostgreSQL closed it (it restarted, or ended the session:
    /// every statement on it would fail from then on); whether it did. A call under way when
    /// it closed, or made before its socket showed it, failed; the ones after do not.
    pub(crate) fn reopen_if_closed(&mut self, url: &PgUrl) -> DbResult<bool> {
        if !self.client.is_closed() {
            return Ok(false);
        }
        *self = PgConn::connect(url)?;
        Ok(true)
    }

    /// [`PgConn::reopen_if_closed`] at the URL it was opened with.
    pub(crate) fn reopen(&mut self) -> DbResult<bool> {
        let url = self.url.clone();
        self.reopen_if_closed(&url)
    }

    pub(crate) fn connect(url: &PgUrl) -> DbResult<PgConn> {
        let opened_at = Box::new(url.clone());
        let mut config = url.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let (client, connection) =
            wait(driver().spawn(async move { config.connect(tokio_postgres::NoTls).await }))
                .map_err(|e| {
                    DbError::Value(format!("the PostgreSQL connection's task failed: {e}"))
                })??;
        driver().spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the PostgreSQL connection closed");
            }
        });
        // A process stopped inside a transaction (frozen, swapped out) would hold the state's
        // write lock for as long as it is stopped, and every replica's writes would wait:
        // PostgreSQL ends such a session instead (every transaction of deepcli is short).
        wait(client.batch_execute(&format!(
            "SET idle_in_transaction_session_timeout = {}",
            IDLE_IN_TRANSACTION.as_millis()
        )))?;
        Ok(PgConn {
            client,
            statements: Mutex::default(),
            url: opened_at,
        })
    }

    /// Runs statements separated by `;`, with no parameters (a migration).
    pub(crate) fn batch(&self, sql: &str) -> DbResult<()> {
        Ok(wait(self.client.batch_execute(sql))?)
    }

    /// Forgets the prepared statements (after a migration changed what they read).
    pub(crate) fn forget_statements(&self) {
        self.cache().clear();
    }

    /// The prepared statements (a lock never held across a call to the server).
    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Statement>> {
        self.statements
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn statement(&self, sql: &str) -> DbResult<Statement> {
        let text = placeholders(sql);
        if let Some(s) = self.cache().get(&text) {
            return Ok(s.clone());
        }
        let statement = wait(self.client.prepare(&text))?;
        self.cache().insert(text, statement.clone());
        Ok(statement)
    }

    pub(super) fn begin(&mut self, behavior: Behavior) -> DbResult<PgTx<'_>> {
        match behavior {
            Behavior::Write => self.batch(&format!("BEGIN; {WRITE_LOCK}"))?,
        }
        Ok(PgTx {
            conn: self,
            open: true,
        })
    }

    pub(super) fn execute(
        &self,
        sql: &str,
        params: &[&dyn ToValue],
        in_tx: bool,
    ) -> DbResult<usize> {
        let statement = self.statement(sql)?;
        let values = values(params)?;
        let run = || wait(self.client.execute(&statement, &refs(&values)));
        let changed = if in_tx || reads_only(sql) {
            run()?
        } else {
            self.locked(run)?
        };
        Ok(changed as usize)
    }

    pub(super) fn query(
        &self,
        sql: &str,
        params: &[&dyn ToValue],
        in_tx: bool,
    ) -> DbResult<Vec<tokio_postgres::Row>> {
        let statement = self.statement(sql)?;
        let values = values(params)?;
        let run = || wait(self.client.query(&statement, &refs(&values)));
        Ok(if in_tx || reads_only(sql) {
            run()?
        } else {
            self.locked(run)?
        })
    }

    /// Runs one statement that writes in a transaction of its own under the write lock.
    fn locked<T>(&self, run: impl FnOnce() -> Result<T, tokio_postgres::Error>) -> DbResult<T> {
        self.batch(&format!("BEGIN; {WRITE_LOCK}"))?;
        match run() {
            Ok(v) => {
                self.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                // The statement's error is the one to report; a failed rollback leaves the
                // connection broken, which the next call reports.
                let _ = self.batch("ROLLBACK");
                Err(e.into())
            }
        }
    }
}

/// Whether a statement only reads (`SELECT …`): it needs no write lock.
fn reads_only(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("select"))
}

fn values<'a>(params: &'a [&'a dyn ToValue]) -> DbResult<Vec<Value<'a>>> {
    params.iter().map(|p| p.to_value()).collect()
}

fn refs<'a>(values: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

/// A transaction open on a [`PgConn`]; rolled back when dropped uncommitted.
pub(crate) struct PgTx<'a> {
    conn: &'a mut PgConn,
    open: bool,
}

impl PgTx<'_> {
    pub(super) fn conn(&self) -> &PgConn {
        &*self.conn
    }

    pub(super) fn commit(mut self) -> DbResult<()> {
        self.open = false;
        self.conn.batch("COMMIT")
    }
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.batch("ROLLBACK");
        }
    }
}

/// SQLite's numbered parameters (`?1`; a bare `?` is the next number) as PostgreSQL's (`$1`),
/// outside quoted text, quoted names and comments.
pub(crate) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    let mut next = 1_usize;
    while let Some((_, c)) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for (_, q) in chars.by_ref() {
                    out.push(q);
                    if q == c {
                        break;
                    }
                }
            }
            '-' if chars.peek().is_some_and(|&(_, n)| n == '-') => {
                out.push(c);
                for (_, q) in chars.by_ref() {
                    out.push(q);
                    if q == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(&(_, d)) = chars.peek()
                    && d.is_ascii_digit()
                {
                    digits.push(d);
                    chars.next();
                }
                let n = digits.parse().unwrap_or(next);
                next = n + 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// Column `index` of a PostgreSQL row as one of SQLite's kinds.
pub(super) fn column(row: &tokio_postgres::Row, index: usize) -> DbResult<Column<'_>> {
    let ty = row
        .columns()
        .get(index)
        .ok_or_else(|| DbError::Value(format!("no column {index}")))?
        .type_()
        .clone();
    let int = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
    Ok(match ty {
        Type::INT8 => int(row.try_get(index)?),
        Type::INT4 => int(row.try_get::<_, Option<i32>>(index)?.map(i64::from)),
        Type::INT2 => int(row.try_get::<_, Option<i16>>(index)?.map(i64::from)),
        Type::BOOL => int(row.try_get::<_, Option<bool>>(index)?.map(i64::from)),
        Type::FLOAT8 => row
            .try_get::<_, Option<f64>>(index)?
            .map_or(Value::Null, Value::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(index)?
            .map_or(Value::Null, |f| Value::Real(f.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => row
            .try_get::<_, Option<&str>>(index)?
            .map_or(Value::Null, Value::Text),
        Type::BYTEA => row
            .try_get::<_, Option<&[u8]>>(index)?
            .map_or(Value::Null, Value::Blob),
        other => {
            return Err(DbError::Value(format!(
                "column {index} ({}) is of PostgreSQL type {other}, which the state does not use: cast it in the statement",
                row.columns()[index].name()
            )));
        }
    })
}

impl ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (*self, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => i32::try_from(i)?.to_sql(ty, out),
            (Value::Int(i), &Type::INT2) => i16::try_from(i)?.to_sql(ty, out),
            (Value::Int(i), &Type::BOOL) => (i != 0).to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (i as f64).to_sql(ty, out),
            (Value::Int(i), &Type::TEXT | &Type::VARCHAR | &Type::UNKNOWN) => {
                i.to_string().as_str().to_sql(ty, out)
            }
            (Value::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (Value::Real(f), &Type::FLOAT4) => (f as f32).to_sql(ty, out),
            (
                Value::Text(t),
                &Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME | &Type::UNKNOWN,
            ) => t.to_sql(ty, out),
            (Value::Blob(b), &Type::BYTEA) => b.to_sql(ty, out),
            (v, ty) => Err(format!("{} cannot be a parameter of type {ty}", v.kind()).into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A PostgreSQL error as its server said it (its message, detail and hint), else as the
/// client did.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} ({})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_parameters_become_dollars_outside_quotes_and_comments() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE b = ?1 AND c = ?12 AND d = '?3' -- ?4\n AND e = ?"),
            "SELECT a FROM t WHERE b = $1 AND c = $12 AND d = '?3' -- ?4\n AND e = $13"
        );
        assert_eq!(placeholders("\"a?1\" = ?2"), "\"a?1\" = $2");
        assert_eq!(placeholders("? , ?"), "$1 , $2");
    }

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            redact("postgres://deepcli:s3cret@db.internal:5432/hub?sslmode=disable"),
            "postgres://deepcli:***@db.internal:5432/hub?sslmode=disable"
        );
        assert_eq!(
            redact("postgres://deepcli@db/hub"),
            "postgres://deepcli@db/hub"
        );
        let url = PgUrl::parse("postgres://u:pw@127.0.0.1/db").unwrap();
        assert!(!format!("{url} {url:?}").contains("pw"));
    }

    #[test]
    fn tls_is_refused_with_what_to_do() {
        let e = PgUrl::parse("postgres://u:pw@db/hub?sslmode=require").unwrap_err();
        assert!(e.contains("sslmode=disable"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
    }
}
