//! `--pftrace-split-seconds N`: the Perfetto trace as a series of files, a
//! new one every N seconds of trace time, each a whole trace on its own.
//!
//! The first part is `NAME.pftrace`; the next ones are `NAME_part1.pftrace`,
//! `NAME_part2.pftrace`, ... ([`part_path`]). Each part is written by its own
//! [`PerfettoSink`], so it has its own clock snapshot, process and track
//! descriptors, interned names and `rprof run` metadata instant: the
//! Perfetto UI or trace_processor opens any part alone.
//!
//! Which part a record goes to: records arrive in completion order, not in
//! time order, so a part is not cut at an exact timestamp. Each record has a
//! time at which it is complete (a dispatch's or copy's end, an interceptor
//! call's return, an RPC serve's end, a marker's end); the first record
//! complete at or after the current part's window end (run start + k·N)
//! finishes the part and opens the next, whose window is the one holding that
//! record (empty windows make no file). A record that completes later but
//! arrives after the switch goes into the newer part. Every record is thus
//! written exactly once, into the part that was open when it arrived: none
//! is lost or repeated at a boundary, and parts may overlap by the
//! completion delay (milliseconds) at their edges. A flow whose two ends land
//! in different parts shows in neither (each end is still there).
//!
//! `rprof run` instant of a part: `dispatches`, `memory_copies` and
//! `rpc_wakes` count that part's records (so the parts add up to the run);
//! the other counters (filtered out, clamps, records lost) are the run's and
//! are in the last part only (0 in the others).
//!
//! Owns the rotation; must not encode anything itself (the Perfetto sink
//! does) nor decide the file names of other formats.

use std::io;
use std::path::{Path, PathBuf};

use crate::marker::MarkerRecord;
use crate::output::perfetto::{PerfettoOptions, PerfettoSink};
use crate::record::{
    AgentInfo, DispatchRecord, InterceptRecord, MemoryCopyRecord, RunInfo, RunMetadata,
};
use crate::rpc::RpcWakeRecord;
use crate::sink::{KernelInfo, RecordSink};

/// The file of part `part` (0-based) of the trace whose first file is
/// `first` (`DIR/NAME.pftrace`): `first` itself for part 0, else
/// `DIR/NAME_part<part>.pftrace`.
pub fn part_path(first: &Path, part: u32) -> PathBuf {
    if part == 0 {
        return first.to_path_buf();
    }
    let stem = first
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    first.with_file_name(format!("{stem}_part{part}.pftrace"))
}

/// A [`RecordSink`] writing the Perfetto trace in parts of `window_ns` of
/// trace time. See the module docs.
#[derive(Debug)]
pub struct SplitPerfettoSink {
    first: PathBuf,
    options: PerfettoOptions,
    window_ns: u64,
    current: PerfettoSink,
    /// The open part (0-based).
    part: u32,
    /// Records complete at or after this go to a new part.
    window_end: u64,
    run: Option<RunInfo>,
    agents: Vec<AgentInfo>,
    /// Names given with `roctxNameOsThread`, repeated into every part.
    thread_names: Vec<(u32, String)>,
    /// This part's counts, for its metadata instant.
    dispatches: u64,
    memory_copies: u64,
    rpc_wakes: u64,
}

impl SplitPerfettoSink {
    /// Creates the first part, `first` (normally `DIR/NAME.pftrace`), new;
    /// the others are created as the trace reaches them.
    pub fn create(first: &Path, window_ns: u64, options: PerfettoOptions) -> io::Result<Self> {
        if window_ns == 0 {
            return Err(io::Error::other("SplitPerfettoSink: a zero-length window"));
        }
        Ok(SplitPerfettoSink {
            first: first.to_path_buf(),
            options,
            window_ns,
            current: PerfettoSink::with_options(first, options)?,
            part: 0,
            window_end: u64::MAX,
            run: None,
            agents: Vec::new(),
            thread_names: Vec::new(),
            dispatches: 0,
            memory_copies: 0,
            rpc_wakes: 0,
        })
    }

