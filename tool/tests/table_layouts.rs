//! The generated table layouts (`tool/src/table_layouts.rs`) against the real headers: compiles
//! `tests/tables/probe.cpp` inside each runtime's root (`scripts/rocm-env.sh`) and compares its output with the
//! committed numbers. 5.2 is this host; 6.1 and 6.4 are checked where their roots are already built and the test
//! runs as root (the roots need it), and reported as skipped otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rprof_tool::runtime::layouts::{TableLayout, LAYOUTS};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether `scripts/rocm-env.sh VERSION -- ...` can run without building a root.
fn runtime_available(version: &str) -> Result<(), String> {
    if version == "5.2" {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("the roots need root privileges".into());
    }
    let suite = match version {
        "6.1" => "trixie",
        "6.4" => "sid",
        other => return Err(format!("unknown runtime {other}")),
    };
    let cache =
        std::env::var("RPROF_ROCM_ROOTS").unwrap_or_else(|_| "/var/cache/rprof-rocm".into());
    let built = std::fs::read_dir(&cache)
        .map_err(|e| format!("{cache}: {e}"))?
        .flatten()
        .any(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with(&format!("{suite}-"))
                && d.path().join(".rprof-rocm-recipe").is_file()
        });
    if built {
        Ok(())
    } else {
        Err(format!(
            "no {suite} root under {cache} (scripts/rocm-env.sh {version} builds it)"
        ))
    }
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
        if let Err(why) = runtime_available(l.runtime) {
            eprintln!("table layouts: SKIPPED {}: {why}", l.runtime);
            continue;
        }
        assert_eq!(
            probe(l.runtime),
            expected(l),
            "{}: the headers differ from tool/src/table_layouts.rs; run scripts/gen-table-layouts.sh",
            l.runtime
        );
        checked.push(l.runtime);
    }
    eprintln!("table layouts: checked {checked:?}");
    assert!(
        checked.contains(&"5.2"),
        "the host runtime is always checked"
    );
}
