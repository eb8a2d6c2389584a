//! `--stats`: per-kernel calls, total, average, min, max and share of GPU
//! time, printed on stderr at exit and written to `NAME_kernel_stats.csv`
//! with rocprofv3's column names; with `--memory-copy-trace`, the same per
//! copy direction in `NAME_memory_copy_stats.csv` (plus the bytes copied).
//!
//! Memory is one small entry per distinct kernel, not per dispatch.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::config::ensure_parent;
use crate::record::{AgentInfo, DispatchRecord, InterceptRecord, RunInfo, RunMetadata};
use crate::sink::{KernelInfo, RecordSink};

/// Accumulated figures of one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelStats {
    /// Display name.
    pub name: String,
    /// Number of dispatches.
    pub calls: u64,
    /// Sum of durations, ns.
    pub total_ns: u64,
    /// Shortest, ns.
    pub min_ns: u64,
    /// Longest, ns.
    pub max_ns: u64,
}

/// Collects per-kernel statistics and reports them at `finish`.
#[derive(Debug)]
pub struct StatsSink {
    path: Option<PathBuf>,
    /// `path`, created at the start of the run (see [`StatsSink::create`]).
    file: Option<std::fs::File>,
    print: bool,
    by_kernel: HashMap<u64, KernelStats>,
    rpc: Option<crate::rpc::RpcStats>,
    /// `--kernel-rename`d dispatches, by the range they are named after.
    by_region: HashMap<String, KernelStats>,
    /// ROCTx markers by message (`NAME_marker_api_stats.csv`).
    markers: HashMap<&'static str, KernelStats>,
    /// Per copy direction: the figures and the bytes copied.
    copies: std::collections::BTreeMap<crate::record::CopyDirection, (KernelStats, u64)>,
    /// The run is on rprof's emulated GPU: the printed table says so.
    emulated: bool,
}

/// The line the printed table ends with on the emulated GPU.
pub const EMULATED_NOTE: &str =
    "device: EMULATED GPU (rprof's emulator, no /dev/kfd): kernel times are modelled, not measured\n";

impl StatsSink {
    /// Writes the CSV to `path` (if any) and prints the table on stderr if
    /// `print`.
    pub fn new(path: Option<PathBuf>, print: bool) -> Self {
        StatsSink {
            path,
            file: None,
            print,
            by_kernel: HashMap::new(),
            rpc: None,
            by_region: HashMap::new(),
            markers: HashMap::new(),
            copies: Default::default(),
            emulated: false,
        }
    }

    /// Like [`StatsSink::new`] with a path, but the file is created now
    /// ([`super::files::create_new`]), so a taken name is refused at the
    /// start of the run, like the other outputs, not after it.
    pub fn create(path: PathBuf, print: bool) -> io::Result<Self> {
        ensure_parent(&path)?;
        let file = super::files::create_new(&path)?;
        let mut s = StatsSink::new(Some(path), print);
        s.file = Some(file);
        Ok(s)
    }

    /// The figures, sorted by total time, longest first (ties by name).
    pub fn sorted(&self) -> Vec<KernelStats> {
        let mut v: Vec<KernelStats> = self
            .by_kernel
            .values()
            .chain(self.by_region.values())
            .cloned()
            .collect();
        sort_by_total(&mut v);
        v
    }

    /// Marker statistics by message, sorted like the kernels'.
    pub fn marker_rows(&self) -> Vec<KernelStats> {
        let mut v: Vec<KernelStats> = self.markers.values().cloned().collect();
        sort_by_total(&mut v);
        v
    }

    /// Renders the CSV text.
    pub fn to_csv(&self) -> String {
        rows_csv(&self.sorted())
    }

    /// Per copy direction (rocprofv3's operation name as `name`), sorted by
    /// total time, longest first, with the bytes copied.
    pub fn copies_sorted(&self) -> Vec<(KernelStats, u64)> {
        let mut v: Vec<(KernelStats, u64)> = self.copies.values().cloned().collect();
        v.sort_by(|a, b| {
            b.0.total_ns
                .cmp(&a.0.total_ns)
                .then_with(|| a.0.name.cmp(&b.0.name))
        });
        v
    }

