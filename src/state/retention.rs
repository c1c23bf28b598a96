//! `state.retention` applied: the records older than each kind's days deleted in small
//! batches, each its own short transaction, so a turn waiting to write waits for one batch at
//! most. A batch's rows are chosen by a read, before the write lock is taken, on a thread of
//! upkeep priority (see `Reader`); the lock is held, at the process's priority, only to delete
//! them, the pages they are on read before it, and a batch is sized for its write to take
//! about [`BATCH_BUDGET`] (halved when a batch took longer; when one took under half,
//! doubled until a batch first took longer, grown by an eighth after); after each batch the
//! prune rests [`REST_PER_HELD`] times as long as its write took, so it has the lock at
//! most a quarter of the time. A batch's hold is timed to the moment its commit let the lock
//! go (see `Commits`). It writes no faster than its pages are copied back from the
//! WAL: after each batch, while the WAL is long, it waits for it to be copied back (see
//! `keep_the_wal_short`).
//! What was pruned is recorded (`prunes`, read by the audit timeline) and returned for
//! `/metrics`. The trash's tables are never touched: a deleted agent's conversations stay
//! while its entry is restorable.

use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, params, params_from_iter};
use serde::Serialize;

// The seam's `Query` is named in the functions that use it: in scope here, its `execute`
// would stand for rusqlite's on the SQLite prune's transactions.
use super::db::{Behavior, Conn, DbResult, Optional as _, params as db_params};

/// The most rows one transaction deletes.
pub const BATCH: usize = 500;
/// The fewest rows a batch is cut down to.
const MIN_BATCH: usize = 8;
/// The rows of the first batch of each table.
const FIRST_BATCH: usize = 64;
/// A batch that held the write lock this long is said in the log (what a turn may have waited).
const SLOW_BATCH: Duration = Duration::from_millis(30);
/// How long a batch's write should take: the write lock held, and the copy back SQLite may
/// make in the commit call after it.
pub const BATCH_BUDGET: Duration = Duration::from_millis(10);

/// The size of batches: each next one from how long the last one's write took. Doubled while
/// no batch has been over its budget, then grown by an eighth at a time, and halved after
/// each batch over it. Doubling back into the size that was slow had every other batch over
/// it: at a year's size, 500 deliveries held the lock 40–53 ms and 250 under 5, and the size
/// went 500, 250, 500, … for minutes.
#[derive(Debug, Clone, Copy)]
struct Sizer {
    rows: usize,
    /// Whether a batch has been over its budget yet.
    overrun: bool,
}

impl Sizer {
    fn new() -> Sizer {
        Sizer {
            rows: FIRST_BATCH,
            overrun: false,
        }
    }

    fn took(&mut self, took: Duration) {
        self.rows = if took > BATCH_BUDGET {
            self.overrun = true;
            (self.rows / 2).max(MIN_BATCH)
        } else if took < BATCH_BUDGET / 2 {
            let grown = if self.overrun {
                self.rows + (self.rows / 8).max(1)
            } else {
                self.rows * 2
            };
            grown.min(BATCH)
        } else {
            self.rows
        };
    }
}

