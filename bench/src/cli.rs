//! The command line: what to run, how often, and where the workloads are.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Tracing overhead measured side by side: each workload's untraced
/// (`rprof --device emulated`) and traced (`rprof --kernel-trace`) runs,
/// alternated `--reps` times, as medians, ranges and ratios.
#[derive(Debug, Clone, Parser)]
#[command(name = "rprof-bench", version)]
pub struct Options {
    /// Where `rprof` is (a release build).
    #[arg(long, value_name = "DIR", default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// Where scripts/bench.sh built the workloads; traces go to DIR/out.
    #[arg(long, value_name = "DIR", default_value = "target/bench")]
    pub work_dir: PathBuf,
    /// Runs of each kind per measurement.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub reps: usize,
    /// Smaller workloads (a short check, not figures to quote).
    #[arg(long)]
    pub quick: bool,
    /// Also write the graph-storm plot (ratio against dispatch count) here.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// An environment variable for every run (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = key_value)]
    pub extra: Vec<(String, String)>,
    /// Sections to run; all if not given.
    #[arg(long, value_name = "SECTIONS", value_delimiter = ',')]
    pub only: Vec<Section>,
    /// Graph-storm launch counts; the default series if not given.
    #[arg(long, value_name = "I,...", value_delimiter = ',')]
    pub launches: Vec<u32>,
    /// The runtime: 6.x runs every run (traced and untraced) through
    /// `scripts/rocm-env.sh VERSION --`; 5.2 runs on the host.
    #[arg(long, value_name = "5.2|6.1|6.4", value_parser = runtime)]
    pub runtime: Option<Runtime>,
    /// Dispatches per run of the `scale` section; 100000,1000000,10000000
    /// if not given.
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    pub scale_sizes: Vec<u64>,
    /// The rocprofv3 peer root (`../shared/tools/peer-rocprofv3/build.sh`,
    /// e.g. /var/tmp/peer-roots/sid) for section `peer`.
    #[arg(long, value_name = "DIR")]
    pub peer_root: Option<PathBuf>,
}

/// A part of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Section {
    /// Host time per dispatch on the submitting thread (raw HSA).
    Host,
    /// Enqueue-to-completion latency seen by the app (raw HSA).
    Roundtrip,
    /// HIP graph storm: overhead against dispatch count.
    Storm,
    /// The storm with 20 µs kernels.
    Mix,
    /// rprof's resident memory against dispatch count (raw HSA).
    Memory,
    /// The cost of --serialize-kernels.
    Serialize,
    /// The cost of --rpc-trace.
    Rpc,
    /// The cost of --memory-copy-trace (hip-tests memcpy_mix).
    Copies,
    /// The cost of --marker-trace (on the graph storm: preload and
    /// interposition, no markers).
    Markers,
    /// The cost of --sys-trace (hip-tests memcpy_mix).
    Systrace,
    /// The cost of the rocpd writer (--output-format rocpd on the storm).
    Rocpd,
    /// Millions of dispatches: exact counts, memory, records lost (only
    /// when named in --only: minutes per run).
    Scale,
    /// rocprofv3 beside rprof in the peer root (--peer-root; not in the
    /// default set).
    Peer,
}

/// A runtime other than the host's 5.2 (`--runtime 5.2` is the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime(pub String);

fn runtime(v: &str) -> Result<Runtime, String> {
    if v.is_empty() {
        return Err("empty runtime version".into());
    }
    Ok(Runtime(v.to_string()))
}

fn key_value(kv: &str) -> Result<(String, String), String> {
    let (k, v) = kv.split_once('=').ok_or("--env takes KEY=VALUE")?;
    Ok((k.into(), v.into()))
}

impl Options {
    /// Whether `section` runs. `scale` runs only when named; `peer` when
    /// named or when --peer-root is given.
    pub fn want(&self, section: Section) -> bool {
        match section {
            Section::Scale => self.only.contains(&section),
            Section::Peer => {
                self.only.contains(&section) || (self.only.is_empty() && self.peer_root.is_some())
            }
            _ => self.only.is_empty() || self.only.contains(&section),
        }
    }

    /// The runtime's root to run in, `None` for the host's 5.2.
    pub fn root(&self) -> Option<&str> {
        self.runtime
            .as_ref()
            .map(|r| r.0.as_str())
            .filter(|&v| v != "5.2")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Options::try_parse_from(std::iter::once("rprof-bench").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_and_every_option() {
        let o = parse(&[]).unwrap();
        assert_eq!(o.bin_dir, PathBuf::from("target/release"));
        assert_eq!(o.work_dir, PathBuf::from("target/bench"));
        assert_eq!(o.reps, 5);
        assert!(!o.quick && o.svg.is_none() && o.extra.is_empty() && o.root().is_none());
        assert!(o.want(Section::Rpc) && !o.want(Section::Scale));
        assert!(o.scale_sizes.is_empty());
        let s = parse(&["--only", "scale", "--scale-sizes", "1000,20000"]).unwrap();
        assert!(s.want(Section::Scale) && !s.want(Section::Storm));
        assert_eq!(s.scale_sizes, [1000, 20000]);
        let o = parse(&[
            "--bin-dir",
            "b",
            "--work-dir",
            "w",
            "--reps",
            "3",
            "--quick",
            "--svg",
            "p.svg",
            "--env",
            "A=1=2",
            "--env",
            "B=",
            "--only",
            "storm,mix,copies,markers,systrace,rocpd",
            "--launches",
            "10,200",
            "--runtime",
            "6.4",
        ])
        .unwrap();
        assert_eq!(
            (o.bin_dir.to_str(), o.work_dir.to_str()),
            (Some("b"), Some("w"))
        );
        assert_eq!((o.reps, o.quick), (3, true));
        assert_eq!(o.svg, Some(PathBuf::from("p.svg")));
        assert_eq!(
            o.extra,
            [("A".into(), "1=2".into()), ("B".into(), String::new())]
        );
        assert_eq!(
            o.only,
            [
                Section::Storm,
                Section::Mix,
                Section::Copies,
                Section::Markers,
                Section::Systrace,
                Section::Rocpd
            ]
        );
        assert!(o.want(Section::Mix) && !o.want(Section::Host));
        assert_eq!(o.launches, [10, 200]);
        assert_eq!(o.root(), Some("6.4"));
        assert_eq!(parse(&["--runtime", "5.2"]).unwrap().root(), None);
    }

    #[test]
    fn peer_runs_when_named_or_given_a_root() {
        let o = parse(&[]).unwrap();
        assert!(o.peer_root.is_none() && !o.want(Section::Peer) && o.want(Section::Storm));
        let o = parse(&["--peer-root", "/var/tmp/peer-roots/sid"]).unwrap();
        assert_eq!(o.peer_root, Some(PathBuf::from("/var/tmp/peer-roots/sid")));
        assert!(o.want(Section::Peer) && o.want(Section::Storm));
        let o = parse(&["--only", "peer"]).unwrap();
        assert!(o.want(Section::Peer) && !o.want(Section::Storm));
        let o = parse(&["--peer-root", "/r", "--only", "storm"]).unwrap();
        assert!(!o.want(Section::Peer));
    }

    #[test]
    fn bad_arguments_are_refused() {
        for args in [
            &["--reps", "x"][..],
            &["--env", "NOEQUALS"],
            &["--only", "storm,typo"],
            &["--launches", "1,x"],
            &["--unknown"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
