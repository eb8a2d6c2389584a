//! Bounded fuzzing of the configuration parser (stable Rust, deterministic):
//! random environments of `RPROF_*` values — tokens the parsers treat
//! specially, numbers at and past their bounds, regex syntax, placeholders,
//! control characters and random bytes — must give a configuration or one
//! [`ConfigError`] naming a variable that was set, with a one-line message;
//! never a panic. `RPROF_FUZZ_ITERATIONS` raises the count (CI: the default, 10,000).

use std::collections::HashMap;

use super::{misspelt_variables, ConfigError, ProcessFacts, TraceConfig, Tuning, KNOWN_VARIABLES};

/// Pieces values are made of.
const PIECES: &[&str] = &[
    "",
    "0",
    "1",
    "-1",
    "yes",
    "no",
    "on",
    "off",
    "true",
    "false",
    "TRUE",
    " ",
    "\t",
    ",",
    ",,",
    "csv",
    "json",
    "pftrace",
    "rocpd",
    "otf2",
    "csv,json,pftrace",
    "xml",
    "%pid%",
    "%ppid%",
    "%hostname%",
    "%",
    "%%",
    "%q%",
    "/",
    "/proc/",
    "..",
    "[",
    "]",
    "(",
    ")",
    "*",
    "+",
    "?",
    "\\",
    "[z-a]",
    "^a.*$",
    "{1,99999}",
    "(?P<x>",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999",
    "1ms",
    "0x10",
    "1e3",
    "é",
    "\u{0}",
    "\n",
    "\u{feff}",
];

fn rng(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[test]
fn fuzz_trace_config_never_panics_and_names_a_set_variable() {
    let iterations: u64 = std::env::var("RPROF_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut next = rng(0x51A7_E0F1_C0DE_5EEDu64);
    let facts = ProcessFacts {
        pid: 4242,
        ppid: 1,
        hostname: "host".into(),
    };
    let (mut ok, mut errors) = (0u64, 0u64);
    for _ in 0..iterations {
        let mut env: HashMap<String, String> = HashMap::new();
        // Tracing on most of the time, so the rest is read.
        if next() % 8 != 0 {
            env.insert("RPROF_KERNEL_TRACE".into(), "1".into());
        }
        for _ in 0..1 + next() % 5 {
            let name = KNOWN_VARIABLES[(next() % KNOWN_VARIABLES.len() as u64) as usize];
            let mut value = String::new();
            for _ in 0..next() % 4 {
                if next() % 5 == 0 {
                    value.push(char::from_u32((next() % 0x3000) as u32).unwrap_or('?'));
                } else {
                    value.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
                }
            }
            env.insert(name.to_string(), value);
        }
        let lookup = |name: &str| env.get(name).cloned();
        let result = std::panic::catch_unwind(|| {
            let config = TraceConfig::from_source(&lookup, &facts).map(|_| ());
            let tuning = Tuning::from_source(&lookup).map(|_| ());
            let names: Vec<&str> = env.keys().map(String::as_str).collect();
            let _ = misspelt_variables(names.iter().copied());
            (config, tuning)
        });
        let (config, tuning) =
            result.unwrap_or_else(|_| panic!("configuration parsing panicked on {env:?}"));
        for r in [config, tuning] {
            match r {
                Ok(()) => ok += 1,
                Err(ConfigError { variable, message }) => {
                    errors += 1;
                    // Bad configuration is one clear message naming the
                    // variable (docs/reliability.md).
                    assert!(
                        env.contains_key(variable) || variable == "RPROF_KERNEL_TRACE",
                        "{variable}: {message} from {env:?}"
                    );
                    assert!(
                        !message.is_empty() && !message.contains('\n'),
                        "{variable}: {message:?}"
                    );
                }
            }
        }
    }
    assert_eq!(ok + errors, 2 * iterations);
    assert!(ok > 0 && errors > 0, "ok {ok}, errors {errors}");
}
