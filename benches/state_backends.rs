//! What the state's two backends cost a store's call (issue 43), printed, not asserted: the
//! adapters' store — an event taken into the inbox with its next offset and then done (two
//! transactions that write), and a Slack thread's round reserved (a read that decides a write)
//! — and the Access store — an inbound turn's records (begun, then recorded with its delivery:
//! two transactions that write) — on SQLite and on PostgreSQL, N calls from one replica, then N from each of two replicas
//! at once (each its own connections, as two controllers on one state). p50, p99 and the
//! calls a second.
//!
//!   cargo bench --features bench-tools --bench state_backends
//!   CALLS=5000 DEEPCLI_BENCH_POSTGRES=postgres://postgres@127.0.0.1:5432/test cargo bench …
//!
//! PostgreSQL's tables go into a schema of the bench's own (`deepcli_bench`), made anew.

use std::time::{Duration, Instant};

use deepcli::state_bench::StoreBench;

fn main() {
    let calls: u64 = std::env::var("CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let url = std::env::var("DEEPCLI_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = "deepcli_bench";
    let status = std::process::Command::new("psql")
        .args([&url, "-q", "-c"])
        .arg(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .status()
        .expect("psql runs");
    assert!(status.success(), "psql could not make the bench's schema");
    let sep = if url.contains('?') { '&' } else { '?' };
    let pg_url = format!("{url}{sep}options=-csearch_path%3D{schema}");

    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = StoreBench::sqlite(&dir.path().join("sqlite")).expect("an SQLite state");
    let postgres =
        StoreBench::postgres(&dir.path().join("pg"), &pg_url).expect("a PostgreSQL state");
    for (name, bench) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        for (what, call) in [
            (
                "event taken + done",
                StoreBench::event as fn(&StoreBench, usize, u64) -> _,
            ),
            ("thread round reserved", StoreBench::round),
            ("inbound turn recorded", StoreBench::turn),
        ] {
            for n in 0..50 {
                call(bench, 0, (1 << 40) + n).unwrap();
            }
            let started = Instant::now();
            let one: Vec<Duration> = (0..calls).map(|n| call(bench, 0, n).unwrap()).collect();
            let one_rate = calls as f64 / started.elapsed().as_secs_f64();
            let started = Instant::now();
            let two: Vec<Duration> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..2)
                    .map(|r| {
                        s.spawn(move || {
                            (0..calls)
                                .map(|n| call(bench, r, calls + n).unwrap())
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .flat_map(|h| h.join().unwrap())
                    .collect()
            });
            let two_rate = 2.0 * calls as f64 / started.elapsed().as_secs_f64();
            println!(
                "{name:<9} {what:<22} one replica: p50 {:>6.3} ms, p99 {:>6.3} ms, {:>6.0}/s   two replicas: p50 {:>6.3} ms, p99 {:>6.3} ms, {:>6.0}/s",
                ms(quantile(&one, 0.50)),
                ms(quantile(&one, 0.99)),
                one_rate,
                ms(quantile(&two, 0.50)),
                ms(quantile(&two, 0.99)),
                two_rate
            );
        }
    }
    let _ = std::process::Command::new("psql")
        .args([&url, "-q", "-c"])
        .arg(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .status();
}

fn quantile(times: &[Duration], q: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
