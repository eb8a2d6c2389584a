//! Opens the output sinks a configuration asks for.
//!
//! Owns creating the files (new, never over an earlier run's) and undoing a
//! partial creation; must not write records (the engine's writer thread
//! does) nor read the environment (the configuration did).

use std::io;

use rprof_core::config::{ensure_parent, TraceConfig};
use rprof_core::output::csv::CsvSink;
use rprof_core::output::json::JsonSink;
use rprof_core::output::perfetto::{PerfettoOptions, PerfettoSink, WriterOptions};
use rprof_core::output::rocpd::RocpdSink;
use rprof_core::output::split::{part_path, SplitPerfettoSink};
use rprof_core::output::stats::StatsSink;
use rprof_core::sink::RecordSink;

/// The sinks for `config`: Perfetto, CSV, JSON and rocpd (`NAME_results.db`,
/// one database per process) as listed in its formats,
/// plus the statistics sink with `--stats`.
///
/// Every file is created new ([`rprof_core::output::files::create_new`]):
/// when one cannot be (its name is taken, or is a symbolic link), the files
/// this call already created are removed again, so a refused run leaves no
/// empty outputs behind.
pub fn open_outputs(config: &TraceConfig) -> io::Result<Vec<Box<dyn RecordSink + Send>>> {
    let mut created = Vec::new();
    let result = open_each(config, &mut created);
    if result.is_err() {
        for p in created {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

fn open_each(
    config: &TraceConfig,
    created: &mut Vec<std::path::PathBuf>,
) -> io::Result<Vec<Box<dyn RecordSink + Send>>> {
    let mut sinks: Vec<Box<dyn RecordSink + Send>> = Vec::new();
    let path = |suffix: &str| -> io::Result<std::path::PathBuf> {
        let p = config.output_path(suffix);
        ensure_parent(&p)?;
        Ok(p)
    };
    if config.formats.pftrace {
        // RPROF_PFTRACE_ENCODING=plain: absolute timestamps, no compression
        // (each packet readable on its own; about 6x larger).
        let encoding = if config.tuning.plain_pftrace {
            WriterOptions::plain()
        } else {
            WriterOptions::default()
        };
        let p = path(".pftrace")?;
        let options = PerfettoOptions {
            encoding,
            ..Default::default()
        };
        match config.pftrace_split_ns {
            Some(window) => {
                // The parts are created as the trace reaches them: refuse
                // now if an earlier run's second part is in the way.
                let second = part_path(&p, 1);
                if std::fs::symlink_metadata(&second).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "{} already exists (an earlier run's split trace): remove it, or choose another name with -o/--output-file",
                            second.display()
                        ),
                    ));
                }
                sinks.push(Box::new(SplitPerfettoSink::create(&p, window, options)?));
            }
            None => sinks.push(Box::new(PerfettoSink::with_options(&p, options)?)),
        }
        created.push(p);
    }
    if config.formats.csv {
        let p = path("_kernel_trace.csv")?;
        sinks.push(Box::new(CsvSink::create(&p)?));
        created.push(p);
    }
    if config.formats.json {
        let p = path("_results.json")?;
        sinks.push(Box::new(JsonSink::create(&p)?));
        created.push(p);
    }
    if config.formats.rocpd {
        let p = path("_results.db")?;
        sinks.push(Box::new(RocpdSink::create(&p)?));
        created.push(p);
    }
    if config.stats {
        let p = path("_kernel_stats.csv")?;
        sinks.push(Box::new(StatsSink::create(p.clone(), true)?));
        created.push(p);
    } else if config.summary {
        // --summary without --stats: the same table on stderr, no file.
        sinks.push(Box::new(StatsSink::new(None, true)));
    }
    Ok(sinks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rprof_core::config::ProcessFacts;

    fn config(dir: &std::path::Path, formats: &str, stats: bool) -> TraceConfig {
        let dir = dir.to_string_lossy().into_owned();
        let formats = formats.to_string();
        let lookup = move |k: &str| match k {
            "RPROF_KERNEL_TRACE" => Some("1".to_string()),
            "RPROF_STATS" if stats => Some("1".to_string()),
            "RPROF_OUTPUT_DIR" => Some(dir.clone()),
            "RPROF_OUTPUT_NAME" => Some("run".to_string()),
            "RPROF_OUTPUT_FORMAT" => Some(formats.clone()),
            _ => None,
        };
        let facts = ProcessFacts {
            pid: 1,
            ppid: 1,
            hostname: "h".into(),
        };
        TraceConfig::from_source(&lookup, &facts).unwrap().unwrap()
    }

    #[test]
    fn the_reported_files_are_the_sinks_files_in_their_order() {
        // The writer reports each sink's outcome by position in
        // `report::output_files`: it must list what `open_each` creates, in
        // the same order (rocpd between JSON and the statistics was missing).
        for (formats, stats) in [
            ("pftrace,csv,json,rocpd", true),
            ("rocpd", true),
            ("csv,rocpd", false),
            ("pftrace", true),
        ] {
            let dir = std::env::temp_dir().join(format!(
                "rprof-outputs-order-{}-{}",
                std::process::id(),
                formats.replace(',', "-")
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let cfg = config(&dir, formats, stats);
            let mut created = Vec::new();
            let sinks = open_each(&cfg, &mut created).unwrap();
            assert_eq!(created, crate::report::output_files(&cfg), "{formats}");
            assert_eq!(sinks.len(), created.len(), "{formats}");
            drop(sinks);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_taken_name_refuses_the_run_and_leaves_no_new_files() {
        let dir = std::env::temp_dir().join(format!("rprof-outputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // An earlier run's statistics: pftrace, CSV and JSON would be
        // created first, and must go again.
        std::fs::write(dir.join("run_kernel_stats.csv"), b"earlier").unwrap();
        let e = match open_outputs(&config(&dir, "pftrace,csv,json", true)) {
            Ok(_) => panic!("a taken name was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.starts_with(&format!(
                "{} already exists",
                dir.join("run_kernel_stats.csv").display()
            )),
            "{e}"
        );
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["run_kernel_stats.csv"]);
        assert_eq!(
            std::fs::read(dir.join("run_kernel_stats.csv")).unwrap(),
            b"earlier"
        );
        // A free name opens all five.
        std::fs::remove_file(dir.join("run_kernel_stats.csv")).unwrap();
        assert_eq!(
            open_outputs(&config(&dir, "pftrace,csv,json,rocpd", true))
                .unwrap()
                .len(),
            5
        );
        let mut made: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        made.sort();
        assert_eq!(
            made,
            [
                "run.pftrace",
                "run_kernel_stats.csv",
                "run_kernel_trace.csv",
                "run_results.db",
                "run_results.json"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
