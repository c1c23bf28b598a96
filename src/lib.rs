//! deepcli: the declarative reconciler and control plane for multi-agent chat hubs.
//!
//! Data flows one way, a module per stage:
//!
//! ```text
//! files ──config::load──▶ Config ──validate──▶ Report
//!                            ├──plan::Desired ──plan::diff(state, world)──▶ Plan ──apply──▶ state + disk
//!                            └──routing (compile)──▶ RoutingPlan ──publish──▶ routing-plan.json
//! ```
//!
//! The library returns values and diagnostics; only `cli` prints.
#![forbid(unsafe_code)]
// Visibility says who uses an item: `pub` only for what leaves the crate (the command line, the
// pipeline the tests and benches drive, a bridge's signature), `pub(crate)` for the rest.
#![warn(unreachable_pub)]
// Errors carry the paths and sources their messages need; they travel only on cold paths, so
// their size does not matter and boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub(crate) mod a2a;
pub(crate) mod a2a_proto;
pub(crate) mod access;
pub(crate) mod adapters;
pub(crate) mod apply;
pub(crate) mod approvals;
mod cli;
pub(crate) mod clock;
pub mod config;
pub(crate) mod console;
pub(crate) mod controller;
pub(crate) mod credentials;
pub(crate) mod demo_agent;
pub mod diagnostic;
pub(crate) mod doctor;
pub(crate) mod durable;
pub(crate) mod failpoint;
pub mod fake_platform;
pub mod hash;
pub(crate) mod http_client;
pub(crate) mod http_server;
pub(crate) mod hub;
pub(crate) mod ids;
pub(crate) mod log_line;
pub mod manage;
pub(crate) mod metrics;
pub(crate) mod mounts;
pub mod openclaw;
pub mod os;
pub(crate) mod owner_only;
pub(crate) mod plan;
pub(crate) mod platform;
pub(crate) mod plural;
pub mod policy;
pub mod report;
pub mod routing;
pub(crate) mod rpc;
pub(crate) mod runtime;
pub(crate) mod sandbox;
pub(crate) mod scaffold;
pub(crate) mod sessions;
pub(crate) mod shown;
pub(crate) mod snapshot;
pub(crate) mod span;
pub mod state;
pub(crate) mod suggest;
pub(crate) mod tasks;
pub(crate) mod threads;
pub(crate) mod traces;
pub mod trash;
pub mod validate;
pub mod workspace;

/// How a bridge signs what it hands in (`X-Deepcli-Signature`), for the tests' bridges.
pub use access::sign;
/// A store's calls on each state backend, for the benchmarks.
#[cfg(feature = "bench-tools")]
pub use adapters::store_bench as state_bench;
/// The budget windows, for the benchmarks.
pub use sessions::budget;
/// A task's own path (state and artifacts), for the benchmarks.
#[cfg(feature = "bench-tools")]
pub use tasks::bench as task_bench;

/// The command line: what the `deepcli` binary runs.
pub use cli::{Cli, command as cli_command, parse as parse_args, run as run_cli};
