//! rprof-emu: the device core of rprof's emulated AMD GPU, shared by its front-ends: `libhsakmt.so.1`
//! (crate `rprof-emu-thunk`, for runtimes that load the thunk as a library) and the KFD preload library
//! (crate `rprof-emu-kfd`, for runtimes with the thunk built in).
//!
//! The real ROCr 5.2.3 and 6.1.2 (and HIP 5.2.3 / 5.7.1 on top of them) run unmodified over the thunk front-end
//! when it comes first on `LD_LIBRARY_PATH`; ROCr 6.4.3 (HIP 6.4.3), whose thunk is built in, runs over the KFD
//! front-end preloaded with `LD_PRELOAD`. The core owns everything below ROCr (topology, memory, events, queues, the command processor)
//! and must not touch ROCr itself or the tracer: it is only the test device, loaded by the runtime like a driver.
//! How the pieces fit:
//!
//! * `rprof-emu-thunk` (a separate crate) exports the 58 `hsaKmt*` functions ROCr 5.2.3 and 6.1.2 import, with the
//!   C signatures of `hsakmt.h`, all versioned `HSAKMT_1`, plus the libdrm_amdgpu calls ROCr 6.1.2 makes on its
//!   device handles. Each wraps its body in `catch_unwind` and translates to and from the KFD structs of
//!   [`hsa_sys::hsakmt`] (and [`hsa_sys::hsakmt_v6`] where 6.x grew them).
//! * [`Emulator`] is the process-wide machine, created on first use from the [`config::Config`] read from the
//!   environment: its [`topology::Topology`] (nodes, banks, caches, links), [`memory::MemoryTable`] (host-backed
//!   allocations and registered user memory), [`events::EventTable`] (KFD events with their mailbox page and ages),
//!   [`cp::CommandProcessor`] (the AQL queues and the single command-processor thread with its deadline heap) and
//!   [`kernels::HostKernelRegistry`] (host implementations of kernels).
//! * [`kernels`] says what a kernel object is: its symbol (parsed from the loaded code object), a registered host
//!   function, or one of ROCr's blit kernels, which the CP executes on the host.
//! * [`capi`] is the documented C API (`include/rprof_emu.h`) for tests: host kernels, device-side signal
//!   operations, statistics.
//! * [`sdma`] is the optional SDMA engine (`RPROF_EMU_SDMA=1`), served by the same CP thread.
//! * [`drm`] holds the libdrm_amdgpu answers (device handles, `amdgpu_gpu_info`, marketing names, forwarding of
//!   foreign handles) that both front-ends export thin wrappers for.
//! * [`clock`] defines the system and GPU clocks; [`test_support`] builds the `LD_LIBRARY_PATH` directory for tests.
//!
//! # Safety
//! Unsafe code lives at the FFI edge (the front-end crates, [`capi`]) and where the emulator plays hardware on memory shared
//! with ROCr ([`cp`], [`memory`]); each block states its reasoning.
#![deny(missing_docs)]

pub mod capi;
pub mod clock;
pub mod config;
pub mod cp;
pub mod drm;
pub mod events;
pub mod kernels;
pub mod memory;
pub mod sdma;
pub mod test_support;
pub mod topology;

use std::sync::OnceLock;

/// The emulated machine.
#[derive(Debug)]
pub struct Emulator {
    /// Configuration it was built from.
    pub config: config::Config,
    /// Nodes.
    pub topology: topology::Topology,
    /// Memory.
    pub memory: memory::MemoryTable,
    /// Events.
    pub events: events::EventTable,
    /// Queues and the CP thread.
    pub cp: cp::CommandProcessor,
    /// Host kernels.
    pub host_kernels: kernels::HostKernelRegistry,
    /// When the emulator was set up (`CLOCK_BOOTTIME` ns), for the exit report.
    pub loaded_ns: u64,
}

static EMULATOR: OnceLock<Result<Emulator, String>> = OnceLock::new();

/// At exit, with `EVENT_REPORT` set: writes the driver-event wait counts there (see
/// [`config::Config::event_report`]); a failure is said on stderr.
extern "C" fn write_event_report() {
    let _ = std::panic::catch_unwind(|| {
        let Some(Ok(e)) = EMULATOR.get() else { return };
        let Some(path) = &e.config.event_report else {
            return;
        };
        let (waits, at_once) = e.events.wait_stats();
        let t = &e.cp.stats.timeline;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let first = get(&t.first_start_ns);
        let until = get(&t.busy_until_ns);
        let now = clock::now_ns();
        let text = format!(
            "event_waits={waits}\nevent_waits_at_once={at_once}\n\
             kernels={}\n\
             loaded_to_first_kernel_ns={}\n\
             first_to_last_kernel_ns={}\n\
             busy_ns={}\nidle_ns={}\nidle_gaps_over_5us={}\n\
             late_retire_ns={}\nlate_retire_max_ns={}\n\
             last_kernel_to_exit_ns={}\n\
             loaded_at_ns={}\nreport_at_ns={}\n",
            get(&e.cp.stats.dispatches),
            if first == 0 {
                0
            } else {
                first.saturating_sub(e.loaded_ns)
            },
            until.saturating_sub(first),
            get(&t.busy_ns),
            get(&t.idle_ns),
            get(&t.idle_gaps),
            get(&t.late_retire_ns),
            get(&t.late_retire_max_ns),
            if first == 0 {
                0
            } else {
                now.saturating_sub(until)
            },
            e.loaded_ns,
            now,
        );
        // The longest idle gaps: length, when after the first kernel, before which kernel.
        let gaps = t.largest_gaps.lock().map(|g| g.clone()).unwrap_or_default();
        let text = text
            + &gaps
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let n = i + 1;
                    format!(
                    "idle_gap_{n}_ns={}\nidle_gap_{n}_at_ns={}\nidle_gap_{n}_before_kernel={}\n",
                    g.ns, g.at_ns, g.before_kernel
                )
                })
                .collect::<String>();
        // What the device ran, per kernel object: `kernel_object=0x... launches=N symbol=NAME` (`-` when no
        // code object in tracked memory names it).
        let text = text
            + &e.cp
                .stats
                .kernel_launches()
                .into_iter()
                .map(|(object, symbol, n)| {
                    format!(
                        "kernel_object={object:#x} launches={n} symbol={}\n",
                        symbol.as_deref().unwrap_or("-")
                    )
                })
                .collect::<String>();
        if let Err(err) = std::fs::write(path, text) {
            eprintln!(
                "rprof-emu: cannot write EVENT_REPORT {}: {err}",
                path.display()
            );
        }
    });
}

/// The process-wide emulator, or the configuration error that prevents it.
pub fn emulator() -> Result<&'static Emulator, &'static str> {
    let e = EMULATOR.get_or_init(|| {
        let config = config::Config::from_env().map_err(|e| {
            eprintln!("rprof-emu: bad configuration: {e}");
            e
        })?;
        if config.event_report.is_some() {
            // SAFETY: registering a plain extern "C" fn with atexit.
            unsafe { libc::atexit(write_event_report) };
        }
        Ok(Emulator {
            topology: topology::Topology::new(&config),
            config,
            memory: memory::MemoryTable::default(),
            events: events::EventTable::new(),
            cp: cp::CommandProcessor::new(),
            host_kernels: kernels::HostKernelRegistry::default(),
            loaded_ns: clock::now_ns(),
        })
    });
    e.as_ref().map_err(String::as_str)
}
