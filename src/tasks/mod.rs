//! Tasks (tasks.md): delegated work with an acceptance condition, evidence and a person's
//! verdict. `state` is the state machine and its guards (who may cause which event);
//! `store` keeps tasks and their history, each event applied in the transaction that read the
//! state it moves from.
//!
//! What is here so far is the model; the tools, commands, room commands and artifacts that
//! drive it come on top (issue 37).

// The model lands before the doors that drive it (tools, commands, room commands): until they
// do, parts of it have no caller but its tests.
#![allow(dead_code)]

pub(crate) mod state;
pub(crate) mod store;
