//! The Hub (hub.md): agents working with agents. It resolves a tool call's target, checks
//! policy, writes provenance and correlation ids, and hands the message to the target
//! session's FIFO — the Access layer's, so one session never runs two turns at once. It runs no
//! model and keeps no queue of its own beyond the runs crash recovery needs.
//!
//! Beside Access, below the controller: the controller builds it, swaps its policy after every
//! apply and mounts its HTTP routes; the Access layer knows it only as the door that gives
//! every ACP session the `deepcli` MCP server.

pub mod store;
pub mod token;
