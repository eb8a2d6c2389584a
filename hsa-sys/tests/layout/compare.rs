//! What both layout tests share: compile and run a generated C++ layout printer, read `label value` lines on
//! both sides, and compare them label for label.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

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
        "no C++ compiler found (tried $CXX and {COMPILERS:?}): the hsa-sys layout tests need one, plus the headers \
         the bindings were generated from"
    );
}

/// `label value` lines as a map; a malformed or repeated label fails the test.
pub fn to_map(lines: impl IntoIterator<Item = String>, side: &str) -> BTreeMap<String, String> {
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

/// Compiles `tests/layout/<source>` with `flags` into `CARGO_TARGET_TMPDIR/<exe_name>`, runs it and returns its
/// output lines.
pub fn cpp_lines(source: &str, exe_name: &str, flags: &[&str]) -> Vec<String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/layout")
        .join(source);
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(exe_name);
    let compiler = find_compiler();
    let compile = Command::new(&compiler)
        .arg("-std=c++14")
        .args(flags)
        .arg("-w")
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("run the C++ compiler {compiler}: {e}"));
    assert!(
        compile.status.success(),
        "{compiler} {flags:?} failed on {}:\n{}",
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

/// Both sides hold exactly `expected_lines` labels and agree on every value.
pub fn assert_sides_match(
    cpp: &BTreeMap<String, String>,
    rust: &BTreeMap<String, String>,
    expected_lines: usize,
) {
    assert_eq!(rust.len(), expected_lines);
    assert_eq!(cpp.len(), expected_lines);
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
