//! Opens the output sinks a configuration asks for.

use std::io;

use rprof_core::config::{ensure_parent, TraceConfig};
use rprof_core::output::csv::CsvSink;
use rprof_core::output::json::JsonSink;
use rprof_core::output::perfetto::{PerfettoOptions, PerfettoSink, WriterOptions};
use rprof_core::output::stats::StatsSink;
use rprof_core::sink::RecordSink;

/// The sinks for `config`: Perfetto, CSV and JSON as listed in its formats,
/// plus the statistics sink with `--stats`.
pub fn open_outputs(config: &TraceConfig) -> io::Result<Vec<Box<dyn RecordSink + Send>>> {
    let mut sinks: Vec<Box<dyn RecordSink + Send>> = Vec::new();
    let path = |suffix: &str| -> io::Result<std::path::PathBuf> {
        let p = config.output_path(suffix);
        ensure_parent(&p)?;
        Ok(p)
    };
    if config.formats.pftrace {
        // RPROF_PFTRACE_ENCODING=plain: absolute timestamps, no compression
        // (each packet readable on its own; about 3x larger).
        let encoding = match std::env::var("RPROF_PFTRACE_ENCODING").as_deref() {
            Ok("plain") => WriterOptions::plain(),
            _ => WriterOptions::default(),
        };
        sinks.push(Box::new(PerfettoSink::with_options(
            &path(".pftrace")?,
            PerfettoOptions {
                encoding,
                ..Default::default()
            },
        )?));
    }
    if config.formats.csv {
        sinks.push(Box::new(CsvSink::create(&path("_kernel_trace.csv")?)?));
    }
    if config.formats.json {
        sinks.push(Box::new(JsonSink::create(&path("_results.json")?)?));
    }
    if config.stats {
        sinks.push(Box::new(StatsSink::new(
            Some(path("_kernel_stats.csv")?),
            true,
        )));
    }
    Ok(sinks)
}