/// `count` numbered parameters from `?first` on, for `IN (…)`.
fn marks(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("?{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a prune goes on after each batch, and what it measured of itself.
struct Pace {
    /// The least rest after a batch.
    pause: Duration,
    /// The longest a batch held the write lock.
    longest: Duration,
    /// The time spent waiting for the WAL to be copied back.
    wal_waited: Duration,
    /// How often it started the WAL over, and the longest its write held the write lock (a
    /// reader still in the WAL kept some from starting it over).
    restarts: u64,
    longest_restart: Duration,
    /// The WAL file, read ahead of the next batch's writes, and where they go: after the WAL's
    /// first `wal_end` frames, `ahead` of them (twice the last batch's, and a turn's few
    /// meanwhile).
    wal: super::WalAhead,
    wal_end: i64,
    ahead: i64,
    /// What reading it ahead read from the disk: the parts the kernel had dropped.
    wal_read_kb: i64,
}

/// The longest a prune waits after one batch for the WAL to be copied back before it goes on
/// (a reader that stays in the WAL keeps part of it from being copied back).
const WAL_PATIENCE: Duration = Duration::from_secs(10);

/// The fewest and the most frames read ahead of a batch's writes (1 MiB and 16 MiB of 4 KiB
/// pages).
const MIN_AHEAD: i64 = 256;
const MAX_AHEAD: i64 = 4096;

impl Pace {
    fn new(conn: &Connection, pause: Duration) -> Pace {
        Pace {
            pause,
            longest: Duration::ZERO,
            wal_waited: Duration::ZERO,
            restarts: 0,
            longest_restart: Duration::ZERO,
            wal: super::WalAhead::of(conn),
            wal_end: 0,
            ahead: MIN_AHEAD,
            wal_read_kb: 0,
        }
    }

    /// After a batch that held the lock `held`, its write `took` in all (SQLite's copy back in
    /// the commit call too), the WAL at `wal_pages` pages as its commit let the lock go (-1:
    /// not seen): keeps the WAL short ([`super::keep_the_wal_short`]) and, once it is all
    /// copied back, starts it over ([`super::start_the_wal_over`]); reads the WAL file ahead of
    /// the next batch's writes ([`super::WalAhead`]); then rests `pause`, and never less than
    /// [`REST_PER_HELD`] times `took`.
    fn after_batch(
        &mut self,
        conn: &mut Connection,
        commits: &Commits,
        held: Duration,
        took: Duration,
        wal_pages: i64,
    ) {
        self.longest = self.longest.max(held);
        // The frames this batch wrote (the WAL started over meanwhile: all it holds).
        let wrote = if wal_pages >= self.wal_end {
            wal_pages - self.wal_end
        } else {
            wal_pages
        };
        self.ahead = ((2 * wrote).max(0) + MIN_AHEAD).min(MAX_AHEAD);
        let kept = super::keep_the_wal_short(conn, super::WAL_CAP, WAL_PATIENCE);
        self.wal_waited += kept.waited;
        self.wal_end = kept.frames;
        let mut waited = kept.waited;
        if kept.copied_back {
            let counts = ThreadCounts::now();
            commits.take();
            let began = Instant::now();
            if let Some(taken) = commits.without_copy_back(|| super::start_the_wal_over(conn)) {
                // Held until its commit let the lock go, before any copy back in the commit
                // call. The WAL's pages then: 1 if it started over (a reader still in it keeps
                // it from doing so).
                let (released, wal_pages) = commits.released(Instant::now());
                let held = released.saturating_duration_since(taken);
                self.restarts += u64::from(wal_pages == 1);
                if wal_pages > 0 {
                    self.wal_end = wal_pages;
                }
                self.longest_restart = self.longest_restart.max(held);
                if held >= SLOW_RESTART {
                    let spent = ThreadCounts::now().since(counts);
                    tracing::info!(
                        held_ms = held.as_millis() as u64,
                        wal_pages,
                        cpu_wait_ms = spent.cpu_wait.as_millis() as u64,
                        blocked = spent.usage.blocked,
                        preempted = spent.usage.preempted,
                        "state.retention: starting the WAL over held the write lock long"
                    );
                }
            }
            waited += began.elapsed();
        }
        let began = Instant::now();
        let before = super::ThreadUsage::now();
        // Where a reader kept it from starting over, the next commit may, from the file's start.
        self.wal
            .read_for_the_next_commit(self.wal_end, kept.copied_back, self.ahead);
        self.wal_read_kb += super::ThreadUsage::now().since(before).read_kb;
        waited += began.elapsed();
        std::thread::sleep(rest_after(self.pause, took).saturating_sub(waited));
    }
}

/// A start of the WAL over that held the write lock this long is said in the log: its commit
/// syncs the WAL's new header, which a quiet disk writes in a millisecond or two.
const SLOW_RESTART: Duration = Duration::from_millis(20);

fn rest_after(pause: Duration, held: Duration) -> Duration {
    pause.max(held * REST_PER_HELD)
}

/// How many times as long as a batch held the lock the prune rests after it: it holds the lock
/// at most a quarter of the time, so a turn's write seldom finds it taken, and waits for one
/// batch at most when it does.
const REST_PER_HELD: u32 = 3;

/// One kind's prune.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    /// The retention key: `transcripts`, `deliveries`, `runs`, …
    pub kind: &'static str,
    /// Rows deleted (with `--dry-run`: that would be), every table of the kind counted.
    pub rows: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    pub dry_run: bool,
    pub pruned: Vec<Pruned>,
    pub elapsed_ms: u64,
    /// The longest one batch held the write lock: what a concurrent turn could wait.
    pub longest_batch_ms: u64,
    /// How long the prune waited, all told, for the WAL to be copied back before it went on.
    pub wal_wait_ms: u64,
    /// How often the prune started the WAL over ([`super::start_the_wal_over`]), and the
    /// longest that held the write lock.
    pub wal_restarts: u64,
    pub longest_restart_ms: u64,
    /// What reading the WAL file ahead of the batches' writes read from the disk: the parts
    /// of it the kernel had dropped from its cache ([`super::WalAhead`]).
    pub wal_read_ahead_kb: u64,
    /// The artifact store's files no row names any more, removed after the rows
    /// ([`super::artifact_files`]); none with `--dry-run`.
    pub files: super::artifact_files::Swept,
}

impl PruneReport {
    /// What was pruned, per kind (`120 transcripts, 4 runs`): the audit's `prune` line.
    fn detail(&self) -> String {
        self.pruned
            .iter()
            .filter(|p| p.rows > 0)
            .map(|p| format!("{} {}", p.rows, p.kind))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One table's part of a kind: the rows `keyed` selects (a key column and the condition, the
/// cutoff as `?1`), and the tables whose rows name them, deleted first.
struct Step {
    table: &'static str,
    key: &'static str,
    /// The order a batch is chosen in: what an index on the condition already orders by, so
    /// choosing 500 rows reads 500 rows, not every row to prune to sort them.
    order: &'static str,
    condition: &'static str,
    children: &'static [(&'static str, &'static str)],
}

/// What reads, before a batch takes the write lock, the pages its delete will touch: the
/// rows, and each one's entry in every index of the table. Under a prune's writes the disk is
/// busy taking the WAL back into the database; a page the delete itself had to read held the
/// lock for as long as the read waited behind them (a batch of 500 transcript rows held it
/// 102 ms at a year's size, 12 of them committing). Read first, the pages are in the page
/// cache while the lock is held.
struct Warm {
    /// One statement per index: the rows' index columns, each sought in that index.
    reads: Vec<String>,
}

impl Warm {
    /// The reads for `table`'s indexes: every one but a partial index (a statement may read
    /// through it only where its condition holds) and one on an expression; both are small.
    /// `{column}` stands for the column the batch's keys are of, `{keys}` for their marks.
    fn of(conn: &Connection, table: &str) -> rusqlite::Result<Warm> {
        let indexes: Vec<(String, bool)> = conn
            .prepare(&format!(
                "SELECT name, partial FROM pragma_index_list('{table}')"
            ))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut reads = Vec::new();
        for (index, partial) in indexes {
            if partial {
                continue;
            }
            let columns: Vec<Option<String>> = conn
                .prepare(&format!(
                    "SELECT name FROM pragma_index_info('{index}') ORDER BY seqno"
                ))?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let Some(columns) = columns.into_iter().collect::<Option<Vec<String>>>() else {
                continue;
            };
            let picked = columns.join(", ");
            let sought = columns
                .iter()
                .map(|c| format!("i.{c} IS d.{c}"))
                .collect::<Vec<_>>()
                .join(" AND ");
            reads.push(format!(
                "SELECT count(*) FROM (SELECT {picked} FROM {table} WHERE {{column}} IN ({{keys}})) AS d
                 WHERE EXISTS (SELECT 1 FROM {table} AS i INDEXED BY {index} WHERE {sought})"
            ));
        }
        Ok(Warm { reads })
    }

    /// Reads the rows of `table` whose `column` is one of `keys`, through each index.
    fn read(
        &self,
        conn: &Connection,
        table: &str,
        column: &str,
        keys: &[Value],
    ) -> rusqlite::Result<()> {
        let marks = marks(1, keys.len());
        if self.reads.is_empty() {
            conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE {column} IN ({marks})"),
                params_from_iter(keys),
                |_| Ok(()),
            )?;
        }
        for read in &self.reads {
            let sql = read.replace("{column}", column).replace("{keys}", &marks);
            conn.query_row(&sql, params_from_iter(keys), |_| Ok(()))?;
        }
        Ok(())
    }
}

/// Where a prune's batches are chosen and their pages read ([`Warm`]): most of its work, and
/// none of it under the write lock. `Away` does it on a thread of its own at upkeep priority
/// ([`crate::threads::UPKEEP_NICE`]), on a connection of its own, so that it takes a core from
/// no turn. The batches' holds of the lock stay on the prune's thread, at the priority of the
/// process: a thread holding a lock that turns wait for must get a core when it asks (with the
/// whole prune at nice 10, a batch's logged hold reached 53 ms, 49 of them waiting for a
/// CPU). The pages come in through the kernel's cache: the prune's connection drops its own
/// cache anyway whenever a turn commits. `Here` (a dry run, an in-memory database, no thread
/// to be had) does it on the prune's connection, as `keepPerSession`'s session-by-session
/// reads ([`keep_newest`]) always are.
enum Reader {
    Here(Warming),
    Away {
        asks: std::sync::mpsc::Sender<(&'static Step, String, usize)>,
        answers: std::sync::mpsc::Receiver<rusqlite::Result<Vec<Value>>>,
    },
}

impl Reader {
    /// Starts the reader's thread in `scope`, on `path`'s database; `Here` when it cannot be.
    fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        path: &std::path::Path,
    ) -> Reader {
        let here = |e: &dyn std::fmt::Display| {
            tracing::debug!(error = %e, "state.retention: batches are chosen on the prune's connection");
            Reader::Here(Warming::default())
        };
        let opened = super::connect(path)
            .and_then(|conn| conn.pragma_update(None, "query_only", true).map(|()| conn));
        let conn = match opened {
            Ok(conn) => conn,
            Err(e) => return here(&e),
        };
        let (asks, asked) = std::sync::mpsc::channel::<(&'static Step, String, usize)>();
        let (answer, answers) = std::sync::mpsc::channel();
        let started = std::thread::Builder::new()
            .name("prune-reads".into())
            .spawn_scoped(scope, move || {
                crate::threads::lower_to_upkeep();
                let mut warming = Warming::default();
                for (step, cut, rows) in asked {
                    if answer
                        .send(choose(&conn, &mut warming, step, &cut, rows))
                        .is_err()
                    {
                        break;
                    }
                }
            });
        match started {
            Ok(_) => Reader::Away { asks, answers },
            Err(e) => here(&e),
        }
    }

    /// The keys of `step`'s next batch of at most `rows` older than `cut`, their pages read.
    fn choose(
        &mut self,
        conn: &Connection,
        step: &'static Step,
        cut: &str,
        rows: usize,
    ) -> rusqlite::Result<Vec<Value>> {
        match self {
            Reader::Here(warming) => choose(conn, warming, step, cut, rows),
            Reader::Away { asks, answers } => {
                if asks.send((step, cut.to_string(), rows)).is_ok()
                    && let Ok(answer) = answers.recv()
                {
                    return answer;
                }
                // Its thread is gone (a panic, raised again when the prune's scope ends).
                *self = Reader::Here(Warming::default());
                self.choose(conn, step, cut, rows)
            }
        }
    }
}

/// Each table's [`Warm`] reads, made once per table for a prune.
#[derive(Default)]
struct Warming(std::collections::HashMap<&'static str, Warm>);

/// Chooses a batch of `step` on `conn` (a read: no lock held) and reads its pages in.
fn choose(
    conn: &Connection,
    warming: &mut Warming,
    step: &'static Step,
    cut: &str,
    rows: usize,
) -> rusqlite::Result<Vec<Value>> {
    let keys: Vec<Value> = conn
        .prepare_cached(&batch_query(step))?
        .query_map(params![cut, rows as i64], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if keys.is_empty() {
        return Ok(keys);
    }
    for (table, column) in
        std::iter::once((step.table, step.key)).chain(step.children.iter().copied())
    {
        let warm = match warming.0.entry(table) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Warm::of(conn, table)?),
        };
        warm.read(conn, table, column, &keys)?;
    }
    Ok(keys)
}

/// What the kernel has counted of this thread so far: its [`super::ThreadUsage`], and how long
/// it waited for a CPU (`/proc/thread-self/schedstat`). A slow batch's log line says, of its
/// hold, what went where.
#[derive(Debug, Clone, Copy, Default)]
struct ThreadCounts {
    usage: super::ThreadUsage,
    cpu_wait: Duration,
}

impl ThreadCounts {
    fn now() -> ThreadCounts {
        // schedstat: time on a CPU, time waiting for one, timeslices (ns, ns, count).
        let cpu_wait = std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|text| text.split_whitespace().nth(1)?.parse().ok())
            .map_or(Duration::ZERO, Duration::from_nanos);
        ThreadCounts {
            usage: super::ThreadUsage::now(),
            cpu_wait,
        }
    }

    fn since(self, before: ThreadCounts) -> ThreadCounts {
        ThreadCounts {
            usage: self.usage.since(before.usage),
            cpu_wait: self.cpu_wait.saturating_sub(before.cpu_wait),
        }
    }
}

/// What each kind prunes, by age (`?1`: the cutoff, as stored: RFC 3339 UTC text).
fn steps(kind: &str) -> &'static [Step] {
    match kind {
        "transcripts" => &[Step {
            table: "transcript",
            key: "id",
            order: "id",
            condition: "at < ?1",
            children: &[],
        }],
        "deliveries" => &[Step {
            table: "deliveries",
            key: "rowid",
            order: "rowid",
            condition: "at < ?1",
            children: &[],
        }],
        "runs" => &[Step {
            table: "hub_runs",
            key: "run_id",
            order: "finished_at, rowid",
            condition: "finished_at IS NOT NULL AND finished_at < ?1 AND run_id NOT IN (SELECT run_id FROM loop_pauses WHERE state = 'paused')",
            children: &[("hub_run_events", "run_id"), ("run_artifacts", "run_id")],
        }],
        "approvals" => &[Step {
            table: "approvals",
            key: "id",
            order: "id",
            condition: "state <> 'pending' AND coalesce(decided_at, created_at) < ?1",
            children: &[("approval_events", "approval_id")],
        }],
        "audit" => &[
            Step {
                table: "budget_events",
                key: "id",
                order: "id",
                condition: "at < ?1",
                children: &[],
            },
            Step {
                table: "turn_cancels",
                key: "id",
                order: "id",
                condition: "state <> 'requested' AND requested_at < ?1",
                children: &[],
            },
            Step {
                table: "loop_pauses",
                key: "run_id",
                order: "run_id",
                condition: "state <> 'paused' AND coalesce(decided_at, created_at) < ?1",
                children: &[],
            },
        ],
        "deadLetters" => &[
            Step {
                table: "dead_letters",
                key: "id",
                order: "id",
                condition: "at < ?1",
                children: &[],
            },
            Step {
                table: "outbox",
                key: "seq",
                order: "seq",
                condition: "state IN ('posted', 'dead') AND coalesce(done_at, at) < ?1",
                children: &[],
            },
        ],
        "a2aTasks" => &[Step {
            table: "a2a_tasks",
            key: "task_id",
            order: "task_id",
            condition: "state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED') AND updated_at < ?1",
            children: &[
                ("a2a_task_runs", "task_id"),
                ("a2a_push_configs", "task_id"),
                ("a2a_push_attempts", "task_id"),
            ],
        }],
        _ => &[],
    }
}

/// What to prune: each kind (a `state.retention` key) with its days, in order, and the
/// transcripts' rows kept per session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    pub by_age: Vec<(&'static str, u32)>,
    pub keep_per_session: Option<u32>,
}

