//! The emulator under a HIP program (`tests/programs/emu/hip_app.cpp`, built with the hipcc of the runtime
//! `RPROF_TEST_ROCM` selects) on that real HIP/ROCr, untraced: streams, events, graphs, copies and memsets, with and
//! without the SDMA engine, and two GPUs. Its kernels have host implementations registered with the emulator, so
//! results are exact. (Moved here from `emu/tests/hip.rs` so that it shares the one harness.)
mod harness;

use harness::emu::{hip_app, run};

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
