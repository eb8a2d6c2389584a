//! Compares every generated layout with the real headers.
//!
//! `layout/layout.cpp` and `layout/rust_side.rs` are both emitted by the generator from the generated bindings, so
//! every struct, union, field and bitfield is covered. The C++ program is compiled against `/usr/include/hsa` and
//! `/usr/include/hsakmttypes.h` and its output must equal the Rust side label for label.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[path = "layout/rust_side.rs"]
mod rust_side;

/// Checked lines at the time of generation; a change means the headers or the generator changed.
const EXPECTED_LINES: usize = 1699;

/// C++ compilers tried in order (`CXX` first when set).
const COMPILERS: &[&str] = &["clang++-15", "clang++", "g++", "c++"];

fn find_compiler() -> String {
    let from_env = std::env::var("CXX").ok().filter(|c| !c.is_empty());
    let candidates = from_env
        .iter()
        .map(String::as_str)
        .chain(COMPILERS.iter().copied());
    for candidate in candidates {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return candidate.to_string();
        }
    }
    panic!(
        "no C++ compiler found (tried $CXX and {COMPILERS:?}): the hsa-sys layout test needs one, plus the Debian \
         libhsa-runtime-dev and libhsakmt-dev headers"
    );
}

fn to_map(lines: impl IntoIterator<Item = String>, side: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in lines {
        let (label, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("{side}: malformed line {line:?}"));
        let previous = map.insert(label.to_string(), value.to_string());
        assert!(previous.is_none(), "{side}: duplicate label {label:?}");
    }
    map
}

fn cpp_lines() -> Vec<String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/layout/layout.cpp");
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hsa_sys_layout_cpp");
    let compiler = find_compiler();
    let compile = Command::new(&compiler)
        .args([
            "-std=c++14",
            "-DAMD_INTERNAL_BUILD",
            "-I/usr/include/hsa",
            "-w",
            "-o",
        ])
        .arg(&exe)
        .arg(&source)
        .output()
        .expect("run the C++ compiler");
    assert!(
        compile.status.success(),
        "{compiler} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&exe)
        .output()
        .expect("run the compiled layout checker");
    assert!(
        run.status.success(),
        "layout checker failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8(run.stdout)
        .expect("layout checker prints UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_generated_layout_matches_the_real_headers() {
    let cpp = to_map(cpp_lines(), "C++");
    let rust = to_map(rust_side::lines(), "Rust");
    assert_eq!(rust.len(), rust_side::LINE_COUNT);
    assert_eq!(rust.len(), EXPECTED_LINES);
    assert_eq!(cpp.len(), EXPECTED_LINES);

    let mismatches: Vec<String> = cpp
        .iter()
        .filter_map(|(label, c)| match rust.get(label) {
            Some(r) if r == c => None,
            Some(r) => Some(format!("{label}: C++ {c}, Rust {r}")),
            None => Some(format!("{label}: missing on the Rust side")),
        })
        .chain(
            rust.keys()
                .filter(|l| !cpp.contains_key(*l))
                .map(|l| format!("{l}: missing on the C++ side")),
        )
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} layout mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
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
