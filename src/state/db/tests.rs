//! The seam on both backends: the same statements, values and transactions.

use std::time::Duration;

use super::pg_schema::Migrated;
use super::testing::TestDb;
use super::*;

fn table(conn: &Conn<'_>) {
    let sql = match conn.backend() {
        Backend::Sqlite => {
            "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, r REAL, s TEXT, b BLOB, f INTEGER)"
        }
        Backend::Postgres => {
            "CREATE TABLE t (id BIGINT PRIMARY KEY, n BIGINT, r DOUBLE PRECISION, s TEXT, b BYTEA, f BOOLEAN)"
        }
    };
    conn.batch(sql).unwrap();
}

#[test]
fn every_kind_of_value_goes_in_and_comes_back_the_same() {
    for db in TestDb::both() {
        let mut c = db.connect();
        let conn = c.conn();
        table(&conn);
        let text = "grüße, 'quoted' ?1 \u{1F600}";
        let bytes = [0_u8, 255, 10, 13];
        conn.execute(
            "INSERT INTO t (id, n, r, s, b, f) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![1_i64, i64::MIN, 2.5_f64, text, bytes.to_vec(), true],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO t (id, n, r, s, b, f) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                2_u32,
                None::<i64>,
                None::<f64>,
                None::<&str>,
                None::<Vec<u8>>,
                false
            ],
        )
        .unwrap();
        type Got = (
            i64,
            Option<i64>,
            Option<f64>,
            Option<String>,
            Option<Vec<u8>>,
            bool,
        );
        let rows: Vec<Got> = conn
            .query_map(
                "SELECT id, n, r, s, b, f FROM t ORDER BY id",
                params![],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            rows,
            [
                (
                    1,
                    Some(i64::MIN),
                    Some(2.5),
                    Some(text.to_owned()),
                    Some(bytes.to_vec()),
                    true
                ),
                (2, None, None, None, None, false)
            ],
            "{}",
            db.name()
        );
        // A parameter used twice and out of order, by its number.
        let s: String = conn
            .query_row(
                "SELECT s FROM t WHERE id = ?2 AND n = ?1 AND id = ?2",
                params![i64::MIN, 1_i64],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(s, text, "{}", db.name());
        let none = conn
            .query_row("SELECT s FROM t WHERE id = ?1", params![9_i64], |r| {
                r.get::<String>(0)
            })
            .optional()
            .unwrap();
        assert_eq!(none, None, "{}", db.name());
    }
}

#[test]
fn a_value_of_the_wrong_kind_is_an_error_naming_its_column() {
    for db in TestDb::both() {
        let mut c = db.connect();
        let conn = c.conn();
        table(&conn);
        conn.execute("INSERT INTO t (id, s) VALUES (?1, ?2)", params![1_i64, "x"])
            .unwrap();
        let err = conn
            .query_row("SELECT s FROM t", params![], |r| r.get::<i64>(0))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("column 0 (s): text where an integer"),
            "{}: {err}",
            db.name()
        );
        let err = conn
            .execute("INSERT INTO t (id) VALUES (?1)", params![u64::MAX])
            .unwrap_err();
        assert!(
            err.to_string().contains("does not fit"),
            "{}: {err}",
            db.name()
        );
    }
}

#[test]
fn a_transaction_dropped_uncommitted_leaves_nothing() {
    for db in TestDb::both() {
        let mut c = db.connect();
        let mut conn = c.conn();
        table(&conn);
        {
            let tx = conn.transaction(Behavior::Write).unwrap();
            tx.execute("INSERT INTO t (id) VALUES (1)", params![])
                .unwrap();
        }
        let tx = conn.transaction(Behavior::Write).unwrap();
        tx.execute("INSERT INTO t (id) VALUES (2)", params![])
            .unwrap();
        tx.commit().unwrap();
        let ids = conn
            .query_map("SELECT id FROM t", params![], |r| r.get::<i64>(0))
            .unwrap();
        assert_eq!(ids, [2], "{}", db.name());
    }
}

/// Two writers each read a counter and write it plus one: under the write lock the second
/// reads what the first wrote, so no increment is lost (on PostgreSQL, `READ COMMITTED`
/// alone would let both read 0).
#[test]
fn a_transaction_that_writes_reads_what_the_writer_before_it_wrote() {
    for db in TestDb::both() {
        {
            let mut c = db.connect();
            let conn = c.conn();
            table(&conn);
            conn.execute("INSERT INTO t (id, n) VALUES (1, 0)", params![])
                .unwrap();
        }
        let (began, go) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let db = &db;
            let first = s.spawn(move || {
                let mut c = db.connect();
                let mut conn = c.conn();
                let tx = conn.transaction(Behavior::Write).unwrap();
                let n: i64 = tx
                    .query_row("SELECT n FROM t WHERE id = 1", params![], |r| r.get(0))
                    .unwrap();
                began.send(()).unwrap();
                // The second writer starts meanwhile, and waits.
                std::thread::sleep(Duration::from_millis(300));
                tx.execute("UPDATE t SET n = ?1 WHERE id = 1", params![n + 1])
                    .unwrap();
                tx.commit().unwrap();
            });
            go.recv().unwrap();
            let mut c = db.connect();
            let mut conn = c.conn();
            let tx = conn.transaction(Behavior::Write).unwrap();
            let n: i64 = tx
                .query_row("SELECT n FROM t WHERE id = 1", params![], |r| r.get(0))
                .unwrap();
            tx.execute("UPDATE t SET n = ?1 WHERE id = 1", params![n + 1])
                .unwrap();
            tx.commit().unwrap();
            first.join().unwrap();
        });
        let mut c = db.connect();
        let n: i64 = c
            .conn()
            .query_row("SELECT n FROM t WHERE id = 1", params![], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "{}: an increment was lost", db.name());
    }
}

