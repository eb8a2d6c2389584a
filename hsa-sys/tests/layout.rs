//! Compares every generated layout with the real headers.
//!
//! `layout/layout.cpp` and `layout/rust_side.rs` are both emitted by the generator from the generated bindings, so
//! every struct, union, field and bitfield is covered. The C++ program is compiled against `/usr/include/hsa` and
//! `/usr/include/hsakmttypes.h` and its output must equal the Rust side label for label.

#[path = "layout/compare.rs"]
mod compare;
#[path = "layout/rust_side.rs"]
mod rust_side;

use compare::to_map;

/// Checked lines at the time of generation; a change means the headers or the generator changed.
const EXPECTED_LINES: usize = 1699;

fn cpp_lines() -> Vec<String> {
    compare::cpp_lines(
        "layout.cpp",
        "hsa_sys_layout_cpp",
        &["-DAMD_INTERNAL_BUILD", "-I/usr/include/hsa"],
    )
}

#[test]
fn every_generated_layout_matches_the_real_headers() {
    let cpp = to_map(cpp_lines(), "C++");
    let rust = to_map(rust_side::lines(), "Rust");
    assert_eq!(rust.len(), rust_side::LINE_COUNT);
    compare::assert_sides_match(&cpp, &rust, EXPECTED_LINES);
}

#[test]
fn coverage_includes_the_types_the_tracer_and_emulator_use() {
    let rust = to_map(rust_side::lines(), "Rust");
    let count = |prefix: &str| rust.keys().filter(|l| l.starts_with(prefix)).count();
    // Every function-pointer entry of the tool tables is compared (offset and size), plus `version`.
    assert_eq!(count("offset hsa::CoreApiTable."), 1 + 125);
    assert_eq!(count("offset hsa::AmdExtTable."), 1 + 48);
    assert_eq!(count("offset hsa::FinalizerExtTable."), 1 + 6);
    assert_eq!(count("offset hsa::ImageExtTable."), 1 + 13);
    assert_eq!(count("offset hsa::HsaApiTable."), 5);
    assert_eq!(count("offset hsa::ApiTableVersion."), 4);
    for label in [
        "size hsa::hsa_kernel_dispatch_packet_s",
        "size hsa::amd_signal_s",
        "size hsa::amd_queue_s",
        "size hsa::amd_kernel_code_s",
        "size hsa::AmdExtTable",
        "size hsa::hsa_amd_barrier_value_packet_s",
        "size hsakmt::_HsaNodeProperties",
        "offset hsakmt::_HsaNodeProperties.Capability",
        "bits hsakmt::HSA_CAPABILITY.ui32.HotPluggable",
        "bits hsakmt::_HsaMemFlags.ui32.NonPaged",
        "offset hsakmt::_HsaMemFlags.Value",
    ] {
        assert!(rust.contains_key(label), "{label} not checked");
    }
    assert_eq!(rust_side::BITFIELD_COUNT, 88);
}