impl Rules {
    pub fn is_empty(&self) -> bool {
        self.by_age.is_empty() && self.keep_per_session.is_none()
    }

    /// Each kind pruned, with its days when by age.
    fn kinds(&self) -> Vec<(&'static str, Option<u32>)> {
        let mut out: Vec<(&'static str, Option<u32>)> =
            self.by_age.iter().map(|&(k, d)| (k, Some(d))).collect();
        if self.keep_per_session.is_some() && !out.iter().any(|(k, _)| *k == "transcripts") {
            out.insert(0, ("transcripts", None));
        }
        out
    }
}

/// The cutoff `days` before `now`, as the state stores times.
fn cutoff(now: jiff::Timestamp, days: u32) -> String {
    let back = jiff::SignedDuration::from_hours(24 * i64::from(days));
    now.checked_sub(back)
        .unwrap_or(jiff::Timestamp::MIN)
        .round(jiff::Unit::Second)
        .map_or_else(|_| now.to_string(), |t| t.to_string())
}

/// Applies `retention` to the database `conn` as of `now`; between batches it sleeps `pause`
/// (the controller's way of leaving room to turns). `by` is who pruned, for the record.
pub fn prune(
    conn: &mut Connection,
    rules: &Rules,
    now: jiff::Timestamp,
    dry_run: bool,
    pause: Duration,
    by: &str,
) -> rusqlite::Result<PruneReport> {
    // A batch's pages, read and changed, fit in the connection's page cache. SQLite's default
    // is 2 MiB, 512 pages; a batch of 500 transcript rows can touch more (their entries in
    // `transcript_by_session` alone may sit on 500 leaf pages), and a page that does not fit
    // is read again, or written to the WAL before the commit, with the lock held.
    let kept: i64 = conn.pragma_query_value(None, "cache_size", |r| r.get(0))?;
    let threshold: i64 = conn.pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))?;
    conn.pragma_update(None, "cache_size", PRUNE_CACHE)?;
    let pruned = Commits::watch(conn, threshold)
        .and_then(|commits| prune_on(conn, &commits, rules, now, dry_run, pause, by));
    // SQLite's own hook again (setting the threshold sets it), whatever became of the prune.
    let restored = conn
        .wal_hook(None::<fn(&mut rusqlite::hooks::Wal, std::ffi::c_int) -> rusqlite::Result<()>>)
        .and_then(|()| conn.pragma_update(None, "wal_autocheckpoint", threshold))
        .and_then(|()| conn.pragma_update(None, "cache_size", kept));
    let pruned = pruned?;
    restored?;
    Ok(pruned)
}

