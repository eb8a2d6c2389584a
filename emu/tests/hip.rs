//! Runs a HIP program (`programs/hip_app.cpp`, built with the hipcc of the runtime `RPROF_TEST_ROCM` selects) on
//! that real HIP/ROCr over the emulated GPU. Its kernels have host implementations registered with the emulator, so
//! results are exact.
mod common;

use common::{build_cached, compiler, emulator, programs_dir, run};
use std::path::Path;

fn hip_app() -> std::path::PathBuf {
    let src = programs_dir().join("hip_app.cpp");
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/rprof_emu.h");
    let emu = emulator();
    build_cached("hip_app", &[&src, &header], |out| {
        let mut c = compiler("hipcc");
        c.args(["--offload-arch=gfx90a", "-O1"])
            .arg(format!("-I{}", header.parent().unwrap().display()))
            .arg(&src)
            .args(&emu.link_args)
            .arg("-o")
            .arg(out);
        c
    })
}

#[test]
fn hip_streams_events_graphs_and_copies() {
    hip_program(&[]);
}

#[test]
fn hip_with_the_sdma_engine() {
    hip_program(&[("RPROF_EMU_SDMA", "1")]);
}

fn hip_program(extra: &[(&str, &str)]) {
    let mut env = vec![("RPROF_EMU_KERNEL_NS", "slow=2000000")];
    env.extend_from_slice(extra);
    let r = run(&hip_app(), &[], &env);
    assert_eq!(r.int("device_count"), 1);
    assert_eq!(r.get("arch"), "gfx90a:sramecc-:xnack-");
    assert_eq!(r.int("cus"), 104);
    assert_eq!(r.int("scale_wrong"), 0);
    assert_eq!(r.int("d2d_wrong"), 0);
    assert_eq!(r.int("memset_wrong"), 0);
    assert_eq!(r.int("streams_wrong"), 0);
    assert_eq!(r.int("slow_ms_at_least_2"), 1);
    assert_eq!(r.int("slow_ms_below_50"), 1);
    assert_eq!(r.int("graph_nodes"), 10);
    assert_eq!(r.int("graph_wrong"), 0);
    // scale 1 + 4 streams x 100 + graph 10 x 20.
    assert_eq!(r.int("host_kernels"), 601);
    assert_eq!(r.int("faults"), 0);
    assert_eq!(r.int("blits_skipped"), 0);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn hip_on_two_gpus_sees_both() {
    let r = run(
        &hip_app(),
        &[],
        &[
            ("RPROF_EMU_GPUS", "gfx90a,gfx90a"),
            ("RPROF_EMU_KERNEL_NS", "slow=2000000"),
        ],
    );
    assert_eq!(r.int("device_count"), 2);
    assert_eq!(r.int("graph_wrong"), 0);
    assert_eq!(r.int("done"), 1);
}
