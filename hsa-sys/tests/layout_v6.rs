//! Compares every layout of the generated `hsakmt_v6` module with the libhsakmt-dev 6.2.4 `hsakmttypes.h` it was
//! generated from (the header of the ROCr 6.1.2 root, Debian trixie).
//!
//! `layout/layout_v6.cpp` and `layout/rust_side_v6.rs` are both emitted by the generator. The C++ program is
//! compiled with the directory holding that header first on the include path: `HSAKMT_V6_INCLUDE` if set, else the
//! trixie root's `/usr/include/hsakmt` (the root `scripts/rocm-env.sh 6.1` names, and builds if needed). The
//! header is plain C types, so the host's compiler serves.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "layout/compare.rs"]
mod compare;
#[path = "layout/rust_side_v6.rs"]
mod rust_side_v6;

use compare::to_map;

/// Checked lines at the time of generation; a change means the header or the generator changed.
const EXPECTED_LINES: usize = 644;

fn v6_include_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HSAKMT_V6_INCLUDE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // `scripts/rocm-env.sh 6.1` prints the trixie root's path, building it first (or waiting for a build in
    // progress) if needed, and says why when it cannot.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/rocm-env.sh");
    let out = Command::new(&script)
        .arg("6.1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "no libhsakmt-dev 6.x header: set HSAKMT_V6_INCLUDE, or let `scripts/rocm-env.sh 6.1` build the trixie \
         root: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = Path::new(&root).join("usr/include/hsakmt");
    assert!(
        dir.join("hsakmttypes.h").is_file(),
        "{} has no hsakmttypes.h (the trixie root lacks libhsakmt-dev)",
        dir.display()
    );
    dir
}

fn cpp_lines() -> Vec<String> {
    let include = format!("-I{}", v6_include_dir().display());
    compare::cpp_lines("layout_v6.cpp", "hsa_sys_layout_v6_cpp", &[&include])
}

#[test]
fn every_generated_v6_layout_matches_the_6_2_4_header() {
    let cpp = to_map(cpp_lines(), "C++");
    let rust = to_map(rust_side_v6::lines(), "Rust");
    assert_eq!(rust.len(), rust_side_v6::LINE_COUNT);
    compare::assert_sides_match(&cpp, &rust, EXPECTED_LINES);
}

#[test]
fn v6_covers_the_grown_fields_the_thunk_writes() {
    let rust = to_map(rust_side_v6::lines(), "Rust");
    for label in [
        "offset hsakmt_v6::_HsaNodeProperties.NumXcc",
        "offset hsakmt_v6::_HsaNodeProperties.KFDGpuID",
        "offset hsakmt_v6::_HsaNodeProperties.FamilyID",
        "offset hsakmt_v6::_HsaNodeProperties.Integrated",
        "bits hsakmt_v6::_HsaMemFlags.ui32.GTTAccess",
        "offset hsakmt_v6::_HsaEventData.EventData",
    ] {
        assert!(rust.contains_key(label), "{label} not checked");
    }
    assert_eq!(rust["size hsakmt_v6::_HsaNodeProperties"], "356");
    assert_eq!(rust["offset hsakmt_v6::_HsaNodeProperties.NumXcc"], "344");
    assert_eq!(rust_side_v6::BITFIELD_COUNT, 93);
}
