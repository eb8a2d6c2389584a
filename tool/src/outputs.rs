//! Opens the output sinks a configuration asks for.

use std::io;

use rprof_core::config::{ensure_parent, TraceConfig};
use rprof_core::output::csv::CsvSink;
use rprof_core::output::json::JsonSink;
use rprof_core::output::perfetto::PerfettoSink;
use rprof_core::output::stats::StatsSink;
use rprof_core::sink::RecordSink;

/// The sinks for `config`: Perfetto, CSV and JSON as listed in its formats,
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
        let p = path(".pftrace")?;
        sinks.push(Box::new(PerfettoSink::create(&p)?));
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
    if config.stats {
        let p = path("_kernel_stats.csv")?;
        sinks.push(Box::new(StatsSink::create(p.clone(), true)?));
        created.push(p);
    }
    Ok(sinks)
}
