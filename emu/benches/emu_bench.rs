//! `cargo bench -p rprof-emu` (after `cargo build -p rprof-emu-thunk`): builds `emu_bench.cpp` against the real ROCr and runs it over the emulator, printing
//! round-trip latency, dispatch throughput (1 and 4 queues) and idle CPU. Figures, not assertions.
use std::process::Command;

fn main() {
    let lib =
        rprof_emu::test_support::library_dir().expect("libhsakmt.so built (cargo bench builds it)");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/emu_bench.cpp");
    let exe = lib.join("emu_bench");
    let status = Command::new("g++")
        .args(["-O2", "-std=c++17"])
        .arg(&src)
        .args(["-lhsa-runtime64", "-lpthread", "-o"])
        .arg(&exe)
        .status()
        .expect("g++ runs");
    assert!(status.success(), "building emu_bench failed");
    let iterations = std::env::var("EMU_BENCH_ITERATIONS").unwrap_or_else(|_| "20000".into());
    let status = Command::new(&exe)
        .arg(iterations)
        .env("LD_LIBRARY_PATH", &lib)
        .env("RPROF_EMU_KERNEL_NS", "0")
        .status()
        .expect("emu_bench runs");
    assert!(status.success());
}
