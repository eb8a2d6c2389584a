//! Command-line types of `rprof` and their mapping to plain settings.
//!
//! clap parses into [`Cli`]; [`LaunchPlan::from_cli`] turns that into the
//! environment the traced process gets (`RPROF_*`, `HSA_TOOLS_LIB`,
//! `LD_LIBRARY_PATH`). Only the plan reaches the launcher, so the library's
//! view of the configuration ([`rprof_core::config::TraceConfig::from_env`])
//! is the single source of truth for defaults and validation.
//!
//! Owns the options and their mapping to variables; must not validate
//! values (`rprof_core::config` does) nor start processes (`main.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kernel tracer for AMD GPUs (ROCm / HSA).
#[derive(Debug, Parser)]
#[command(
    name = "rprof",
    args_conflicts_with_subcommands = true,
    version,
    about = "Kernel tracer for AMD GPUs: runs an app and records its GPU kernel dispatches, memory copies and ROCTx markers",
    after_help = "Examples:\n  rprof --kernel-trace ./app            trace, write rprof-results/<host>/<pid>.pftrace and .csv\n  rprof --kernel-trace --stats -- ./app --app-flag\n  rprof --device emulated -- ./app      run on the emulated GPU, untraced\n  rprof merge a.pftrace b.pftrace -o all.pftrace\n\nOpen .pftrace files at https://ui.perfetto.dev"
)]
pub struct Cli {
    /// Tracing options.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Subcommand (omit to run an application; `rprof -- merge` runs an app
    /// named `merge`).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The application and its arguments. An option rprof does not know
    /// before the application is a usage error (never taken for the app);
    /// after the application, or after `--`, everything is the app's.
    #[arg(trailing_var_arg = true, value_name = "APP [ARGS]...")]
    pub app: Vec<OsString>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Merge the .pftrace files of several processes into one trace, or
    /// their rocpd databases (NAME_results.db) into one database.
    Merge {
        /// Input traces, or input databases.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// What to record and where.
#[derive(Debug, Args, Clone, Default)]
pub struct TraceArgs {
    /// Record every kernel dispatch (GPU start/end, names, sizes).
    #[arg(long)]
    pub kernel_trace: bool,
    /// Every trace rprof has, as rocprofv3's --sys-trace (kernels, memory
    /// copies, ROCTx markers; --rpc-trace is rprof's own diagnostic and
    /// stays separate).
    #[arg(short = 's', long)]
    pub sys_trace: bool,
    /// Trace GPU-to-host RPC doorbell waits (sleep, wake, serve).
    #[arg(long)]
    pub rpc_trace: bool,
    /// Record ROCTx marks and ranges (NAME_marker_api_trace.csv; the tool library is preloaded).
    #[arg(long)]
    pub marker_trace: bool,
    /// Name each kernel after its innermost enclosing ROCTx push/pop range
    /// (or a ROCTx mark made since on its thread), as rocprofv3 does.
    #[arg(long)]
    pub kernel_rename: bool,
    /// Record asynchronous memory copies (hsa_amd_memory_async_copy*, as
    /// hipMemcpy issues them): NAME_memory_copy_trace.csv and the other
    /// formats.
    #[arg(long)]
    pub memory_copy_trace: bool,
    /// Run one kernel at a time per GPU (no overlap; slower).
    #[arg(long)]
    pub serialize_kernels: bool,
    /// Per-kernel statistics at exit (stderr and NAME_kernel_stats.csv).
    #[arg(long)]
    pub stats: bool,
    /// The per-kernel summary on stderr at exit, as rocprofv3's -S (no
    /// statistics file). With --output-format none: the summary alone.
    #[arg(short = 'S', long)]
    pub summary: bool,
    /// Output directory.
    #[arg(short = 'd', long = "output-directory", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Output file name stem; placeholders %pid% %ppid% %hostname% %rank% %env{VAR}%.
    #[arg(short = 'o', long = "output-file", value_name = "NAME")]
    pub output_name: Option<String>,
    /// Comma-separated formats: pftrace, csv, json, rocpd (default
    /// pftrace,csv); `none` writes no trace file (with --stats or --summary).
    #[arg(long, value_name = "FORMATS")]
    pub output_format: Option<String>,
    /// Start a new Perfetto trace file every N seconds of trace time
    /// (NAME.pftrace, NAME_part1.pftrace, ...; each opens on its own).
    #[arg(long, value_name = "N")]
    pub pftrace_split_seconds: Option<String>,
    /// Keep only kernels whose name matches this regex.
    #[arg(long, value_name = "RE")]
    pub kernel_include_regex: Option<String>,
    /// Drop kernels whose name matches this regex.
    #[arg(long, value_name = "RE")]
    pub kernel_exclude_regex: Option<String>,
    /// Show kernels by their base name (no template or parameter list).
    #[arg(short = 'T', long)]
    pub truncate_kernels: bool,
    /// Which GPU to use.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
}

/// Where the app's GPU work goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Device {
    /// The real GPU if /dev/kfd exists, else the emulated one.
    #[default]
    Auto,
    /// The real GPU through the installed driver.
    Native,
    /// rprof's emulated GPU (a replacement libhsakmt.so.1).
    Emulated,
}

/// The environment for the child process, derived from the arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Variables to set.
    pub env: Vec<(String, String)>,
    /// Whether any tracing was asked for (the tool library is needed).
    pub tracing: bool,
    /// Use the emulated GPU.
    pub emulated: bool,
}

