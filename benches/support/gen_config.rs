//! Writes a generated config directory for the benchmark scripts:
//! `cargo run --release --features bench-tools --bin deepcli-gen-config -- [--no-runtimes] DIR AGENTS BINDINGS ACCOUNTS [SEED]`.
//!
//! `--no-runtimes` drops the `process` runtimes the generator gives every 11th agent (their
//! command, `agent-runner`, does not exist): `scripts/bench-up` runs the config under the
//! controller, where those would crash-loop and skew the figures. Validation and planning
//! benches keep them.

#[path = "generate.rs"]
mod generate;

use std::process::ExitCode;

const USAGE: &str = "usage: deepcli-gen-config [--no-runtimes] DIR AGENTS BINDINGS ACCOUNTS [SEED]";

fn main() -> ExitCode {
    let mut no_runtimes = false;
    let mut args: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-runtimes" => no_runtimes = true,
            flag if flag.starts_with("--") => {
                eprintln!("unknown option `{flag}`\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => args.push(arg),
        }
    }
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let Some(dir) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let size = generate::Size {
        agents: num(1, 10_000),
        bindings: num(2, 100_000),
        accounts: num(3, 1_000),
        seed: num(4, 7) as u64,
    };
    let mut g = generate::generate(size);
    if no_runtimes {
        // The generator writes each runtime as one flow-style line under its agent.
        g.agents = g
            .agents
            .lines()
            .filter(|line| !line.trim_start().starts_with("runtime:"))
            .map(|line| format!("{line}\n"))
            .collect();
    }
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