    /// `NAME_memory_copy_stats.csv`'s text: the kernel statistics' columns,
    /// then `Bytes`.
    pub fn copies_csv(&self) -> String {
        let rows = self.copies_sorted();
        let grand: u64 = rows.iter().map(|r| r.0.total_ns).sum();
        let mut s = String::from("\"Name\",\"Calls\",\"TotalDurationNs\",\"AverageNs\",\"Percentage\",\"MinNs\",\"MaxNs\",\"Bytes\"\n");
        for (r, bytes) in &rows {
            s.push_str(&format!(
                "\"{}\",{},{},{},{:.4},{},{},{}\n",
                r.name,
                r.calls,
                r.total_ns,
                r.total_ns / r.calls.max(1),
                share(r.total_ns, grand),
                r.min_ns,
                r.max_ns,
                bytes
            ));
        }
        s
    }

    /// The RPC doorbell summary, if any wake was seen.
    pub fn rpc_summary(&self) -> Option<crate::rpc::RpcSummary> {
        self.rpc.as_ref().map(crate::rpc::RpcStats::summary)
    }

    /// The RPC summary as printed on stderr.
    pub fn rpc_text(&self) -> Option<String> {
        let m = self.rpc_summary()?;
        let latency = m.wake_latency_p50_ns.map_or_else(
            || "unknown".to_string(),
            |l| format!("{:.1} us", l as f64 / 1e3),
        );
        Some(format!(
            "rprof RPC doorbell: {} wakes, serve p50 {:.1} us, p99 {:.1} us, server busy {:.1}%, ring-to-wake p50 {}\n",
            m.wakes,
            m.serve_p50_ns as f64 / 1e3,
            m.serve_p99_ns as f64 / 1e3,
            m.busy_share * 100.0,
            latency
        ))
    }

    /// Renders the human table printed on stderr.
    pub fn to_table(&self) -> String {
        let rows = self.sorted();
        let grand: u64 = rows.iter().map(|r| r.total_ns).sum();
        let width = rows
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(6)
            .clamp(6, 60);
        let mut s = format!(
            "rprof kernel statistics\n{:<width$} {:>9} {:>14} {:>12} {:>12} {:>12} {:>7}\n",
            "Kernel", "Calls", "Total (ns)", "Avg (ns)", "Min (ns)", "Max (ns)", "GPU %"
        );
        for r in &rows {
            let mut name = r.name.clone();
            if name.len() > width {
                let mut cut = width - 3;
                while !name.is_char_boundary(cut) {
                    cut -= 1;
                }
                name.truncate(cut);
                name.push_str("...");
            }
            s.push_str(&format!(
                "{:<width$} {:>9} {:>14} {:>12} {:>12} {:>12} {:>6.2}%\n",
                name,
                r.calls,
                r.total_ns,
                r.total_ns / r.calls.max(1),
                r.min_ns,
                r.max_ns,
                share(r.total_ns, grand)
            ));
        }
        s
    }
}

