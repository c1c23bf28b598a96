//! Writes a generated config directory for the benchmark scripts:
//! `cargo run --release --features bench-tools --bin deepcli-gen-config -- DIR AGENTS BINDINGS ACCOUNTS [SEED]`.

#[path = "generate.rs"]
mod generate;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let Some(dir) = args.first() else {
        eprintln!("usage: deepcli-gen-config DIR AGENTS BINDINGS ACCOUNTS [SEED]");
        return ExitCode::from(2);
    };
    let size = generate::Size {
        agents: num(1, 10_000),
        bindings: num(2, 100_000),
        accounts: num(3, 1_000),
        seed: num(4, 7) as u64,
    };
    let g = generate::generate(size);
    let dir = std::path::Path::new(dir);
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text);
    if let Err(e) = std::fs::create_dir_all(dir)
        .and_then(|()| write("agents.yaml", &g.agents))
        .and_then(|()| write("channels.yaml", &g.channels))
        .and_then(|()| write("bindings.yaml", &g.bindings))
    {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
