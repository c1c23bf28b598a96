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
// Errors carry the paths and sources their messages need; they travel only on cold paths, so
// their size does not matter and boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod apply;
pub mod cli;
pub mod clock;
pub mod config;
pub mod controller;
pub mod demo_agent;
pub mod diagnostic;
pub mod durable;
pub mod failpoint;
pub mod hash;
pub mod http_server;
pub mod ids;
pub mod log_line;
pub mod manage;
mod mounts;
pub mod os;
pub(crate) mod owner_only;
pub mod plan;
pub mod report;
pub mod routing;
pub mod runtime;
pub mod span;
pub mod state;
pub mod suggest;
pub mod threads;
pub mod trash;
pub mod validate;
pub mod workspace;
