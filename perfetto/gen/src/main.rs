//! Regenerates `perfetto/src/generated/` from `perfetto/proto/perfetto_subset.proto`.
//!
//! Usage: `rprof-perfetto-gen [OUT_DIR]` (default: `../src/generated` next to this crate).
//! Writes `perfetto.protos.rs` (prost code, committed) and `perfetto_subset.fds`
//! (the `FileDescriptorSet`, for schema checks against upstream). Pure Rust: protox
//! parses the .proto, so no `protoc` is needed.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let proto_dir = crate_dir.join("../proto");
    let out_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| crate_dir.join("../src/generated"));
    std::fs::create_dir_all(&out_dir)?;

    let fds = protox::compile(["perfetto_subset.proto"], [&proto_dir])?;
    std::fs::write(out_dir.join("perfetto_subset.fds"), fds.encode_to_vec())?;

    prost_build::Config::new()
        .out_dir(&out_dir)
        .compile_fds(fds)?;
    eprintln!("wrote {}", out_dir.display());
    Ok(())
}