    /// How many parts have been opened so far (the files are
    /// `part_path(first, 0..parts())`).
    pub fn parts(&self) -> u32 {
        self.part + 1
    }

    /// Moves to the part holding time `complete_ns` if it is past the open
    /// part's window: finishes the open part and starts the next file.
    fn rotate_for(&mut self, complete_ns: u64) -> io::Result<()> {
        if complete_ns < self.window_end {
            return Ok(());
        }
        let Some(run) = self.run.clone() else {
            return Err(io::Error::other("SplitPerfettoSink: record before start()"));
        };
        let meta = RunMetadata {
            dispatches: self.dispatches,
            memory_copies: self.memory_copies,
            rpc_wakes: self.rpc_wakes,
            ..RunMetadata::default()
        };
        self.current.finish(&meta)?;
        self.part += 1;
        let next = PerfettoSink::with_options(&part_path(&self.first, self.part), self.options)?;
        self.current = next;
        self.current.start(&run, &self.agents)?;
        for (tid, name) in &self.thread_names {
            self.current.thread_name(*tid, name)?;
        }
        let k = complete_ns.saturating_sub(run.start_ns) / self.window_ns;
        self.window_end = run
            .start_ns
            .saturating_add(k.saturating_add(1).saturating_mul(self.window_ns));
        (self.dispatches, self.memory_copies, self.rpc_wakes) = (0, 0, 0);
        Ok(())
    }
}

impl RecordSink for SplitPerfettoSink {
    fn start(&mut self, run: &RunInfo, agents: &[AgentInfo]) -> io::Result<()> {
        self.run = Some(run.clone());
        self.agents = agents.to_vec();
        self.window_end = run.start_ns.saturating_add(self.window_ns);
        self.current.start(run, agents)
    }

    fn intercept(&mut self, rec: &InterceptRecord) -> io::Result<()> {
        self.rotate_for(rec.end_ns)?;
        self.current.intercept(rec)
    }

    fn dispatch(&mut self, rec: &DispatchRecord, kernel: &KernelInfo<'_>) -> io::Result<()> {
        self.rotate_for(rec.end_ns)?;
        self.dispatches += 1;
        self.current.dispatch(rec, kernel)
    }

    fn dispatch_renamed(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: &str,
    ) -> io::Result<()> {
        self.rotate_for(rec.end_ns)?;
        self.dispatches += 1;
        self.current.dispatch_renamed(rec, kernel, region)
    }

    fn rpc_wake(&mut self, rec: &RpcWakeRecord) -> io::Result<()> {
        self.rotate_for(rec.serve_end_ns)?;
        self.rpc_wakes += 1;
        self.current.rpc_wake(rec)
    }

    fn marker(&mut self, rec: &MarkerRecord) -> io::Result<()> {
        self.rotate_for(rec.end_ns)?;
        self.current.marker(rec)
    }

    fn thread_name(&mut self, thread_id: u32, name: &str) -> io::Result<()> {
        match self.thread_names.iter_mut().find(|(t, _)| *t == thread_id) {
            Some(entry) => entry.1 = name.to_string(),
            None => self.thread_names.push((thread_id, name.to_string())),
        }
        self.current.thread_name(thread_id, name)
    }

    fn memory_copy(&mut self, rec: &MemoryCopyRecord) -> io::Result<()> {
        self.rotate_for(rec.end_ns)?;
        self.memory_copies += 1;
        self.current.memory_copy(rec)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.current.flush()
    }

    fn finish(&mut self, meta: &RunMetadata) -> io::Result<()> {
        let last = RunMetadata {
            dispatches: self.dispatches,
            memory_copies: self.memory_copies,
            rpc_wakes: self.rpc_wakes,
            ..*meta
        };
        self.current.finish(&last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names() {
        let first = Path::new("/o/host/42.pftrace");
        assert_eq!(part_path(first, 0), first);
        assert_eq!(part_path(first, 1), Path::new("/o/host/42_part1.pftrace"));
        assert_eq!(
            part_path(Path::new("run.pftrace"), 12),
            Path::new("run_part12.pftrace")
        );
    }
}
