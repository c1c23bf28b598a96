//! A2A 1.0's `a2a.proto` (vendored under `proto/`, compiled by `build.rs`): its messages with
//! ProtoJSON serde (pbjson), the service's server (the hub's gRPC binding, `a2a::grpc`) and its
//! client (a remote agent spoken to over gRPC, `runtime::a2a`). Generated code only: what a call
//! means is its caller's.

#![allow(
    clippy::all,
    clippy::pedantic,
    dead_code,
    missing_docs,
    unreachable_pub
)]

include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.rs"));
include!(concat!(env!("OUT_DIR"), "/lf.a2a.v1.serde.rs"));
