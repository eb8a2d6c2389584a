//! The configurations a scenario runs across where that adds coverage, as
//! tables: a test loops over them instead of copying itself per setting.
//!
//! * [`TRACE_CONFIGS`]: how the tool handles dispatches (serialization on
//!   and off, app completion signals forwarded by the device's barrier
//!   packet or by the host), each as the environment of a tool run.
//! * [`FORMATS`]: each output format alone, with the one file it must write.
//!
//! The runtime is the other axis: `RPROF_TEST_ROCM` picks it for the whole
//! test binary ([`super::runtime`]), and `scripts/test.sh` runs the
//! end-to-end binaries on 5.2, 6.1 and 6.4.

/// One way of running the tool.
#[derive(Debug, Clone, Copy)]
pub struct TraceConfig {
    /// Short name, for run labels and messages.
    pub name: &'static str,
    /// The tool's environment for it.
    pub env: &'static [(&'static str, &'static str)],
    /// Whether kernels are serialized (then no two may overlap).
    pub serialized: bool,
}

/// Serialization off and on, times app-signal forwarding by barrier packet
/// (the default) and by the host.
pub const TRACE_CONFIGS: [TraceConfig; 4] = [
    TraceConfig {
        name: "default",
        env: &[],
        serialized: false,
    },
    TraceConfig {
        name: "serialized",
        env: &[("RPROF_SERIALIZE_KERNELS", "1")],
        serialized: true,
    },
    TraceConfig {
        name: "host-forwarding",
        env: &[("RPROF_FORWARD_APP_SIGNAL", "host")],
        serialized: false,
    },
    TraceConfig {
        name: "serialized-host-forwarding",
        env: &[
            ("RPROF_SERIALIZE_KERNELS", "1"),
            ("RPROF_FORWARD_APP_SIGNAL", "host"),
        ],
        serialized: true,
    },
];

/// One output format alone (`--output-format` value) and the suffix of the
/// one file it writes after the output name.
pub const FORMATS: [(&str, &str); 4] = [
    ("csv", "_kernel_trace.csv"),
    ("json", "_results.json"),
    ("pftrace", ".pftrace"),
    ("rocpd", "_results.db"),
];