/// Longest total first (ties by name).
fn sort_by_total(v: &mut [KernelStats]) {
    v.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// rocprofv3's statistics columns, one row per entry.
fn rows_csv(rows: &[KernelStats]) -> String {
    let grand: u64 = rows.iter().map(|r| r.total_ns).sum();
    let mut s = String::from(
        "\"Name\",\"Calls\",\"TotalDurationNs\",\"AverageNs\",\"Percentage\",\"MinNs\",\"MaxNs\"\n",
    );
    for r in rows {
        s.push_str(&format!(
            "\"{}\",{},{},{},{:.4},{},{}\n",
            r.name.replace('"', "\"\""),
            r.calls,
            r.total_ns,
            r.total_ns / r.calls.max(1),
            share(r.total_ns, grand),
            r.min_ns,
            r.max_ns
        ));
    }
    s
}

/// Adds one duration to the entry of `name`.
impl KernelStats {
    /// No calls yet under `name`.
    fn named(name: &str) -> Self {
        KernelStats {
            name: name.to_string(),
            calls: 0,
            total_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// One more call that took `d` ns.
    fn record(&mut self, d: u64) {
        self.calls += 1;
        self.total_ns += d;
        self.min_ns = self.min_ns.min(d);
        self.max_ns = self.max_ns.max(d);
    }
}

fn add(map: &mut HashMap<&'static str, KernelStats>, name: &'static str, d: u64) {
    map.entry(name)
        .or_insert_with(|| KernelStats::named(name))
        .record(d);
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl RecordSink for StatsSink {
    /// Counts in memory; writes only at `finish`.
    fn spare_room(&self) -> usize {
        usize::MAX
    }

    fn start(&mut self, run: &RunInfo, _agents: &[AgentInfo]) -> io::Result<()> {
        self.emulated = run.emulated_device;
        Ok(())
    }

    fn intercept(&mut self, _rec: &InterceptRecord) -> io::Result<()> {
        Ok(())
    }

    fn dispatch(&mut self, r: &DispatchRecord, k: &KernelInfo<'_>) -> io::Result<()> {
        self.by_kernel
            .entry(k.kernel_id)
            .or_insert_with(|| KernelStats::named(k.display_name))
            .record(r.end_ns.saturating_sub(r.start_ns));
        Ok(())
    }

    fn dispatch_renamed(
        &mut self,
        r: &DispatchRecord,
        _k: &KernelInfo<'_>,
        region: &str,
    ) -> io::Result<()> {
        let d = r.end_ns.saturating_sub(r.start_ns);
        // Looked up before inserting: a region seen before costs no allocation.
        match self.by_region.get_mut(region) {
            Some(e) => e.record(d),
            None => {
                let mut e = KernelStats::named(region);
                e.record(d);
                self.by_region.insert(region.to_owned(), e);
            }
        }
        Ok(())
    }

    fn marker(&mut self, r: &crate::marker::MarkerRecord) -> io::Result<()> {
        add(
            &mut self.markers,
            r.message,
            r.end_ns.saturating_sub(r.start_ns),
        );
        Ok(())
    }

    fn rpc_wake(&mut self, r: &crate::rpc::RpcWakeRecord) -> io::Result<()> {
        self.rpc.get_or_insert_with(Default::default).add(r);
        Ok(())
    }

    fn memory_copy(&mut self, r: &crate::record::MemoryCopyRecord) -> io::Result<()> {
        let (e, bytes) = self
            .copies
            .entry(r.direction)
            .or_insert_with(|| (KernelStats::named(r.direction.name()), 0));
        e.record(r.end_ns.saturating_sub(r.start_ns));
        *bytes += r.bytes;
        Ok(())
    }

    fn finish(&mut self, _meta: &RunMetadata) -> io::Result<()> {
        if self.print {
            let _ = io::stderr().write_all(self.to_table().as_bytes());
            if self.emulated {
                let _ = io::stderr().write_all(EMULATED_NOTE.as_bytes());
            }
            if let Some(t) = self.rpc_text() {
                let _ = io::stderr().write_all(t.as_bytes());
            }
            for (r, bytes) in self.copies_sorted() {
                let _ = writeln!(
                    io::stderr(),
                    "rprof memory copies: {} x {}, {} bytes, {} ns in total",
                    r.calls,
                    r.name,
                    bytes,
                    r.total_ns
                );
            }
        }
        if let Some(p) = &self.path {
            let mut file = match self.file.take() {
                Some(f) => f,
                None => {
                    ensure_parent(p)?;
                    super::files::create_new(p)?
                }
            };
            file.write_all(self.to_csv().as_bytes())?;
            if !self.markers.is_empty() {
                let s = p.to_string_lossy();
                let marker_path = match s.strip_suffix("_kernel_stats.csv") {
                    Some(stem) => format!("{stem}_marker_api_stats.csv"),
                    None => format!("{s}.marker.csv"),
                };
                super::files::create_new(Path::new(&marker_path))?
                    .write_all(rows_csv(&self.marker_rows()).as_bytes())?;
            }
            if !self.copies.is_empty() {
                let s = p.to_string_lossy();
                let copies_path = match s.strip_suffix("_kernel_stats.csv") {
                    Some(stem) => format!("{stem}_memory_copy_stats.csv"),
                    None => format!("{s}.memory_copy.csv"),
                };
                super::files::create_new(Path::new(&copies_path))?
                    .write_all(self.copies_csv().as_bytes())?;
            }
            if let Some(m) = self.rpc_summary() {
                let s = p.to_string_lossy();
                let rpc_path = match s.strip_suffix("_kernel_stats.csv") {
                    Some(stem) => format!("{stem}_rpc_stats.csv"),
                    None => format!("{s}.rpc.csv"),
                };
                super::files::create_new(Path::new(&rpc_path))?.write_all(
                    format!(
                        "\"Wakes\",\"ServeP50Ns\",\"ServeP99Ns\",\"BusyShare\",\"WakeLatencyP50Ns\"\n{},{},{},{:.6},{}\n",
                        m.wakes,
                        m.serve_p50_ns,
                        m.serve_p99_ns,
                        m.busy_share,
                        m.wake_latency_p50_ns.map(|l| l.to_string()).unwrap_or_default()
                    )
                    .as_bytes(),
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(start: u64, end: u64) -> DispatchRecord {
        DispatchRecord {
            start_ns: start,
            end_ns: end,
            ..Default::default()
        }
    }

    #[test]
    fn accumulates_exactly() {
        let mut s = StatsSink::new(None, false);
        let a = KernelInfo {
            kernel_id: 1,
            display_name: "a",
            symbol_name: "a",
            resources: None,
        };
        let b = KernelInfo {
            kernel_id: 2,
            display_name: "b",
            symbol_name: "b",
            resources: None,
        };
        s.dispatch(&rec(0, 10), &a).unwrap();
        s.dispatch(&rec(100, 130), &a).unwrap();
        s.dispatch(&rec(5, 65), &b).unwrap();
        let v = s.sorted();
        assert_eq!(
            v[0],
            KernelStats {
                name: "b".into(),
                calls: 1,
                total_ns: 60,
                min_ns: 60,
                max_ns: 60
            }
        );
        assert_eq!(
            v[1],
            KernelStats {
                name: "a".into(),
                calls: 2,
                total_ns: 40,
                min_ns: 10,
                max_ns: 30
            }
        );
        let csv = s.to_csv();
        assert_eq!(
            csv,
            "\"Name\",\"Calls\",\"TotalDurationNs\",\"AverageNs\",\"Percentage\",\"MinNs\",\"MaxNs\"\n\
             \"b\",1,60,60,60.0000,60,60\n\"a\",2,40,20,40.0000,10,30\n"
        );
    }

    #[test]
    fn copies_accumulate_per_direction() {
        use crate::record::{CopyDirection, MemoryCopyRecord};
        let mut s = StatsSink::new(None, false);
        let copy = |direction, start, end, bytes| MemoryCopyRecord {
            direction,
            start_ns: start,
            end_ns: end,
            bytes,
            ..Default::default()
        };
        s.memory_copy(&copy(CopyDirection::HostToDevice, 0, 10, 4096))
            .unwrap();
        s.memory_copy(&copy(CopyDirection::HostToDevice, 20, 50, 4096))
            .unwrap();
        s.memory_copy(&copy(CopyDirection::DeviceToHost, 0, 60, 100))
            .unwrap();
        assert_eq!(
            s.copies_csv(),
            "\"Name\",\"Calls\",\"TotalDurationNs\",\"AverageNs\",\"Percentage\",\"MinNs\",\"MaxNs\",\"Bytes\"\n\
             \"MEMORY_COPY_DEVICE_TO_HOST\",1,60,60,60.0000,60,60,100\n\
             \"MEMORY_COPY_HOST_TO_DEVICE\",2,40,20,40.0000,10,30,8192\n"
        );
    }
}
