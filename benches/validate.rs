//! `deepcli validate` in-process: load + schema + semantic rules, at growing sizes.

#[path = "support/generate.rs"]
mod generate;

use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deepcli::config::{self, FileKind, LoadOptions};
use deepcli::validate;

fn bench(c: &mut Criterion) {
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    };
    let mut group = c.benchmark_group("validate");
    group.sample_size(10);
    for bindings in [1_000usize, 10_000, 100_000] {
        let size = generate::Size {
            agents: bindings / 10,
            bindings,
            accounts: (bindings / 100).max(3),
            seed: 7,
        };
        let g = generate::generate(size);
        group.throughput(Throughput::Elements(bindings as u64));
        group.bench_with_input(BenchmarkId::from_parameter(bindings), &g, |b, g| {
            b.iter(|| {
                let texts = vec![
                    (
                        FileKind::Agents,
                        PathBuf::from("agents.yaml"),
                        g.agents.clone(),
                    ),
                    (
                        FileKind::Channels,
                        PathBuf::from("channels.yaml"),
                        g.channels.clone(),
                    ),
                    (
                        FileKind::Bindings,
                        PathBuf::from("bindings.yaml"),
                        g.bindings.clone(),
                    ),
                ];
                let report = validate::finish(config::load_texts(Path::new("."), texts, &options));
                assert!(report.is_valid());
                report.diagnostics.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