/// When the prune's last commit let the write lock go, and how many pages the WAL held then.
/// SQLite calls a connection's WAL hook once a commit has let the lock go; its automatic
/// checkpoint is that hook, and copies the WAL back (writes and two `fsync`s) inside the commit
/// call, with no lock a turn waits for held. So a batch holds the lock from `BEGIN` to this
/// hook, not to the commit call's return: timed to the return, a batch's logged hold was an
/// upper bound.
#[derive(Clone)]
struct Commits(std::sync::Arc<Seen>);

struct Seen {
    last: std::sync::Mutex<Option<(Instant, i64)>>,
    /// Whether the hook copies back (see [`Commits::without_copy_back`]).
    copy_back: std::sync::atomic::AtomicBool,
}

impl Commits {
    /// Watches `conn`'s commits with a hook that then does what SQLite's would have: a
    /// `PASSIVE` copy back once the WAL holds `threshold` pages (none if it is 0 or less).
    fn watch(conn: &mut Connection, threshold: i64) -> rusqlite::Result<Commits> {
        let commits = Commits(std::sync::Arc::new(Seen {
            last: std::sync::Mutex::new(None),
            copy_back: std::sync::atomic::AtomicBool::new(true),
        }));
        let seen = commits.0.clone();
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages| {
            let pages = i64::from(pages);
            if let Ok(mut last) = seen.last.lock() {
                *last = Some((Instant::now(), pages));
            }
            let copy_back = seen.copy_back.load(std::sync::atomic::Ordering::Relaxed);
            if copy_back && threshold > 0 && pages >= threshold {
                // As SQLite's own hook: a copy back that could not be made is tried again by the
                // next commit's, or by the prune after the batch.
                let _ = wal.checkpoint();
            }
            Ok(())
        }))?;
        Ok(commits)
    }

    /// `write` with no copy back in its commit: the prune's start of the WAL over, made just
    /// after a copy back took all of it; where a reader kept the WAL from starting over, a copy
    /// back of its one page would sync the WAL and the database again for nothing.
    fn without_copy_back<T>(&self, write: impl FnOnce() -> T) -> T {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.copy_back.store(false, Relaxed);
        let written = write();
        self.0.copy_back.store(true, Relaxed);
        written
    }

    /// The last commit's, forgotten here (none since: an in-memory database has no WAL).
    fn take(&self) -> Option<(Instant, i64)> {
        self.0.last.lock().ok().and_then(|mut last| last.take())
    }

    /// When the commit whose call `returned` then let the lock go, and the WAL's pages then:
    /// its return, and -1, when none was seen.
    fn released(&self, returned: Instant) -> (Instant, i64) {
        self.take().unwrap_or((returned, -1))
    }
}

/// The page cache of a prune's connection, in SQLite's terms (negative: KiB): 32 MiB.
const PRUNE_CACHE: i64 = -32 * 1024;

fn prune_on(
    conn: &mut Connection,
    commits: &Commits,
    rules: &Rules,
    now: jiff::Timestamp,
    dry_run: bool,
    pause: Duration,
    by: &str,
) -> rusqlite::Result<PruneReport> {
    let started = Instant::now();
    let mut pace = Pace::new(conn, pause);
    // An in-memory database has no path another connection could open ("").
    let path = conn
        .path()
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from);
    let pruned = std::thread::scope(|scope| {
        let mut reader = match (dry_run, path) {
            (false, Some(path)) => Reader::start(scope, &path),
            _ => Reader::Here(Warming::default()),
        };
        each_kind(rules, now, |part| match part {
            Part::Older(step, cut) => {
                run_step(conn, commits, &mut reader, step, cut, dry_run, &mut pace)
            }
            Part::PastNewest(keep) => {
                let after = |c: &mut Conn<'_>, began: Instant, took| {
                    if let Conn::Sqlite(c) = c {
                        let (released, wal_pages) = commits.released(began + took);
                        pace.after_batch(
                            c,
                            commits,
                            released.saturating_duration_since(began),
                            took,
                            wal_pages,
                        );
                    }
                };
                Ok(keep_newest(&mut Conn::Sqlite(conn), keep, dry_run, after)?)
            }
        })
    })?;
    let report = PruneReport {
        dry_run,
        elapsed_ms: millis(started.elapsed()),
        longest_batch_ms: millis(pace.longest),
        wal_wait_ms: millis(pace.wal_waited),
        wal_restarts: pace.restarts,
        longest_restart_ms: millis(pace.longest_restart),
        wal_read_ahead_kb: pace.wal_read_kb.max(0).unsigned_abs(),
        pruned,
        files: super::artifact_files::Swept::default(),
    };
    record(&*conn, &report, by)?;
    Ok(report)
}

