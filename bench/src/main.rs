//! `rprof-bench`: tracing overhead measured side by side, in one run.
//!
//! Owns the benchmark's command line, its runs and its report; it must not
//! link rprof itself (it runs the `rprof` binary, like a user; it reads traces
//! with `rprof-perfetto`'s streaming counter) nor build the workloads
//! (`scripts/bench.sh` does).
//!
//! Every measurement alternates the untraced run (`rprof --device emulated`,
//! same GPU, same runtime, no tool library) and the traced run
//! (`rprof --kernel-trace`) of the same workload, `--reps` times, and prints
//! medians, ranges and ratios. Timed tests would flake on a shared 2-core
//! machine; this prints figures for `docs/performance.md` instead.
//!
//! Workloads (built by `scripts/bench.sh` before this runs):
//! - `dispatch_bench enqueue|roundtrip` (raw HSA): host time per dispatch on
//!   the submitting thread, and enqueue-to-completion latency seen by the app;
//! - `graph_storm K I` (HIP): a graph of K near-zero kernels launched I
//!   times: whole-run wall time, trace size, resident memory; repeated for
//!   several I to plot overhead against dispatch count (SVG);
//! - the same storm with 20 µs kernels (the "realistic mix"), also launched
//!   ten times as often, where the per-process cost is spread thin;
//! - `hip/memcpy_mix ROUNDS` (hip-tests): copies between kernels, for the
//!   cost of `--memory-copy-trace` and `--sys-trace`;
//! - `roctx_storm N` (hip-tests, linked to the runtime's ROCTx library, built
//!   where the root has one: 6.1, 6.4, 7.0) for the cost of `--marker-trace`
//!   per marker ([`markers`]; on 5.2 the storm's preload cost instead);
//! - the storm again for the rocpd writer (`--output-format rocpd`);
//! - section `peer` ([`peer`]): AMD's `rocprofv3 --kernel-trace` beside
//!   `rprof --kernel-trace` on the storm and the mix (and the copy trace on
//!   memcpy_mix), all in the rocprofv3 root `--peer-root` names (ROCr 6.4.3).
//!
//! Modules: [`cli`] (options, clap), [`run`] (one run under rprof, pairs of
//! runs), [`stats`] (medians, ranges, the figures workloads print),
//! [`sections`] (one function per report section), [`scale`] (millions of
//! dispatches, only with `--only scale`), [`peer`] (rocprofv3 beside rprof
//! in the peer root), [`plot`] (the SVG).
//!
//! Usage: `rprof-bench --bin-dir target/release --work-dir target/bench
//! [--reps 5] [--quick] [--svg docs/overhead.svg]`.

mod cli;
mod markers;
mod peer;
mod plot;
mod run;
mod scale;
mod sections;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use cli::{Options, Section};
use sections::Workloads;

/// Why the benchmark stopped.
#[derive(Debug)]
enum Error {
    /// The workloads are not there (exit status 2).
    Setup(String),
    /// A run failed or a figure is missing (exit status 1).
    Failed(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Setup(m) | Error::Failed(m) => f.write_str(m),
        }
    }
}

fn main() -> ExitCode {
    let options = Options::parse();
    match bench(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rprof-bench: {e}");
            ExitCode::from(match e {
                Error::Setup(_) => 2,
                Error::Failed(_) => 1,
            })
        }
    }
}

/// Finds the workloads, runs the chosen sections, prints the report and
/// writes the plot.
fn bench(o: &Options) -> Result<(), Error> {
    let workloads = Workloads::find(o)?;
    let report = measure(o, &workloads)?;
    print!("{}", report.text);
    if let Some(path) = &o.svg {
        let svg = plot::plot(&report.points)?;
        std::fs::write(path, svg)
            .map_err(|e| Error::Failed(format!("cannot write {}: {e}", path.display())))?;
        println!("\nplot written to {}", path.display());
    }
    Ok(())
}

/// What the sections measured.
struct Report {
    text: String,
    points: Vec<sections::Point>,
}

/// Runs the sections `o` asks for, in the report's order.
fn measure(o: &Options, w: &Workloads) -> Result<Report, Error> {
    let mut text = String::new();
    sections::header(o, &mut text);
    if o.want(Section::Host) {
        sections::host_time(o, w, &mut text)?;
    }
    if o.want(Section::Roundtrip) {
        sections::roundtrip(o, w, &mut text)?;
    }
    let points = sections::storm(o, w, &mut text)?;
    if o.want(Section::Mix) {
        sections::mix(o, w, &mut text)?;
    }
    if o.want(Section::Memory) {
        sections::memory(o, w, &mut text)?;
    }
    if o.want(Section::Serialize) {
        sections::serialize(o, w, &mut text)?;
    }
    if o.want(Section::Rpc) {
        sections::rpc(o, w, &mut text)?;
    }
    if o.want(Section::Copies) {
        sections::copies(o, w, &mut text)?;
    }
    if o.want(Section::Markers) {
        markers::markers(o, w, &mut text)?;
    }
    if o.want(Section::Systrace) {
        sections::sys_trace(o, w, &mut text)?;
    }
    if o.want(Section::Rocpd) {
        sections::rocpd(o, w, &mut text)?;
    }
    if o.want(Section::Scale) {
        scale::scale(o, w, &mut text)?;
    }
    if o.want(Section::Peer) {
        peer::peer(o, &mut text)?;
    }
    Ok(Report { text, points })
}
