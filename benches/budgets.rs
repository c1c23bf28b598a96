//! What a budget check costs per turn (budgets.md; the target: under 5 µs): the Access layer's
//! admission of a turn against an agent with every budget set — the window of the last hour
//! trimmed, turns at once, tokens and cost today — with 1,000 agents' counters kept, each
//! agent's last hour already holding 1,000 turns (a high `turnsPerHour`, so every check passes
//! and counts), and the permit given back; and the Hub's check before it accepts a run
//! (nothing taken).
//!
//! Recording the turn is not measured here: its row rides in the transaction that records the
//! turn's transcript (scripts/bench-access measures a delivery whole).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use deepcli::budget::{BudgetLimits, BudgetRow, Budgets, EventKind};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const AGENTS: usize = 1_000;
const TURNS_PER_HOUR: u32 = 1_000_000;
/// Turns already in each agent's last hour.
const RECENT: i64 = 1_000;

fn limits() -> BudgetLimits {
    BudgetLimits {
        turns_per_hour: Some(TURNS_PER_HOUR),
        concurrent_turns: Some(4),
        turn_seconds: Some(Duration::from_secs(600)),
        spawns_per_hour: Some(30),
        tokens_per_day: Some(2_000_000),
        cost_per_day_micros: Some(20_000_000),
        ..BudgetLimits::default()
    }
}

fn budgets(now_ms: i64) -> Budgets {
    let mut rows = Vec::new();
    for a in 0..AGENTS {
        for t in 0..RECENT {
            rows.push(BudgetRow {
                agent_id: format!("agent-{a}"),
                kind: EventKind::Turn,
                at_ms: now_ms - 3_000_000 + t,
                tokens: Some(100),
                cost_micros: Some(10),
            });
        }
    }
    Budgets::load(&rows, now_ms)
}

fn bench(c: &mut Criterion) {
    let now = deepcli::budget::now_ms();
    let b = budgets(now);
    let limits = limits();
    let names: Vec<String> = (0..AGENTS).map(|a| format!("agent-{a}")).collect();
    let mut group = c.benchmark_group("budget");
    group.bench_function("admit_turn", |bench| {
        let mut i = 0usize;
        bench.iter(|| {
            i = (i + 1) % AGENTS;
            let agent = &names[i];
            // Taken and given back: the window keeps its size, so every check passes.
            let permit = b.admit_turn(black_box(agent), &limits, now);
            black_box(permit.is_ok());
            drop(permit);
        })
    });
    group.bench_function("check_turn", |bench| {
        let mut i = 0usize;
        bench.iter(|| {
            i = (i + 1) % AGENTS;
            black_box(b.check_turn(black_box(&names[i]), &limits, now).is_ok())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
