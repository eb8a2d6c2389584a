//! `count_slices TRACE...`: slices and instants per name in each trace,
//! streamed ([`rprof_perfetto::count_slices`]; bounded memory, so a
//! ten-million-dispatch trace is fine). One `slices<TAB>COUNT<TAB>NAME` or
//! `instants<TAB>COUNT<TAB>NAME` line per name, then the totals.
//!
//! `cargo run --release -p rprof-perfetto --example count_slices -- run.pftrace`

fn main() -> std::process::ExitCode {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: count_slices TRACE...");
        return std::process::ExitCode::from(2);
    }
    for p in &paths {
        let counts = match std::fs::File::open(p).and_then(rprof_perfetto::count_slices) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("count_slices: {p}: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        println!("# {p}");
        for (n, c) in &counts.slices {
            println!("slices\t{c}\t{n}");
        }
        for (n, c) in &counts.instants {
            println!("instants\t{c}\t{n}");
        }
        println!(
            "total\tslices={} packets={} track_descriptors={} unnamed={}",
            counts.total_slices(),
            counts.packets,
            counts.track_descriptors,
            counts.unnamed
        );
    }
    std::process::ExitCode::SUCCESS
}
