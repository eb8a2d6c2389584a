//! `rocminfo` of the runtime `RPROF_TEST_ROCM` selects, over the emulated
//! GPU: it must list exactly the emulated agents, the CPU and the configured
//! GPUs (`RPROF_EMU_GPUS`), with their names, marketing names and compute
//! unit counts, and each GPU's ISA.
//!
//! `rocminfo` first checks for the kernel driver: `/sys/module/amdgpu`
//! (its `initstate` on 6.x, `lsmod` on 5.2.3) and a read-write `/dev/kfd`.
//! How the emulator answers that depends on the runtime:
//! * 6.4 (ROCr 6.4.3, `rocminfo` 7.2.4 of Debian sid): `rprof --device
//!   emulated -- rocminfo`. The command picks the kfd front-end
//!   (`librprof_emu_kfd.so` preloaded) for a runtime with the thunk built
//!   in, and that front-end serves the driver's files.
//! * 5.2 and 6.1 (ROCr 5.2.3, 6.1.2): these link a separate
//!   `libhsakmt.so.1`, so `rprof --device emulated` (like the other tests)
//!   puts the emulator's thunk front-end in its place; a replacement library
//!   cannot answer `rocminfo`'s own driver checks. The kfd front-end
//!   preloaded over the runtime's real `libhsakmt.so.1` does: it answers that
//!   library's `/dev/kfd` ioctls and mmaps like ROCr 6.4's, and the driver
//!   files. This test runs `LD_PRELOAD=librprof_emu_kfd.so rocminfo` there.
//!
//! GPUs: `gfx90a,gfx942` on 6.1 and 6.4; `gfx90a,gfx908` on 5.2, whose ROCr
//! predates gfx942 (it skips such a node: "Agent creation failed. The GPU
//! node has an unrecognized id").

mod harness;

use harness::artefacts::{build, rprof};
use harness::run::{clear_rprof_env, run_with, HIP_RUN_TIMEOUT};
use harness::{fresh_dir, FrontEnd, Runtime};

/// One `Agent N` section of `rocminfo`'s output: its own fields (two-space
/// indent) and the names of its ISAs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Agent {
    name: String,
    marketing_name: String,
    device_type: String,
    compute_units: u64,
    isas: Vec<String>,
}

fn parse_agents(out: &str) -> Vec<Agent> {
    let mut agents: Vec<Agent> = Vec::new();
    let mut in_isa = false;
    for line in out.lines() {
        if line.starts_with("Agent ") {
            agents.push(Agent {
                name: String::new(),
                marketing_name: String::new(),
                device_type: String::new(),
                compute_units: 0,
                isas: Vec::new(),
            });
            in_isa = false;
            continue;
        }
        let Some(agent) = agents.last_mut() else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match (indent, key) {
            (2, "ISA Info") => in_isa = true,
            (2, "Name") => agent.name = value,
            (2, "Marketing Name") => agent.marketing_name = value,
            (2, "Device Type") => agent.device_type = value,
            (2, "Compute Unit") => {
                agent.compute_units = value.parse().unwrap_or_else(|_| panic!("{line:?}"))
            }
            (2, _) => in_isa = false,
            (_, "Name") if in_isa => agent.isas.push(value),
            _ => {}
        }
    }
    agents
}

/// The CPU model name the runtime's thunk reads from `/proc/cpuinfo`.
fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .expect("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
        .expect("a model name in /proc/cpuinfo")
}

#[test]
fn rocminfo_lists_exactly_the_emulated_agents() {
    let runtime = Runtime::selected();
    let dir = fresh_dir("rocminfo");
    let mut cmd = match runtime {
        Runtime::Rocm64 | Runtime::Rocm70 => {
            let mut c = runtime.command(rprof(), &[]);
            c.args(["--device", "emulated", "--", "rocminfo"]);
            c
        }
        Runtime::Rocm52 | Runtime::Rocm61 => {
            let emulator = build().emulator_with(FrontEnd::KfdPreload);
            runtime.command("rocminfo", &emulator.loader_env)
        }
    };
    let (gpus, expected_gpus): (&str, Vec<(&str, &str, u64)>) = match runtime {
        Runtime::Rocm52 => (
            "gfx90a,gfx908",
            vec![
                ("gfx90a", "Emulated AMD Instinct MI210", 104),
                ("gfx908", "Emulated AMD Instinct MI100", 120),
            ],
        ),
        Runtime::Rocm61 | Runtime::Rocm64 | Runtime::Rocm70 => (
            "gfx90a,gfx942",
            vec![
                ("gfx90a", "Emulated AMD Instinct MI210", 104),
                ("gfx942", "Emulated AMD Instinct MI300X", 304),
            ],
        ),
    };
    clear_rprof_env(&mut cmd);
    cmd.current_dir(&dir).env("RPROF_EMU_GPUS", gpus);
    let run = run_with(cmd, dir, HIP_RUN_TIMEOUT);
    run.assert_success();
    let cpu = cpu_model_name();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let mut expected = vec![Agent {
        name: cpu.clone(),
        marketing_name: cpu,
        device_type: "CPU".into(),
        compute_units: cores,
        isas: Vec::new(),
    }];
    for (gfx, marketing, cus) in expected_gpus {
        expected.push(Agent {
            name: gfx.into(),
            marketing_name: marketing.into(),
            device_type: "GPU".into(),
            compute_units: cus,
            isas: vec![format!("amdgcn-amd-amdhsa--{gfx}:sramecc-:xnack-")],
        });
    }
    // ROCr 6.4.3 and 7.0 also list gfx942's generic ISA.
    if matches!(runtime, Runtime::Rocm64 | Runtime::Rocm70) {
        expected[2]
            .isas
            .push("amdgcn-amd-amdhsa--gfx9-4-generic:sramecc-:xnack-".into());
    }
    let agents = parse_agents(&run.stdout);
    assert_eq!(
        agents,
        expected,
        "rocminfo's agents on {}\n--- stdout\n{}\n--- stderr\n{}",
        runtime.describe(),
        run.stdout,
        run.stderr
    );
    assert!(
        !run.stdout.contains("Agent creation failed")
            && !run.stderr.contains("Agent creation failed"),
        "{}",
        run.stderr
    );
}
