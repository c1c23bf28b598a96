//! deepcli: the declarative reconciler and control plane for multi-agent chat hubs.
//!
//! Data flows one way, a module per stage:
//!
//! ```text
//! files ──config::load──▶ Config ──validate──▶ Report
//!                            └──routing (compile)──▶ RoutingPlan
//! ```
//!
//! The library returns values and diagnostics; only `cli` prints.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod diagnostic;
pub mod hash;
pub mod report;
pub mod routing;
pub mod suggest;
pub mod validate;
