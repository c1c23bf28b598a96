//! A2A's gRPC binding (docs/a2a.md): the service and messages of `proto/lf/a2a/v1/a2a.proto`,
//! compiled by protox (pure Rust, no system `protoc`), with tonic's server (the hub's binding)
//! and client (a remote agent's, `runtime.kind: a2a`) and pbjson's ProtoJSON serde for every
//! message.

use std::path::PathBuf;

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["lf/a2a/v1/a2a.proto"], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let set = descriptors.encode_to_vec();
    std::fs::write(out.join("a2a_descriptor.bin"), &set)?;
    // The well-known types with ProtoJSON serde (tonic's default maps them to prost-types, which
    // has none).
    let mut builder = tonic_prost_build::configure()
        .build_client(true)
        .build_transport(false);
    for t in ["Struct", "Value", "ListValue", "Timestamp"] {
        builder = builder.extern_path(
            format!(".google.protobuf.{t}"),
            format!("::pbjson_types::{t}"),
        );
    }
    builder.compile_fds(descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        // What the operations answer is read into the messages: a field the proto lacks (0.3's
        // `kind`, say) is not an error.
        .ignore_unknown_fields()
        .build(&[".lf.a2a.v1"])?;
    Ok(())
}
