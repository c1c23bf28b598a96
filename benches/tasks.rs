//! What a task's own path costs (tasks.md; issue 37's figures), printed, not asserted:
//!
//! * `create → submitted`: a task created and started, one small artifact (1 KiB) handed in
//!   (hashed into the store, recorded, placed read-only in the owner's workspace) and the task
//!   submitted, on a real state directory: p50, p99 and max of N tasks.
//! * `artifact 10 MB`: a 10 MB file handed in the same way: throughput in MB/s of the file's
//!   size (it is read once and written twice: the store's copy and the owner's).
//!
//! The agents' turns and the MCP hops are not in it (`scripts/bench-hub` measures those).
//!
//!   cargo bench --features bench-tools --bench tasks
//!   TASKS=5000 cargo bench --features bench-tools --bench tasks

use std::time::{Duration, Instant};

use deepcli::task_bench::TaskBench;

fn main() {
    let tasks: usize = std::env::var("TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bench = TaskBench::open(dir.path()).expect("a state directory");
    let ws = bench.assignee_workspace().to_path_buf();
    std::fs::write(ws.join("result.txt"), vec![b'r'; 1024]).unwrap();

    let one = || -> Duration {
        let started = Instant::now();
        let id = bench.start().unwrap();
        bench.hand_in(&id, "result.txt").unwrap();
        bench.submit(&id).unwrap();
        started.elapsed()
    };
    for _ in 0..50 {
        one();
    }
    let mut times: Vec<Duration> = (0..tasks).map(|_| one()).collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "create → submitted (1 KiB artifact), {tasks} tasks: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(at(0.50)),
        ms(at(0.99)),
        ms(times[times.len() - 1])
    );

    const SIZE: usize = 10 * 1000 * 1000;
    let mut big = vec![0u8; SIZE];
    for (i, b) in big.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    }
    let mut rates = Vec::new();
    for round in 0..10u8 {
        big[0] = round;
        std::fs::write(ws.join("big.bin"), &big).unwrap();
        let id = bench.start().unwrap();
        let started = Instant::now();
        let size = bench.hand_in(&id, "big.bin").unwrap();
        let secs = started.elapsed().as_secs_f64();
        rates.push(size as f64 / 1e6 / secs);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "artifact 10 MB handed in and placed, 10 rounds: median {:.0} MB/s, slowest {:.0} MB/s",
        rates[rates.len() / 2],
        rates[0]
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
