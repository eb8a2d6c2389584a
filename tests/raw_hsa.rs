//! The emulator under the raw-HSA program `tests/programs/emu/hsa_raw.cpp` on the real ROCr that `RPROF_TEST_ROCM`
//! selects (5.2.3 by default; see `harness::runtime`), untraced: dispatch, barriers, signal waits, profiling
//! timestamps, copies (blit kernels and the SDMA engine), topologies (APU, several GPUs and ISAs), queue errors on
//! invalid packets, leaks over a long run, the signal-event limit, configuration by environment and file, and
//! compute-unit sharing. (Moved here from `emu/tests/` so that it shares the one harness.)
mod harness;

use harness::emu::{code_object, hsa_raw, run, run_command};
use harness::{run_with_timeout, Runtime};

/// Live events once 5000 signals exist (docs/emulated-gpu.md): on ROCr 5.2.3 all 4096 signal events plus the
/// runtime's VM-fault memory event; on 6.1.2 also its HW_EXCEPTION event; on 6.4.3 and 7.0 (KFD front-end) as well
/// (all 4096 signal events, as KFD allows, plus the memory and HW_EXCEPTION events).
fn live_events_with_5000_signals() -> i64 {
    match Runtime::selected() {
        Runtime::Rocm52 => 4097,
        Runtime::Rocm61 | Runtime::Rocm64 | Runtime::Rocm70 => 4098,
    }
}

/// The GPU agent's profile on the APU layout: FULL where the GPU shares the CPU's node (the thunk front-end); ROCr
/// 6.4.3 and 7.0 see the KFD front-end's modern APU (a separate GPU node) as BASE (docs/emulated-gpu.md).
fn apu_profile() -> &'static str {
    match Runtime::selected() {
        Runtime::Rocm52 | Runtime::Rocm61 => "full",
        Runtime::Rocm64 | Runtime::Rocm70 => "base",
    }
}

#[test]
fn dispatch_barriers_waits_profiling_copies() {
    main_program(false);
}

#[test]
fn same_with_the_sdma_engine() {
    main_program(true);
}

