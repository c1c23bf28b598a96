//! Routing-plan figures for `scripts/bench-route`, and the files its batch run needs.
//!
//! ```text
//! deepcli-plan-mem BINDINGS                 # plan memory and compile time, one key=value line
//! deepcli-plan-mem --write-config DIR BINDINGS   # the routing bench's config, as files
//! deepcli-plan-mem --emit-inputs DIR N      # N route inputs (JSON lines) hitting every tier
//! deepcli-plan-mem --write-plan DIR FILE     # DIR's compiled plan as routing-plan.json
//! ```
//!
//! Memory is counted by a global allocator wrapping the system allocator (`cap`): bytes live
//! after `RoutingPlan::compile` minus before, with the plan kept alive, so what loading the
//! config allocated is not in the figure and what compile frees again (temporaries) is not
//! either. It counts requested sizes, not allocator overhead or RSS.
//!
//! The config is `generate::generate_routing`, the one `benches/routing.rs` measures.

#[path = "generate.rs"]
mod generate;
#[path = "route_inputs.rs"]
mod route_inputs;

use route_inputs::{check_coverage, mixed_inputs};

use std::alloc::System;

use cap::Cap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use deepcli::config::{self, LoadOptions};
use deepcli::routing::{Peer, RouteInput, RoutingPlan};

/// The system allocator, counting live bytes (the `cap` crate: no `unsafe` here).
#[global_allocator]
static GLOBAL: Cap<System> = Cap::new(System, usize::MAX);

const USAGE: &str = "usage: deepcli-plan-mem BINDINGS
       deepcli-plan-mem --write-config DIR BINDINGS
       deepcli-plan-mem --emit-inputs DIR N
       deepcli-plan-mem --write-plan DIR FILE";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let count = |s: &str| s.replace('_', "").parse::<usize>().ok();
    let result = match args.as_slice() {
        [n] => count(n).map(measure),
        ["--write-config", dir, n] => count(n).map(|n| write_config(Path::new(dir), n)),
        ["--emit-inputs", dir, n] => count(n).map(|n| emit_inputs(Path::new(dir), n)),
        ["--write-plan", dir, file] => Some(write_plan(Path::new(dir), Path::new(file))),
        _ => None,
    };
    match result {
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
        Some(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
        Some(Ok(())) => ExitCode::SUCCESS,
    }
}

fn options() -> LoadOptions {
    LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    }
}

/// Prints `bindings=… plan_bytes=… plan_mb=… bytes_per_binding=… compile_ms=…`.
fn measure(bindings: usize) -> Result<(), String> {
    let loaded = route_inputs::load_generated(bindings);
    if let Some(d) = loaded.diagnostics.iter().find(|d| d.is_error()) {
        return Err(format!("generated config does not load: {d:?}"));
    }

    let live0 = GLOBAL.allocated();
    let plan = RoutingPlan::compile(&loaded.config).map_err(|e| e.to_string())?;
    let plan_bytes = (GLOBAL.allocated() - live0) as u64;
    assert_eq!(
        plan.bindings.len(),
        bindings,
        "every generated binding is a route binding"
    );

    // Compile time: median of 5, the plan's drop outside the timing.
    let mut ms: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let p = RoutingPlan::compile(&loaded.config);
            let elapsed = start.elapsed().as_secs_f64() * 1e3;
            drop(std::hint::black_box(p));
            elapsed
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "bindings={bindings} plan_bytes={plan_bytes} plan_mb={:.2} \
         bytes_per_binding={:.0} compile_ms={:.2}",
        mb(plan_bytes),
        plan_bytes as f64 / bindings as f64,
        ms[2],
    );
    drop(plan);
    Ok(())
}

fn write_config(dir: &Path, bindings: usize) -> Result<(), String> {
    let g = generate::generate_routing(bindings);
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text);
    std::fs::create_dir_all(dir)
        .and_then(|()| write("agents.yaml", &g.agents))
        .and_then(|()| write("channels.yaml", &g.channels))
        .and_then(|()| write("bindings.yaml", &g.bindings))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// `dir` loaded and compiled, refused with its first error.
fn compile_dir(dir: &Path) -> Result<RoutingPlan, String> {
    let loaded = config::load(dir, &options()).map_err(|e| e.to_string())?;
    if let Some(d) = loaded.diagnostics.iter().find(|d| d.is_error()) {
        return Err(format!("{} does not load: {d:?}", dir.display()));
    }
    RoutingPlan::compile(&loaded.config).map_err(|e| e.to_string())
}

/// Writes the plan of `dir` as `deepcli apply` would (generation 1), for `route --plan`.
fn write_plan(dir: &Path, file: &Path) -> Result<(), String> {
    let text = compile_dir(dir)?.to_document(1, "bench").to_json();
    std::fs::write(file, text).map_err(|e| format!("{}: {e}", file.display()))
}

/// Loads `dir`, compiles it and prints `n` route inputs as JSON lines (OpenClaw's field names,
/// absent fields left out), every tier and the default equally often.
fn emit_inputs(dir: &Path, n: usize) -> Result<(), String> {
    let plan = compile_dir(dir)?;
    let inputs = mixed_inputs(&plan, n);
    check_coverage(&plan, &inputs);
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut line = Vec::with_capacity(256);
    for (input, _) in &inputs {
        line.clear();
        serde_json::to_writer(&mut line, &to_json(input)).map_err(|e| e.to_string())?;
        // What the batch reader will see must be the input meant.
        let back: RouteInput = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
        assert_eq!(&back, input, "JSON round trip");
        line.push(b'\n');
        out.write_all(&line).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}

fn to_json(input: &RouteInput) -> serde_json::Value {
    use serde_json::{Value, json};
    let peer = |p: &Peer| json!({"kind": p.kind, "id": p.id});
    let mut m = serde_json::Map::new();
    m.insert("channel".into(), Value::from(input.channel.as_str()));
    if let Some(a) = &input.account_id {
        m.insert("accountId".into(), Value::from(a.as_str()));
    }
    if let Some(p) = &input.peer {
        m.insert("peer".into(), peer(p));
    }
    if let Some(p) = &input.parent_peer {
        m.insert("parentPeer".into(), peer(p));
    }
    if let Some(g) = &input.guild_id {
        m.insert("guildId".into(), Value::from(g.as_str()));
    }
    if let Some(t) = &input.team_id {
        m.insert("teamId".into(), Value::from(t.as_str()));
    }
    if !input.member_role_ids.is_empty() {
        m.insert("memberRoleIds".into(), json!(input.member_role_ids));
    }
    Value::Object(m)
}
