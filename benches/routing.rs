//! The routing engine in-process: `RoutingPlan::compile` at growing sizes, and `resolve` over a
//! mix of inputs that hit every tier and the default, at 1k and 100k bindings (the cost of a
//! resolution should not depend on the number of bindings).
//!
//! The config is `generate::generate_routing`, the one `deepcli-plan-mem` measures.

#[path = "support/generate.rs"]
mod generate;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deepcli::config::Loaded;
use deepcli::routing::{RouteInput, RoutingPlan};
use deepcli::validate;

// The shipped binary's allocator: resolve allocates its result's strings.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Inputs per resolve benchmark, the same at every size, so only the plan's size differs.
const INPUTS: usize = 9 * 1024;

fn load(bindings: usize) -> Loaded {
    let loaded = route_inputs::load_generated(bindings);
    let errors: Vec<_> = loaded
        .diagnostics
        .iter()
        .chain(&validate::check(&loaded.config))
        .filter(|d| d.is_error())
        .map(|d| format!("{d:?}"))
        .collect();
    assert!(
        errors.is_empty(),
        "generated config is not valid: {errors:#?}"
    );
    loaded
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/compile");
    group.sample_size(10);
    for bindings in [1_000usize, 10_000, 100_000] {
        let loaded = load(bindings);
        group.throughput(Throughput::Elements(bindings as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(bindings),
            &loaded.config,
            |b, config| b.iter_with_large_drop(|| RoutingPlan::compile(black_box(config))),
        );
    }
    group.finish();
}

fn resolve(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/resolve");
    group.throughput(Throughput::Elements(1));
    for bindings in [1_000usize, 100_000] {
        let loaded = load(bindings);
        let plan =
            RoutingPlan::compile(&loaded.config).expect("the generated config fits the index");
        drop(loaded);
        let mixed = mixed_inputs(&plan, INPUTS);
        check_coverage(&plan, &mixed);
        let inputs: Vec<RouteInput> = mixed.into_iter().map(|(input, _)| input).collect();
        group.bench_function(BenchmarkId::from_parameter(bindings), |b| {
            let mut next = 0;
            b.iter(|| {
                let input = &inputs[next];
                next += 1;
                if next == inputs.len() {
                    next = 0;
                }
                plan.resolve(black_box(input))
            })
        });
    }
    group.finish();
}

/// The floor under `resolve` at size: one load whose address depends on the previous one, over
/// a working set that fits in this machine's caches (256 KiB) and over one the size of a
/// 100,000-binding plan (32 MiB). A resolution cannot be faster than the dependent touches of
/// memory it must make; `scripts/bench-route` prints this beside the resolve figures.
fn memory(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/memory");
    for kib in [256usize, 32 * 1024] {
        let next = chase(kib * 1024 / 64);
        group.bench_function(BenchmarkId::from_parameter(kib), |b| {
            let mut at = 0;
            b.iter(|| {
                at = next[at][0];
                at
            })
        });
    }
    group.finish();
}

/// `lines` cache lines, each holding the index of the next in one random cycle through all.
fn chase(lines: usize) -> Vec<[usize; 8]> {
    let mut rng = generate::Rng(0x2545_F491_4F6C_DD1D);
    let mut order: Vec<usize> = (0..lines).collect();
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut next = vec![[0usize; 8]; lines];
    for (k, &line) in order.iter().enumerate() {
        next[line][0] = order[(k + 1) % lines];
    }
    next
}

#[path = "support/route_inputs.rs"]
mod route_inputs;

use route_inputs::{check_coverage, mixed_inputs};

criterion_group!(benches, compile, resolve, memory);
criterion_main!(benches);