impl LaunchPlan {
    /// The environment the child sees: the plan's variables over rprof's
    /// own.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<String> {
        let overrides = self.env.clone();
        move |k: &str| {
            overrides
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(k).ok())
        }
    }

    /// Maps the tracing arguments to `RPROF_*` variables. `kfd_present`
    /// decides `--device auto`.
    pub fn from_cli(t: &TraceArgs, kfd_present: bool) -> LaunchPlan {
        let mut env = Vec::new();
        let flag = |env: &mut Vec<(String, String)>, on: bool, name: &str| {
            if on {
                env.push((name.to_string(), "1".to_string()));
            }
        };
        flag(&mut env, t.kernel_trace, "RPROF_KERNEL_TRACE");
        flag(&mut env, t.sys_trace, "RPROF_SYS_TRACE");
        flag(&mut env, t.rpc_trace, "RPROF_RPC_TRACE");
        flag(&mut env, t.marker_trace, "RPROF_MARKER_TRACE");
        flag(&mut env, t.kernel_rename, "RPROF_KERNEL_RENAME");
        flag(&mut env, t.memory_copy_trace, "RPROF_MEMORY_COPY_TRACE");
        flag(&mut env, t.serialize_kernels, "RPROF_SERIALIZE_KERNELS");
        flag(&mut env, t.stats, "RPROF_STATS");
        flag(&mut env, t.summary, "RPROF_SUMMARY");
        flag(&mut env, t.truncate_kernels, "RPROF_TRUNCATE_KERNELS");
        let mut opt = |v: &Option<String>, name: &str| {
            if let Some(v) = v {
                env.push((name.to_string(), v.clone()));
            }
        };
        opt(
            &t.output_dir
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            "RPROF_OUTPUT_DIR",
        );
        opt(&t.output_name, "RPROF_OUTPUT_NAME");
        opt(&t.output_format, "RPROF_OUTPUT_FORMAT");
        opt(&t.pftrace_split_seconds, "RPROF_PFTRACE_SPLIT_SECONDS");
        opt(&t.kernel_include_regex, "RPROF_KERNEL_INCLUDE_REGEX");
        opt(&t.kernel_exclude_regex, "RPROF_KERNEL_EXCLUDE_REGEX");
        let tracing = t.kernel_trace
            || t.sys_trace
            || t.rpc_trace
            || t.serialize_kernels
            || t.stats
            || t.summary
            || t.marker_trace
            || t.memory_copy_trace;
        let emulated = match t.device {
            Device::Emulated => true,
            Device::Native => false,
            Device::Auto => !kfd_present,
        };
        LaunchPlan {
            env,
            tracing,
            emulated,
        }
    }
}

/// rocprofv3 options (long and short spellings, `rocprofv3.py` of ROCm 7.0)
/// that rprof does not implement: given to `rprof`, they are refused by name
/// instead of being reported as merely unknown. Only options clap does not
/// know reach this list, so an entry for an option rprof gains later (e.g.
/// `--marker-trace`, `--kernel-rename`) is inert:
/// remove it when the option lands.
pub const ROCPROFV3_UNIMPLEMENTED: &[&str] = &[
    "--hip-trace",
    "--hip-runtime-trace",
    "--hip-compiler-trace",
    "--hsa-trace",
    "--hsa-core-trace",
    "--hsa-amd-trace",
    "--hsa-image-trace",
    "--hsa-finalizer-trace",
    "--memory-allocation-trace",
    "--scratch-memory-trace",
    "--rccl-trace",
    "--rocdecode-trace",
    "--rocjpeg-trace",
    "--kokkos-trace",
    "--runtime-trace",
    "-r",
    "--pmc",
    "--att",
    "--advanced-thread-trace",
    "--pc-sampling",
    "--pc-sampling-beta-enabled",
    "--pc-sampling-method",
    "--pc-sampling-unit",
    "--pc-sampling-interval",
    "--collection-period",
    "-P",
    "--collection-period-unit",
    "--kernel-iteration-range",
    "--group-by-queue",
    "--selected-regions",
    "--agent-index",
    "-A",
    "--minimum-output-data",
    "--summary-per-domain",
    "-D",
    "--summary-groups",
    "--summary-output-file",
    "--summary-units",
    "--list-avail",
    "-L",
    "--mangled-kernels",
    "-M",
    "--preload",
    "--log-level",
    "--input",
    "-i",
    "--perfetto-backend",
    "--perfetto-buffer-size",
    "--perfetto-buffer-fill-policy",
    "--perfetto-shmem-size-hint",
];

