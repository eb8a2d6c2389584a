//! The generated table layouts (`tool/src/table_layouts.rs`) against the real headers: compiles
//! `tests/tables/probe.cpp` inside each runtime's root (`scripts/rocm-env.sh`) and compares its output with the
//! committed numbers. 5.2 is this host; 6.1 and 6.4 run in their roots, which `scripts/rocm-env.sh` builds on first
//! use (as root); a runtime that cannot run fails the test with the script's reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rprof_tool::runtime::layouts::{TableLayout, LAYOUTS};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn in_root(version: &str, args: &[&str]) -> std::process::Output {
    Command::new(repo().join("scripts/rocm-env.sh"))
        .arg(version)
        .arg("--")
        .args(args)
        .output()
        .expect("run scripts/rocm-env.sh")
}

fn probe(version: &str) -> BTreeMap<String, usize> {
    let source = repo().join("tool/tests/tables/probe.cpp");
    // /tmp is shared with every root.
    let exe = std::env::temp_dir().join(format!(
        "rprof-table-probe-{}-{version}",
        std::process::id()
    ));
    let compile = in_root(
        version,
        &[
            "g++",
            "-std=c++17",
            "-w",
            "-DAMD_INTERNAL_BUILD",
            "-I/usr/include/hsa",
            source.to_str().unwrap(),
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    assert!(
        compile.status.success(),
        "compiling the probe for {version} failed:\n{}",
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = in_root(version, &[exe.to_str().unwrap()]);
    let _ = std::fs::remove_file(&exe);
    assert!(run.status.success(), "the probe failed on {version}");
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("label value");
            (k.to_string(), v.parse().expect("number"))
        })
        .collect()
}

fn expected(l: &TableLayout) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (t, v) in [("root", l.root), ("core", l.core), ("amd", l.amd)] {
        m.insert(format!("{t}.major"), v.major as usize);
        m.insert(format!("{t}.step"), v.step as usize);
        m.insert(format!("{t}.size"), v.size);
    }
    for (t, entries) in [
        ("HsaApiTable", l.root_entries),
        ("CoreApiTable", l.core_entries),
        ("AmdExtTable", l.amd_entries),
    ] {
        for (name, offset) in entries {
            m.insert(format!("{t}.{name}"), *offset);
        }
    }
    m
}

#[test]
fn committed_layouts_match_each_runtimes_headers() {
    let mut checked = Vec::new();
    for l in LAYOUTS {
        assert_eq!(
            probe(l.runtime),
            expected(l),
            "{}: the headers differ from tool/src/table_layouts.rs; run scripts/gen-table-layouts.sh",
            l.runtime
        );
        checked.push(l.runtime);
    }
    assert_eq!(
        checked,
        ["5.2", "6.1", "6.4"],
        "every runtime's headers are checked"
    );
}