/// The connection's calls work from inside the controller's async runtime (the stores are
/// called there), where a runtime of its own could not be started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_connection_works_inside_an_async_runtime() {
    let schema = testing::PgSchema::new();
    let mut pg = schema.connect();
    let conn = Conn::Postgres(&mut pg);
    let one: i64 = conn
        .query_row("SELECT CAST(?1 AS BIGINT) + 1", params![41_i64], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(one, 42);
}

#[test]
fn a_newer_postgres_schema_is_refused() {
    let schema = testing::PgSchema::new();
    let mut pg = schema.connect();
    assert_eq!(migrate_postgres(&mut pg).unwrap(), Migrated::Created);
    assert_eq!(migrate_postgres(&mut pg).unwrap(), Migrated::Current);
    pg.batch("UPDATE deepcli_schema SET version = version + 1")
        .unwrap();
    let err = migrate_postgres(&mut pg).unwrap_err();
    assert!(err.to_string().contains("newer deepcli"), "{err}");
}

/// Every table of the PostgreSQL schema is the SQLite schema's table of the same name: the
/// same columns in the same order, each of the matching type (`INTEGER` is `bigint`, `TEXT`
/// `text`, `BLOB` `bytea`, `REAL` `double precision`), nullable alike, with the same primary
/// key — so a store's statements read and write the same rows on both.
#[test]
fn the_postgres_schema_is_the_sqlite_schema() {
    let [sqlite, postgres] = TestDb::states();
    let mut pg = postgres.connect();
    let pg = pg.conn();
    let mut lite = sqlite.connect();
    let lite = lite.conn();
    let tables: Vec<String> = pg
        .query_map(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name <> 'deepcli_schema' ORDER BY 1",
            params![],
            |r| r.get(0),
        )
        .unwrap();
    assert!(tables.len() >= 10, "{tables:?}");
    // PostgreSQL's search index, which SQLite keeps in a file of its own (`search.db`).
    let tables = tables.into_iter().filter(|t| t != "transcript_words");
    type Col = (String, String, bool, bool);
    for table in tables {
        let on_pg: Vec<Col> = pg
            .query_map(
                "SELECT c.column_name::text, c.data_type::text, c.is_nullable = 'NO',
                        EXISTS (SELECT 1 FROM information_schema.key_column_usage k
                                JOIN information_schema.table_constraints t
                                  ON t.constraint_name = k.constraint_name AND t.table_schema = k.table_schema
                                WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_schema = c.table_schema
                                  AND k.table_name = c.table_name AND k.column_name = c.column_name)
                 FROM information_schema.columns c
                 WHERE c.table_schema = current_schema() AND c.table_name = ?1 ORDER BY c.ordinal_position",
                params![table],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        let on_sqlite: Vec<Col> = lite
            .query_map(
                // `table_xinfo`: generated columns too (`hidden` 2 and 3), not a virtual
                // table's hidden ones (1).
                "SELECT name, type, \"notnull\" OR pk > 0, pk > 0 FROM pragma_table_xinfo(?1)
                 WHERE hidden <> 1 ORDER BY cid",
                params![table],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        let as_pg = |(name, ty, not_null, pk): Col| -> Col {
            let ty = match ty.to_ascii_uppercase().as_str() {
                "INTEGER" => "bigint",
                "TEXT" => "text",
                "BLOB" => "bytea",
                "REAL" => "double precision",
                other => panic!("{table}.{name}: SQLite type {other} has no PostgreSQL twin"),
            };
            (name, ty.to_owned(), not_null, pk)
        };
        let mut on_sqlite: Vec<Col> = on_sqlite.into_iter().map(as_pg).collect();
        // SQLite's implicit `rowid`, where a store orders by it: a last column in PostgreSQL.
        if on_pg.last().is_some_and(|c| c.0 == "rowid") {
            on_sqlite.push(("rowid".into(), "bigint".into(), true, false));
        }
        assert_eq!(
            on_pg, on_sqlite,
            "table {table}: PostgreSQL's columns, then SQLite's"
        );
    }
}
