//! Routing: how an inbound message finds its agent and session (routing.md).
//!
//! Pure: no I/O. `normalize` and `scope` are shared with the validator, so that the rules that
//! judge bindings and the router that follows them read a binding the same way.

pub mod normalize;
pub mod scope;