fn main_program(sdma: bool) {
    let co = code_object("gfx90a");
    let r = run(
        &hsa_raw(),
        &["main", co.to_str().unwrap()],
        &[
            ("RPROF_EMU_KERNEL_NS", "slow=500000"),
            ("RPROF_EMU_SDMA", if sdma { "1" } else { "0" }),
        ],
    );
    // Host<->device async copies go through the SDMA engine only when it is enabled (blit kernels otherwise).
    assert_eq!(r.int("stats_sdma_copies_nonzero"), i64::from(sdma));
    assert_eq!(r.int("copy_time_order_ok"), 1);
    assert_eq!(r.int("gpu_count"), 1);
    assert_eq!(r.get("gpu0_name"), "gfx90a");
    assert_eq!(r.get("gpu0_product"), "Emulated AMD Instinct MI210");
    assert_eq!(r.int("gpu0_cus"), 104);
    assert_eq!(r.get("gpu0_profile"), "base");
    // Kernel-name resolution from the loaded code object.
    assert_eq!(r.get("kname_vadd"), "vadd");
    assert_eq!(r.int("kernarg_size_vadd"), 28);
    // Host kernel computed the result.
    assert_eq!(r.int("vadd_wrong"), 0);
    assert_eq!(r.int("vadd_calls"), 1);
    assert_eq!(r.int("by_object_calls"), 5);
    // 4 threads x (100 serial + 50 in flight).
    assert_eq!(r.int("mt_completed"), 600);
    assert_eq!(r.int("barrier_and_held"), 1);
    assert_eq!(r.int("barrier_and_released"), 1);
    assert_eq!(r.int("barrier_or_held"), 1);
    assert_eq!(r.int("barrier_or_released"), 1);
    assert_eq!(r.int("device_woken_value"), 3);
    assert_eq!(r.int("host_woken_value"), 0);
    assert_eq!(r.int("wait_any_index"), 1);
    assert_eq!(r.int("wait_any_value"), 0);
    assert_eq!(r.int("async_calls"), 1);
    assert_eq!(r.int("async_value"), 0);
    // Time model: `slow` is overridden to 500 µs; vadd (2048 items / 64 = 32 workgroups on 104 CUs) takes
    // 2 µs + ceil(32/104) x 1 µs. Ticks are 10 ns, so the translated durations are exact.
    assert_eq!(r.int("prof_slow_ns"), 500_000);
    assert_eq!(r.int("prof_vadd_ns"), 3_000);
    assert_eq!(r.int("prof_order_ok"), 1);
    assert_eq!(r.int("memory_copy_ok"), 1);
    assert_eq!(r.int("async_copy_ok"), 1);
    assert_eq!(r.int("fill_ok"), 1);
    assert_eq!(r.int("dev_pointer_type"), 1, "HSA_EXT_POINTER_TYPE_HSA");
    assert_eq!(r.int("dev_pointer_owner_is_gpu"), 1);
    assert_eq!(r.int("stats_faults"), 0);
    assert_eq!(r.int("stats_blits_skipped"), 0);
    assert_eq!(r.int("stats_blits_nonzero"), 1);
    // The dGPU code-object load ends with ROCr's PM4 icache-invalidate packet.
    assert_eq!(r.int("stats_vendor_packets_nonzero"), 1);
    // vadd twice + slow by object 5 times (+ once more in the profiling section) + rpc once.
    assert_eq!(r.int("stats_host_kernels"), 9);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn apu_layout_runs_the_same_program() {
    let co = code_object("gfx90a");
    let mut env = vec![
        ("RPROF_EMU_APU", "1"),
        ("RPROF_EMU_KERNEL_NS", "slow=500000"),
    ];
    if Runtime::selected() == Runtime::Rocm61 {
        // ROCr 6.1.2 cannot create a queue on a FULL-profile agent with scratch reclaim on (a ROCr limit, see
        // docs/emulated-gpu.md); the program runs the same with it off.
        env.push(("HSA_NO_SCRATCH_RECLAIM", "1"));
    }
    let r = run(&hsa_raw(), &["main", co.to_str().unwrap()], &env);
    assert_eq!(r.get("gpu0_profile"), apu_profile());
    assert_eq!(r.int("vadd_wrong"), 0);
    assert_eq!(r.int("mt_completed"), 600);
    assert_eq!(r.int("prof_slow_ns"), 500_000);
    assert_eq!(r.int("memory_copy_ok"), 1);
    assert_eq!(r.int("async_copy_ok"), 1);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn several_gpus_and_isas() {
    let r = run(
        &hsa_raw(),
        &["topology"],
        &[
            ("RPROF_EMU_GPUS", "gfx90a,gfx908,gfx906,gfx900,gfx1030"),
            ("RPROF_EMU_CUS", "8"),
        ],
    );
    assert_eq!(r.int("gpu_count"), 5);
    for (i, name) in ["gfx90a", "gfx908", "gfx906", "gfx900", "gfx1030"]
        .iter()
        .enumerate()
    {
        assert_eq!(r.get(&format!("gpu{i}_name")), *name);
        assert_eq!(r.int(&format!("gpu{i}_cus")), 8);
    }
    assert_eq!(r.get("gpu4_product"), "Emulated AMD Radeon RX 6800 XT");
    assert_eq!(r.int("gpus_completed"), 5);
}

#[test]
fn other_isa_runs_its_code_object() {
    let co = code_object("gfx908");
    let r = run(
        &hsa_raw(),
        &["main", co.to_str().unwrap()],
        &[
            ("RPROF_EMU_GPUS", "gfx908"),
            ("RPROF_EMU_KERNEL_NS", "slow=500000"),
        ],
    );
    assert_eq!(r.get("gpu0_name"), "gfx908");
    assert_eq!(r.get("kname_vadd"), "vadd");
    assert_eq!(r.int("vadd_wrong"), 0);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn a_doorbell_rung_out_of_order_loses_no_packet() {
    // Two producers of one queue: packet i+1 is published and rung first, packet i last, so the doorbell ends
    // at i. The emulated CP used to stop at the doorbell's value and never ran packet i+1 (8 HIP threads sharing
    // 4 hardware queues hung 1 run in 10 on ROCr 5.2.3 and 1 in 8 on 6.1.2). 20 rounds, 40 packets.
    let r = run(&hsa_raw(), &["doorbell_order"], &[]);
    assert_eq!(r.int("doorbell_order_completed"), 40);
}

#[test]
fn invalid_packets_raise_queue_errors() {
    let r = run(&hsa_raw(), &["fault"], &[]);
    assert_eq!(r.int("bad_type_errors"), 1);
    assert_eq!(
        r.int("bad_type_status") as u32,
        hsa_sys::HSA_STATUS_ERROR_INVALID_PACKET_FORMAT
    );
    assert_eq!(
        r.int("bad_type_signal"),
        1,
        "a faulted packet never completes"
    );
    assert_eq!(r.int("null_kernel_errors"), 1);
    assert_eq!(
        r.int("null_kernel_status") as u32,
        hsa_sys::HSA_STATUS_ERROR_INVALID_CODE_OBJECT
    );
    assert_eq!(r.int("null_kernel_signal"), 1);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn no_leaks_over_a_long_run() {
    let r = run(&hsa_raw(), &["leak"], &[]);
    for key in [
        "leak_allocations",
        "leak_bytes",
        "leak_registrations",
        "leak_events",
        "leak_queues",
    ] {
        assert_eq!(r.int(key), 0, "{key}");
    }
    assert_eq!(r.int("done"), 1);
}

#[test]
fn signal_event_limit_falls_back() {
    let r = run(&hsa_raw(), &["events"], &[]);
    assert_eq!(r.int("signals"), 5000);
    // Every signal event the device allows is in use (the rest of the signals fell back to polling), plus the
    // runtime's own.
    assert_eq!(r.int("live_events"), live_events_with_5000_signals());
    assert_eq!(r.int("waits_ok"), 2);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn bad_configuration_is_refused() {
    let program = hsa_raw();
    let mut cmd = run_command(&program);
    cmd.arg("topology").env("RPROF_EMU_GPUS", "gfx4242");
    let out = run_with_timeout(cmd, harness::fresh_dir("bad-configuration"));
    assert_eq!(out.code, Some(2), "hsa_init must fail");
    assert!(out
        .stderr
        .contains("rprof-emu: bad configuration: GPUS: unknown ISA 'gfx4242'"));
}

#[test]
fn kernels_share_compute_units_and_respect_the_barrier_bit() {
    let co = code_object("gfx90a");
    let r = run(
        &hsa_raw(),
        &["concurrency", co.to_str().unwrap()],
        &[("RPROF_EMU_KERNEL_NS", "empty=20000000")],
    );
    assert_eq!(r.int("small_two_queues_overlap"), 1);
    assert_eq!(r.int("full_two_queues_overlap"), 0);
    assert_eq!(r.int("small_one_queue_overlap"), 1);
    assert_eq!(r.int("small_one_queue_barrier_overlap"), 0);
    assert_eq!(r.int("done"), 1);
}

#[test]
fn config_file_selects_the_machine() {
    let dir = harness::fresh_dir("emu-config-test");
    let file = dir.join("emu.conf");
    std::fs::write(
        &file,
        "# two GPUs\nGPUS = gfx906, gfx1030\nCUS=12 # small\n",
    )
    .unwrap();
    let r = run(
        &hsa_raw(),
        &["topology"],
        &[("RPROF_EMU_CONFIG", file.to_str().unwrap())],
    );
    assert_eq!(r.int("gpu_count"), 2);
    assert_eq!(r.get("gpu0_name"), "gfx906");
    assert_eq!(r.get("gpu1_name"), "gfx1030");
    assert_eq!(r.int("gpu1_cus"), 12);
    // The environment wins over the file.
    let r = run(
        &hsa_raw(),
        &["topology"],
        &[
            ("RPROF_EMU_CONFIG", file.to_str().unwrap()),
            ("RPROF_EMU_GPUS", "gfx900"),
        ],
    );
    assert_eq!(r.int("gpu_count"), 1);
    assert_eq!(r.get("gpu0_name"), "gfx900");
    assert_eq!(r.int("gpu0_cus"), 12);
}
