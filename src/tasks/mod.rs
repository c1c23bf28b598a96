//! Tasks (tasks.md): delegated work with an acceptance condition, evidence and a person's
//! verdict. `state` is the state machine and its guards (who may cause which event);
//! `store` keeps tasks and their history, each event applied in the transaction that read the
//! state it moves from.
//! `artifacts` hands files from one agent's workspace to another's, through a store of its own,
//! following no link an agent plants.

pub(crate) mod artifacts;
#[cfg(feature = "bench-tools")]
pub mod bench;
pub(crate) mod state;
pub(crate) mod store;
