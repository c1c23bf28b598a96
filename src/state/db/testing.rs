//! Tests of a store on both backends: a fresh SQLite database in a temporary directory, and a
//! fresh schema in the PostgreSQL this machine runs (`DEEPCLI_TEST_POSTGRES`, by default
//! `postgres://postgres@127.0.0.1:5432/test`), dropped after the test. A test fails, not
//! skips, when PostgreSQL cannot be reached: `.ci/run` starts it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{PgConn, PgUrl};

/// The PostgreSQL the tests use.
pub(crate) fn postgres_url() -> PgUrl {
    let url = std::env::var("DEEPCLI_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    PgUrl::parse(&url).expect("DEEPCLI_TEST_POSTGRES is a PostgreSQL URL")
}

/// A schema of its own in the test database, dropped (with everything in it) when this is.
pub(crate) struct PgSchema {
    admin: PgConn,
    name: String,
    url: PgUrl,
}

impl PgSchema {
    pub(crate) fn new() -> PgSchema {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = postgres_url();
        let admin = PgConn::connect(&base).unwrap_or_else(|e| {
            panic!("the tests' PostgreSQL ({base}) cannot be reached: {e}; start it (.ci/run does), or set DEEPCLI_TEST_POSTGRES")
        });
        let name = format!(
            "deepcli_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin
            .batch(&format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
            ))
            .unwrap();
        let url = base.with_schema(&name);
        PgSchema { admin, name, url }
    }

    pub(crate) fn url(&self) -> &PgUrl {
        &self.url
    }

    pub(crate) fn connect(&self) -> PgConn {
        PgConn::connect(&self.url).unwrap()
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// One backend's fresh, empty database, and connections to it.
pub(crate) enum TestDb {
    Sqlite(tempfile::TempDir),
    Postgres(Box<PgSchema>),
}

/// An open connection of a [`TestDb`].
pub(crate) type TestConn = super::Owned;

impl TestDb {
    /// Both backends, SQLite first.
    pub(crate) fn both() -> [TestDb; 2] {
        [
            TestDb::Sqlite(tempfile::tempdir().unwrap()),
            TestDb::Postgres(Box::new(PgSchema::new())),
        ]
    }

    /// Both backends, each holding a new state (every migration run), SQLite first.
    pub(crate) fn states() -> [TestDb; 2] {
        let sqlite = tempfile::tempdir().unwrap();
        crate::state::create_for_tests(sqlite.path());
        let postgres = PgSchema::new();
        super::migrate_postgres(&mut postgres.connect()).unwrap();
        [TestDb::Sqlite(sqlite), TestDb::Postgres(Box::new(postgres))]
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            TestDb::Sqlite(_) => "sqlite",
            TestDb::Postgres(_) => "postgres",
        }
    }

    /// A new connection (SQLite's waits for the lock, as the state's do).
    pub(crate) fn connect(&self) -> TestConn {
        match self {
            TestDb::Sqlite(dir) => {
                let state = dir.path().join("state.db");
                let path = if state.exists() {
                    state
                } else {
                    dir.path().join("test.db")
                };
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.busy_timeout(std::time::Duration::from_secs(10))
                    .unwrap();
                conn.pragma_update(None, "journal_mode", "WAL").unwrap();
                super::Owned::Sqlite(conn)
            }
            TestDb::Postgres(schema) => super::Owned::Postgres(schema.connect()),
        }
    }
}

/// An application name no other test's sessions have.
pub(crate) fn unique_name(what: &str) -> String {
    format!(
        "deepcli-{what}-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().as_nanosecond()
    )
}

/// Ends every PostgreSQL session whose application is `name`, as a restart of PostgreSQL
/// would, and waits until they are gone and their clients have seen it; how many there
/// were.
pub(crate) fn end_sessions(name: &str) -> i64 {
    use super::{Conn, Query};
    let mut admin = PgConn::connect(&postgres_url()).unwrap();
    let admin = Conn::Postgres(&mut admin);
    let ended: i64 = admin
        .query_row(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?1",
            params![name],
            |r| r.get(0),
        )
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 = admin
            .query_row(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?1",
                params![name],
                |r| r.get(0),
            )
            .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the sessions never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The clients see their sockets closed a moment later.
    std::thread::sleep(std::time::Duration::from_millis(300));
    ended
}
