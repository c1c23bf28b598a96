//! Routing: how an inbound message finds its agent and session (routing.md).
//!
//! Pure: no I/O. `normalize` and `scope` are shared with the validator, so that the rules that
//! judge bindings and the router that follows them read a binding the same way.

pub mod batch;
pub mod binding;
pub mod declared;
pub mod document;
pub mod explain;
mod index;
pub mod input;
mod json;
pub mod plan;
pub mod scope;
pub mod session;
pub mod shared_str;

pub use binding::MatchedBy;
pub use index::IndexError;
pub use input::{Peer, RouteInput, RouteResult};
pub use plan::{Explanation, RoutingPlan};
pub use shared_str::SharedStr;