/// What to tell the user about an option clap does not know, given before
/// the application: the message names it, and says when it is a rocprofv3
/// option rprof does not implement. `arg` is as typed (`--pmc=SQ_WAVES`
/// included).
pub fn unknown_option_message(arg: &str) -> String {
    let name = arg.split('=').next().unwrap_or(arg);
    if ROCPROFV3_UNIMPLEMENTED.contains(&name) {
        format!(
            "rprof: error: {name} is a rocprofv3 option rprof does not implement \
             (rprof records kernels, memory copies and ROCTx markers: --kernel-trace, \
             --memory-copy-trace, --marker-trace, --sys-trace for all three, --stats, --summary; \
             see rprof --help)"
        )
    } else {
        format!(
            "rprof: error: unknown option {name} (options go before the application; \
             use `rprof [OPTIONS] -- APP ARGS` when the application's name starts with `-`; \
             see rprof --help)"
        )
    }
}

/// The offending argument of a clap "unknown argument" error.
pub fn unknown_argument(e: &clap::Error) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    }
}

/// Finds a file shipped next to the `rprof` executable (as `cargo build`
/// lays them out: `target/<profile>/{rprof, librprof_tool.so, libhsakmt.so}`).
pub fn sibling_of_exe(exe: &Path, name: &str) -> Option<PathBuf> {
    let dir = exe.parent()?;
    let candidate = dir.join(name);
    if candidate.exists() {
        return Some(candidate);
    }
    // `cargo test` runs binaries from target/<profile>/deps sometimes.
    let up = dir.parent()?.join(name);
    up.exists().then_some(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap()
    }

    #[test]
    fn app_and_its_flags_are_kept_apart() {
        let c = parse(&[
            "rprof",
            "--kernel-trace",
            "--",
            "./app",
            "--kernel-trace",
            "-x",
        ]);
        assert!(c.trace.kernel_trace);
        assert_eq!(c.app, vec!["./app", "--kernel-trace", "-x"]);
        let c = parse(&["rprof", "--stats", "./app", "-v"]);
        assert_eq!(c.app, vec!["./app", "-v"]);
    }

    #[test]
    fn plan_maps_every_option() {
        let c = parse(&[
            "rprof",
            "--kernel-trace",
            "--stats",
            "-T",
            "-d",
            "out",
            "-o",
            "run_%pid%",
            "--output-format",
            "json",
            "--kernel-include-regex",
            "add",
            "--kernel-exclude-regex",
            "slow",
            "--device",
            "emulated",
            "app",
        ]);
        let p = LaunchPlan::from_cli(&c.trace, true);
        assert!(p.tracing && p.emulated);
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RPROF_KERNEL_TRACE"), Some("1"));
        assert_eq!(get("RPROF_STATS"), Some("1"));
        assert_eq!(get("RPROF_TRUNCATE_KERNELS"), Some("1"));
        assert_eq!(get("RPROF_OUTPUT_DIR"), Some("out"));
        assert_eq!(get("RPROF_OUTPUT_NAME"), Some("run_%pid%"));
        assert_eq!(get("RPROF_OUTPUT_FORMAT"), Some("json"));
        assert_eq!(get("RPROF_KERNEL_INCLUDE_REGEX"), Some("add"));
        assert_eq!(get("RPROF_KERNEL_EXCLUDE_REGEX"), Some("slow"));
        assert_eq!(get("RPROF_RPC_TRACE"), None);
    }

    #[test]
    fn merge_is_a_subcommand_unless_after_dashes() {
        let c = parse(&[
            "rprof",
            "merge",
            "a.pftrace",
            "b.pftrace",
            "-o",
            "all.pftrace",
        ]);
        assert!(matches!(c.command, Some(Command::Merge { ref inputs, .. }) if inputs.len() == 2));
        let c = parse(&["rprof", "--", "merge", "x"]);
        assert!(c.command.is_none());
        assert_eq!(c.app, vec!["merge", "x"]);
    }

    #[test]
    fn an_unknown_option_before_the_app_is_an_error_naming_it() {
        for (args, bad) in [
            (
                &["rprof", "--scratch-memory-trace", "--kernel-trace", "./app"][..],
                "--scratch-memory-trace",
            ),
            (
                &["rprof", "--kernel-trace", "--bogus", "./app"][..],
                "--bogus",
            ),
            (&["rprof", "--pmc=SQ_WAVES", "./app"][..], "--pmc"),
            (&["rprof", "--hip-trace", "./app"][..], "--hip-trace"),
        ] {
            let e = Cli::try_parse_from(args).expect_err(bad);
            let arg = unknown_argument(&e).expect("an unknown-argument error");
            let msg = unknown_option_message(&arg);
            assert!(msg.contains(bad), "{msg}");
        }
        let msg = unknown_option_message("--hip-trace");
        assert!(
            msg.contains("rocprofv3 option rprof does not implement"),
            "{msg}"
        );
        let msg = unknown_option_message("--bogus");
        assert!(msg.contains("unknown option --bogus"), "{msg}");
        // After the application, or after `--`, options are the app's.
        let c = parse(&["rprof", "--kernel-trace", "./app", "--bogus", "-x"]);
        assert_eq!(c.app, vec!["./app", "--bogus", "-x"]);
        let c = parse(&["rprof", "--kernel-trace", "--", "--weird-app", "-x"]);
        assert_eq!(c.app, vec!["--weird-app", "-x"]);
    }

    #[test]
    fn sys_trace_sets_its_variable_and_traces() {
        let c = parse(&["rprof", "--sys-trace", "./app"]);
        let p = LaunchPlan::from_cli(&c.trace, true);
        assert!(p.tracing);
        assert!(p.env.contains(&("RPROF_SYS_TRACE".into(), "1".into())));
        assert!(parse(&["rprof", "-s", "./app"]).trace.sys_trace);
    }

    /// `rprof --help` says what --sys-trace turns on (kernels, copies and
    /// markers), not the kernel trace alone.
    #[test]
    fn help_says_what_sys_trace_turns_on() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        let line = help
            .split("-s, --sys-trace")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .expect("a --sys-trace entry");
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            line,
            "Every trace rprof has, as rocprofv3's --sys-trace (kernels, memory copies, \
             ROCTx markers; --rpc-trace is rprof's own diagnostic and stays separate)"
        );
        assert!(help.contains("kernel dispatches, memory copies and ROCTx markers"));
        assert!(unknown_option_message("--hip-trace").contains("--sys-trace for all three"));
    }

    #[test]
    fn summary_and_split_map_to_their_variables() {
        let c = parse(&[
            "rprof",
            "-S",
            "--output-format",
            "none",
            "--pftrace-split-seconds",
            "2.5",
            "./app",
        ]);
        let p = LaunchPlan::from_cli(&c.trace, true);
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert!(p.tracing);
        assert_eq!(get("RPROF_SUMMARY"), Some("1"));
        assert_eq!(get("RPROF_OUTPUT_FORMAT"), Some("none"));
        assert_eq!(get("RPROF_PFTRACE_SPLIT_SECONDS"), Some("2.5"));
        assert!(parse(&["rprof", "--summary", "./app"]).trace.summary);
        // rocprofv3's other summary options are still refused by name.
        let e = Cli::try_parse_from(["rprof", "--summary-output-file", "x", "./app"]).unwrap_err();
        let msg = unknown_option_message(&unknown_argument(&e).unwrap());
        assert!(
            msg.contains("rocprofv3 option rprof does not implement"),
            "{msg}"
        );
    }

    #[test]
    fn device_auto_follows_kfd() {
        let t = TraceArgs::default();
        assert!(LaunchPlan::from_cli(&t, false).emulated);
        assert!(!LaunchPlan::from_cli(&t, true).emulated);
        assert!(!LaunchPlan::from_cli(&t, false).tracing);
    }

    #[test]
    fn marker_options_map_to_their_variables_and_trace() {
        let c = parse(&["rprof", "--marker-trace", "--kernel-rename", "./app"]);
        let p = LaunchPlan::from_cli(&c.trace, true);
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RPROF_MARKER_TRACE"), Some("1"));
        assert_eq!(get("RPROF_KERNEL_RENAME"), Some("1"));
        assert!(p.tracing);
        let c = parse(&["rprof", "--kernel-trace", "./app"]);
        let p = LaunchPlan::from_cli(&c.trace, true);
        assert!(!p.env.iter().any(|(n, _)| n == "RPROF_MARKER_TRACE"));
    }
}