/// What a kind's prune is made of: a step's rows older than a cutoff, or the transcript rows
/// past the newest `keep` of each session.
enum Part<'a> {
    Older(&'static Step, &'a str),
    PastNewest(u32),
}

/// Each kind of `rules` as of `now`, with the rows `part` pruned (or counted) of it.
fn each_kind<E>(
    rules: &Rules,
    now: jiff::Timestamp,
    mut part: impl FnMut(Part<'_>) -> Result<u64, E>,
) -> Result<Vec<Pruned>, E> {
    let mut pruned = Vec::new();
    for (kind, days) in rules.kinds() {
        let mut rows = 0u64;
        if let Some(days) = days {
            let cut = cutoff(now, days);
            for step in steps(kind) {
                rows += part(Part::Older(step, &cut))?;
            }
        }
        if kind == "transcripts"
            && let Some(keep) = rules.keep_per_session
        {
            rows += part(Part::PastNewest(keep))?;
        }
        pruned.push(Pruned { kind, rows });
    }
    Ok(pruned)
}

/// Records a prune that deleted rows (`prunes`: the audit's `prune` line), on either backend.
fn record(conn: &impl super::db::Query, report: &PruneReport, by: &str) -> DbResult<()> {
    let total: u64 = report.pruned.iter().map(|p| p.rows).sum();
    if !report.dry_run && total > 0 {
        conn.execute(
            "INSERT INTO prunes (at, by, rows, detail) VALUES (?1, ?2, ?3, ?4)",
            db_params![crate::clock::now(), by, total, report.detail()],
        )?;
    }
    Ok(())
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The query that chooses a batch of `step`'s rows (the cutoff as `?1`).
fn batch_query(step: &Step) -> String {
    let Step {
        table,
        key,
        order,
        condition,
        ..
    } = step;
    format!("SELECT {key} FROM {table} WHERE {condition} ORDER BY {order} LIMIT ?2")
}

fn run_step(
    conn: &mut Connection,
    commits: &Commits,
    reader: &mut Reader,
    step: &'static Step,
    cut: &str,
    dry_run: bool,
    pace: &mut Pace,
) -> rusqlite::Result<u64> {
    let Step {
        table,
        key,
        condition,
        children,
        ..
    } = step;
    if dry_run {
        let mut rows: i64 = conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE {condition}"),
            [cut],
            |r| r.get(0),
        )?;
        for (child, column) in *children {
            rows += conn.query_row(
                &format!("SELECT count(*) FROM {child} WHERE {column} IN (SELECT {key} FROM {table} WHERE {condition})"),
                [cut],
                |r| r.get::<_, i64>(0),
            )?;
        }
        return Ok(rows.max(0) as u64);
    }
    let mut sizer = Sizer::new();
    let mut total = 0u64;
    loop {
        // Chosen by a read, its pages read too: no lock held meanwhile.
        let keys = reader.choose(conn, step, cut, sizer.rows)?;
        if keys.is_empty() {
            return Ok(total);
        }
        let counts = ThreadCounts::now();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // The lock is held from here: what a turn waits for (not the wait for the lock).
        let began = Instant::now();
        // What still qualifies now that the lock is held (a loop paused meanwhile stays).
        let keys: Vec<Value> = tx
            .prepare(&format!(
                "SELECT {key} FROM {table} WHERE {key} IN ({}) AND {condition}",
                marks(2, keys.len())
            ))?
            .query_map(
                params_from_iter(std::iter::once(Value::from(cut.to_string())).chain(keys)),
                |r| r.get(0),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let among = marks(1, keys.len());
        let mut deleted = 0usize;
        for (child, column) in *children {
            deleted += tx.execute(
                &format!("DELETE FROM {child} WHERE {column} IN ({among})"),
                params_from_iter(&keys),
            )?;
        }
        deleted += tx.execute(
            &format!("DELETE FROM {table} WHERE {key} IN ({among})"),
            params_from_iter(&keys),
        )?;
        let committing = Instant::now();
        commits.take();
        tx.commit()?;
        let returned = Instant::now();
        // The whole write, the copy back in the commit call too: what the batch cost the disk,
        // by which the batches are sized and paced.
        let took = returned - began;
        let (released, wal_pages) = commits.released(returned);
        let held = released.saturating_duration_since(began);
        total += deleted as u64;
        if held >= SLOW_BATCH {
            let spent = ThreadCounts::now().since(counts);
            tracing::info!(
                table,
                rows = deleted,
                held_ms = held.as_millis() as u64,
                commit_ms = released.saturating_duration_since(committing).as_millis() as u64,
                copied_back_ms = (returned - released).as_millis() as u64,
                wal_pages,
                read_kb = spent.usage.read_kb,
                cpu_wait_ms = spent.cpu_wait.as_millis() as u64,
                blocked = spent.usage.blocked,
                preempted = spent.usage.preempted,
                "state.retention: a batch held the write lock long"
            );
        }
        sizer.took(took);
        pace.after_batch(conn, commits, held, took, wal_pages);
    }
}

impl super::StateStore {
    /// [`prune`] on this store's connection ([`prune_postgres`] on a PostgreSQL state), then the
    /// artifact store's files no row names any more.
    pub fn prune(
        &mut self,
        rules: &Rules,
        now: jiff::Timestamp,
        dry_run: bool,
        pause: Duration,
        by: &str,
    ) -> super::Result<PruneReport> {
        let dir = self.dir.clone();
        let mut report = match &mut self.db {
            super::db::Owned::Sqlite(conn) => prune(conn, rules, now, dry_run, pause, by)
                .map_err(|source| super::sql_error(dir.db(), source))?,
            super::db::Owned::Postgres(conn) => {
                prune_postgres(&mut Conn::Postgres(conn), rules, now, dry_run, pause, by)
                    .map_err(|e| super::seam_error(&dir, e))?
            }
        };
        if !dry_run {
            // After the rows' commit: a crash before this leaves files the next sweep removes.
            report.files = super::artifact_files::sweep(
                &mut self.db.conn(),
                &dir,
                &dir.artifacts(),
                super::artifact_files::GRACE,
            )?;
        }
        Ok(report)
    }
}

/// [`prune`] on a PostgreSQL state: the same steps, each batch one transaction under the
/// state's write lock, sized as SQLite's to hold it about [`BATCH_BUDGET`], with the same rest
/// after it. A batch's rows are chosen and deleted by the statements themselves, children
/// first (under the lock no other writer changes which rows qualify between the two). No
/// pages are read ahead and no WAL is waited for: PostgreSQL's readers never wait for a
/// writer, and its WAL and vacuum are its own.
fn prune_postgres(
    conn: &mut Conn<'_>,
    rules: &Rules,
    now: jiff::Timestamp,
    dry_run: bool,
    pause: Duration,
    by: &str,
) -> DbResult<PruneReport> {
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    let pruned = each_kind(rules, now, |part| match part {
        Part::Older(step, cut) if dry_run => count_step(conn, step, cut),
        Part::Older(step, cut) => delete_step(conn, step, cut, pause, &mut longest),
        Part::PastNewest(keep) => keep_newest(conn, keep, dry_run, |_, _, held| {
            longest = longest.max(held);
            std::thread::sleep(rest_after(pause, held));
        }),
    })?;
    let report = PruneReport {
        dry_run,
        elapsed_ms: millis(started.elapsed()),
        longest_batch_ms: millis(longest),
        wal_wait_ms: 0,
        wal_restarts: 0,
        longest_restart_ms: 0,
        wal_read_ahead_kb: 0,
        pruned,
        files: super::artifact_files::Swept::default(),
    };
    record(&*conn, &report, by)?;
    Ok(report)
}

/// The rows `step` would delete as of `cut` (`--dry-run`), its children's counted.
fn count_step(conn: &Conn<'_>, step: &Step, cut: &str) -> DbResult<u64> {
    use super::db::Query;
    let Step {
        table,
        key,
        condition,
        children,
        ..
    } = step;
    let mut rows: u64 = conn.query_row(
        &format!("SELECT count(*) FROM {table} WHERE {condition}"),
        db_params![cut],
        |r| r.get(0),
    )?;
    for (child, column) in *children {
        rows += conn.query_row::<u64>(
            &format!("SELECT count(*) FROM {child} WHERE {column} IN (SELECT {key} FROM {table} WHERE {condition})"),
            db_params![cut],
            |r| r.get(0),
        )?;
    }
    Ok(rows)
}

/// Deletes `step`'s rows older than `cut` in batches, each in one transaction; the rows
/// deleted, children counted.
fn delete_step(
    conn: &mut Conn<'_>,
    step: &Step,
    cut: &str,
    pause: Duration,
    longest: &mut Duration,
) -> DbResult<u64> {
    use super::db::Query;
    let Step {
        table,
        key,
        children,
        ..
    } = step;
    let chosen = batch_query(step);
    let mut sizer = Sizer::new();
    let mut total = 0u64;
    loop {
        let tx = conn.transaction(Behavior::Write)?;
        let began = Instant::now();
        let rows = db_params![cut, sizer.rows];
        for (child, column) in *children {
            total += tx.execute(
                &format!("DELETE FROM {child} WHERE {column} IN ({chosen})"),
                rows,
            )? as u64;
        }
        let deleted = tx.execute(
            &format!("DELETE FROM {table} WHERE {key} IN ({chosen})"),
            rows,
        )?;
        tx.commit()?;
        let held = began.elapsed();
        *longest = (*longest).max(held);
        total += deleted as u64;
        if deleted < sizer.rows {
            return Ok(total);
        }
        sizer.took(held);
        std::thread::sleep(rest_after(pause, held));
    }
}

/// Deletes every transcript row past the newest `keep` of its session: the sessions with more
/// found once, then each session's oldest rows in batches, `after` called after each with
/// when it took the write lock and how long its write took to the commit's return.
fn keep_newest(
    conn: &mut Conn<'_>,
    keep: u32,
    dry_run: bool,
    mut after: impl FnMut(&mut Conn<'_>, Instant, Duration),
) -> DbResult<u64> {
    use super::db::Query;
    let over: Vec<(String, i64)> = conn.query_map(
        "SELECT session_key, count(*) FROM transcript GROUP BY session_key HAVING count(*) > ?1",
        db_params![keep],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if dry_run {
        return Ok(over
            .iter()
            .map(|(_, n)| (n - i64::from(keep)).max(0) as u64)
            .sum());
    }
    let mut sizer = Sizer::new();
    let mut total = 0u64;
    for (session, _) in over {
        // The newest row past the ones kept: it and every older row go.
        let Some(last) = conn
            .query_row(
                "SELECT id FROM transcript WHERE session_key = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2",
                db_params![session, keep],
                |r| r.get::<i64>(0),
            )
            .optional()?
        else {
            continue;
        };
        loop {
            let tx = conn.transaction(Behavior::Write)?;
            let began = Instant::now();
            let deleted = tx.execute(
                "DELETE FROM transcript WHERE id IN
                   (SELECT id FROM transcript WHERE session_key = ?1 AND id <= ?2 ORDER BY id LIMIT ?3)",
                db_params![session, last, sizer.rows],
            )?;
            tx.commit()?;
            let took = began.elapsed();
            total += deleted as u64;
            let whole = deleted == sizer.rows;
            sizer.took(took);
            after(conn, began, took);
            if !whole {
                break;
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind a prune deletes by age.
    const KINDS: [&str; 7] = [
        "transcripts",
        "deliveries",
        "runs",
        "approvals",
        "audit",
        "deadLetters",
        "a2aTasks",
    ];

    #[test]
    fn a_cutoff_is_whole_days_back_as_the_state_writes_times() {
        let now: jiff::Timestamp = "2026-12-31T10:20:30.456Z".parse().unwrap();
        assert_eq!(cutoff(now, 30), "2026-12-01T10:20:30Z");
        // Stored times compare as text: the cutoff must have their shape.
        assert!("2026-12-01T10:20:29Z" < cutoff(now, 30).as_str());
        assert!("2026-12-01T10:20:31Z" > cutoff(now, 30).as_str());
    }

    /// Choosing a batch reads the batch, not every row to prune: at 500,000 runs, choosing
    /// 500 by `run_id` sorted all of them first, 1.3 s a batch with the write lock held.
    #[test]
    fn a_batch_is_chosen_without_sorting_every_row_to_prune() {
        let tmp = tempfile::tempdir().unwrap();
        let store =
            crate::state::StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap();
        for kind in KINDS {
            for step in steps(kind) {
                let plan: Vec<String> = store
                    .sqlite_for_tests()
                    .prepare(&format!("EXPLAIN QUERY PLAN {}", batch_query(step)))
                    .unwrap()
                    .query_map(params!["2026-12-01T00:00:00Z", 500], |r| r.get(3))
                    .unwrap()
                    .collect::<rusqlite::Result<_>>()
                    .unwrap();
                assert!(
                    !plan.iter().any(|line| line.contains("TEMP B-TREE")),
                    "{kind} ({}): {plan:?}",
                    step.table
                );
            }
        }
    }

    /// Every table a prune deletes from is read before the lock through each of its plain
    /// indexes, and each read seeks the index rather than scanning it.
    #[test]
    fn a_batch_is_read_through_every_index_before_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let store =
            crate::state::StateStore::open(&crate::state::StateDir::new(tmp.path())).unwrap();
        let conn = store.sqlite_for_tests();
        let mut tables = Vec::new();
        for kind in KINDS {
            for step in steps(kind) {
                tables.push((step.table, step.key));
                tables.extend(step.children.iter().copied());
            }
        }
        for (table, column) in tables {
            let warm = Warm::of(conn, table).unwrap();
            let plain: i64 = conn
                .query_row(
                    &format!("SELECT count(*) FROM pragma_index_list('{table}') WHERE NOT partial"),
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(warm.reads.len() as i64, plain, "{table}");
            warm.read(
                conn,
                table,
                column,
                &[Value::from(1), Value::from("k".to_string())],
            )
            .unwrap();
            for read in &warm.reads {
                let sql = read.replace("{column}", column).replace("{keys}", "?1");
                let plan: Vec<String> = conn
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .unwrap()
                    .query_map([1], |r| r.get(3))
                    .unwrap()
                    .collect::<rusqlite::Result<_>>()
                    .unwrap();
                assert!(
                    plan.iter().any(|l| l.starts_with("SEARCH i ")),
                    "{table}: {sql}: {plan:?}"
                );
            }
        }
    }

    #[test]
    fn a_batch_is_sized_to_hold_the_lock_about_its_budget() {
        let mut sizer = Sizer::new();
        assert_eq!(sizer.rows, FIRST_BATCH);
        // Doubled while no batch was over the budget.
        sizer.took(Duration::from_millis(1));
        assert_eq!(sizer.rows, FIRST_BATCH * 2);
        sizer.took(BATCH_BUDGET * 3);
        assert_eq!(sizer.rows, FIRST_BATCH);
        sizer.took(BATCH_BUDGET * 3 / 4);
        assert_eq!(sizer.rows, FIRST_BATCH, "within the budget: kept");
        // After one was over it, grown an eighth at a time: not straight back to the size
        // that was slow.
        sizer.took(Duration::from_millis(1));
        assert_eq!(sizer.rows, FIRST_BATCH + FIRST_BATCH / 8);
        for _ in 0..40 {
            sizer.took(Duration::from_millis(1));
        }
        assert_eq!(sizer.rows, BATCH);
        for _ in 0..20 {
            sizer.took(Duration::from_secs(1));
        }
        assert_eq!(sizer.rows, MIN_BATCH);
        // At the least, still grown.
        sizer.took(Duration::from_millis(1));
        assert_eq!(sizer.rows, MIN_BATCH + 1);
    }

    #[test]
    fn the_prune_holds_the_lock_at_most_a_quarter_of_the_time() {
        for held in [1, 10, 20, 94, 500].map(Duration::from_millis) {
            for pause in [Duration::ZERO, Duration::from_millis(10)] {
                let cycle = held + rest_after(pause, held);
                assert!(held * 4 <= cycle, "held {held:?} of {cycle:?}");
            }
        }
    }

    /// After each batch the prune copies the WAL back and, once all of it is, starts it over
    /// itself: no later commit, a turn's, syncs the new WAL's header with the lock held.
    #[test]
    fn a_prune_starts_the_wal_over_after_its_batches() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::StateDir::new(tmp.path());
        let mut store = crate::state::StateStore::open(&dir).unwrap();
        let conn = store.sqlite_mut_for_tests();
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)
             INSERT INTO transcript (session_key, provenance, text, at)
             SELECT 'agent:a:main', 'inbound', 'x', '2026-01-01T00:00:00Z' FROM n;",
        )
        .unwrap();
        let rules = Rules {
            by_age: vec![("transcripts", 30)],
            keep_per_session: None,
        };
        let now: jiff::Timestamp = "2026-12-31T00:00:00Z".parse().unwrap();
        let report = prune(conn, &rules, now, false, Duration::ZERO, "cli").unwrap();
        assert_eq!(report.pruned[0].rows, 300);
        assert!(report.wal_restarts >= 1, "{report:?}");
        let (log, done): (i64, i64) = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert!(
            log < 64 && log == done,
            "the WAL holds {log} pages, {done} copied back"
        );
    }

    /// A commit that writes its frames over a part of the WAL file the kernel dropped reads
    /// that part from the disk first (a frame is not a page of the file), with the write lock
    /// held; after a batch the prune reads the part its next writes go to, so they read nothing.
    #[test]
    fn a_prune_reads_the_wal_ahead_of_its_next_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::StateDir::new(tmp.path());
        let mut store = crate::state::StateStore::open(&dir).unwrap();
        let wal = std::fs::File::open(super::super::wal_path(&dir.db())).unwrap();
        let conn = store.sqlite_mut_for_tests();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch("CREATE TABLE scratch (x BLOB)").unwrap();
        // About 100 pages a commit; the first makes the WAL file 1,000 frames long.
        let write = |conn: &Connection, bytes: i64| {
            conn.execute("INSERT INTO scratch VALUES (zeroblob(?1))", [bytes])
                .unwrap();
        };
        write(conn, 4 << 20);
        // All of it copied back (the WAL synced, its pages clean), then out of the kernel's
        // cache: the next commit starts the WAL over and writes over the file's start.
        let copy_back_and_drop = |conn: &Connection| {
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .unwrap();
            super::super::drop_from_the_page_cache(&wal);
        };
        let read_by = |write: &dyn Fn()| {
            let before = super::super::ThreadUsage::now();
            write();
            super::super::ThreadUsage::now().since(before).read_kb
        };

        copy_back_and_drop(conn);
        let unread = read_by(&|| write(conn, 400_000));
        assert!(unread >= 100, "the commit read {unread} KiB");

        copy_back_and_drop(conn);
        let commits = Commits::watch(conn, 0).unwrap();
        let mut pace = Pace::new(conn, Duration::ZERO);
        pace.after_batch(conn, &commits, Duration::ZERO, Duration::ZERO, -1);
        assert!(
            pace.wal_read_kb >= 100,
            "read ahead {} KiB",
            pace.wal_read_kb
        );
        let read = read_by(&|| write(conn, 400_000));
        assert_eq!(read, 0, "the commit after the read ahead read {read} KiB");
    }

    /// A prune's hook on its connection sees each commit as it lets the write lock go, and
    /// copies the WAL back where SQLite's own would have; after the prune SQLite's own is back.
    #[test]
    fn a_commit_is_seen_as_it_lets_the_lock_go_and_the_wal_is_still_copied_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = crate::state::StateDir::new(tmp.path());
        let mut store = crate::state::StateStore::open(&dir).unwrap();
        let db_len = || std::fs::metadata(dir.db()).unwrap().len();
        let conn = store.sqlite_mut_for_tests();
        conn.execute_batch("CREATE TABLE scratch (x BLOB)").unwrap();
        // 256 KiB a commit: 64 pages and more in the WAL.
        let write = |conn: &Connection| {
            conn.execute("INSERT INTO scratch VALUES (zeroblob(262144))", [])
                .unwrap();
        };
        let commits = Commits::watch(conn, 0).unwrap();
        let before = db_len();
        let asked = Instant::now();
        write(conn);
        let (at, pages) = commits.take().expect("the commit was seen");
        assert!(at >= asked && pages >= 64, "{pages} pages");
        assert_eq!(db_len(), before, "no copy back at a threshold of 0");
        assert!(commits.take().is_none(), "taken once");

        let commits = Commits::watch(conn, 1).unwrap();
        let copied = db_len();
        commits.without_copy_back(|| write(conn));
        assert!(commits.take().is_some());
        assert_eq!(db_len(), copied, "copied back where it was asked not to");
        write(conn);
        assert!(commits.take().is_some());
        assert!(
            db_len() >= before + 3 * 262_144,
            "all three copied back at a threshold of 1"
        );

        conn.pragma_update(None, "wal_autocheckpoint", 1).unwrap();
        let before = db_len();
        prune(
            conn,
            &Rules::default(),
            jiff::Timestamp::now(),
            false,
            Duration::ZERO,
            "cli",
        )
        .unwrap();
        let threshold: i64 = conn
            .pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))
            .unwrap();
        assert_eq!(threshold, 1);
        write(conn);
        assert!(
            db_len() >= before + 262_144,
            "SQLite's own copy back after the prune"
        );
    }

    #[test]
    fn keep_per_session_alone_still_prunes_transcripts() {
        let rules = Rules {
            by_age: vec![("runs", 30)],
            keep_per_session: Some(10),
        };
        assert_eq!(rules.kinds(), [("transcripts", None), ("runs", Some(30))]);
        assert!(Rules::default().is_empty());
    }

    /// A year's rows on either backend: the same prune deletes the same rows, records itself
    /// for the audit, and keeps the newest per session.
    #[test]
    fn a_prune_deletes_the_same_rows_on_both_backends() {
        use crate::state::db::Query;
        let prunes = |dir: &crate::state::StateDir| {
            let mut store = crate::state::StateStore::open(dir).unwrap();
            let conn = &store.db;
            let (old, new) = ("2026-01-01T00:00:00Z", "2026-12-30T00:00:00Z");
            for (session, at) in [("agent:a:main", old); 3]
                .into_iter()
                .chain([("agent:a:main", new); 2])
                .chain([("agent:b:main", new)])
            {
                conn.execute(
                    "INSERT INTO transcript (session_key, provenance, text, at) VALUES (?1, 'inbound', 'x', ?2)",
                    db_params![session, at],
                )
                .unwrap();
            }
            for (n, at) in [old, old, new].into_iter().enumerate() {
                conn.execute(
                    "INSERT INTO deliveries (channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at)
                     VALUES ('slack', 'main', 'direct', 'u', '', ?1, 'agent:a:main', '{}', ?2)",
                    db_params![format!("m{n}"), at],
                )
                .unwrap();
            }
            for (run, finished) in [("r-old", Some(old)), ("r-open", None)] {
                conn.execute(
                    "INSERT INTO hub_runs (run_id, kind, source_tool, state, target_agent_id, target_session_key,
                         correlation_id, message, created_at, finished_at, updated_at)
                     VALUES (?1, 'send', 't', 'done', 'a', 'agent:a:main', 'c', 'm', ?2, ?3, ?2)",
                    db_params![run, old, finished],
                )
                .unwrap();
                for note in ["accepted by the Hub", "done"] {
                    conn.execute(
                        "INSERT INTO hub_run_events (run_id, at, note) VALUES (?1, ?2, ?3)",
                        db_params![run, old, note],
                    )
                    .unwrap();
                }
            }
            conn.execute(
                "INSERT INTO budget_events (agent_id, kind, at_ms, at, budget, detail) VALUES ('a', 'refusal', 0, ?1, 'turns', 'x')",
                db_params![old],
            )
            .unwrap();
            let rules = Rules {
                by_age: vec![
                    ("transcripts", 30),
                    ("deliveries", 30),
                    ("runs", 30),
                    ("audit", 30),
                ],
                keep_per_session: Some(1),
            };
            let now: jiff::Timestamp = "2026-12-31T00:00:00Z".parse().unwrap();
            let counts = |report: &PruneReport| {
                report
                    .pruned
                    .iter()
                    .map(|p| (p.kind, p.rows))
                    .collect::<Vec<_>>()
            };
            let dry = store
                .prune(&rules, now, true, Duration::ZERO, "cli")
                .unwrap();
            let done = store
                .prune(&rules, now, false, Duration::ZERO, "cli")
                .unwrap();
            let left = |table: &str| -> i64 {
                store
                    .db
                    .query_row(
                        &format!("SELECT count(*) FROM {table}"),
                        db_params![],
                        |r| r.get(0),
                    )
                    .unwrap()
            };
            let left = [
                left("transcript"),
                left("deliveries"),
                left("hub_runs"),
                left("hub_run_events"),
                left("budget_events"),
            ];
            let audit = store
                .audit(&crate::state::audit::AuditFilter::default())
                .unwrap();
            let said: Vec<String> = audit
                .into_iter()
                .filter(|e| e.kind == "prune")
                .map(|e| e.summary)
                .collect();
            (counts(&dry), counts(&done), left, said)
        };
        let tmp = tempfile::tempdir().unwrap();
        let on_sqlite = prunes(&crate::state::StateDir::new(tmp.path()));
        let (_tmp, _schema, postgres) = crate::state::postgres_state();
        let on_postgres = prunes(&postgres);
        assert_eq!(
            on_sqlite.1,
            [
                ("transcripts", 4),
                ("deliveries", 2),
                ("runs", 3),
                ("audit", 1)
            ],
            "the old rows, then all but the newest of a session"
        );
        assert_eq!(on_sqlite.2, [2, 1, 1, 2, 0]);
        assert_eq!(
            on_sqlite.3,
            ["retention pruned 10 rows (4 transcripts, 2 deliveries, 3 runs, 1 audit) by the cli"]
        );
        assert_eq!(on_postgres, on_sqlite);
    }
}
