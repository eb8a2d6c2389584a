//! Prints the writer's throughput and trace size for the kernel-trace
//! pattern rprof writes: per dispatch one kernel slice (interned name,
//! terminating flow) on a lane track, and one interceptor slice with flows
//! per batch.
//!
//! `cargo run --release -p rprof-perfetto --example throughput [DISPATCHES] [BATCH]`
//! (defaults 2000000 and 1). Writes to `$TMPDIR/rprof-throughput.pftrace`.

use std::time::Instant;

use rprof_perfetto::{Arg, ArgValue, ClockReadings, CustomTrack, Slice, ThreadTrack, TraceWriter};

fn main() -> std::io::Result<()> {
    let mut argv = std::env::args().skip(1);
    let dispatches: u64 = argv
        .next()
        .map_or(2_000_000, |s| s.parse().expect("DISPATCHES"));
    let batch: u64 = argv.next().map_or(1, |s| s.parse().expect("BATCH")).max(1);
    let path = std::env::temp_dir().join("rprof-throughput.pftrace");
    let file = std::fs::File::create(&path)?;

    let t0 = Instant::now();
    let mut w = TraceWriter::new(file);
    let base = 10_000_000_000_000u64;
    w.write_clock_snapshot(&ClockReadings {
        boottime_ns: base,
        monotonic_ns: base,
        realtime_ns: base,
    })?;
    w.write_thread_track(&ThreadTrack {
        uuid: 2,
        pid: 42,
        tid: 42,
        name: "app",
        timestamp_ns: base,
    })?;
    w.write_custom_track(&CustomTrack::new(3, "GPU 0 (gfx90a)"))?;
    w.write_custom_track(&CustomTrack {
        parent_uuid: Some(3),
        ..CustomTrack::new(4, "queue 1")
    })?;
    w.write_custom_track(&CustomTrack {
        parent_uuid: Some(4),
        ..CustomTrack::new(5, "queue 1")
    })?;
    let call = w.intern_event_name("hsa_queue_write");
    let packets = w.intern_annotation_name("packet_count");
    let kernels: Vec<_> = (0..256)
        .map(|i| w.intern_event_name(&format!("graph_node_kernel_{i:03}")))
        .collect();
    let mut flows = Vec::with_capacity(batch as usize);
    let mut records = 0u64;
    let pid_bits = 42u64 << 32;
    let mut d = 0u64;
    while d < dispatches {
        let n = batch.min(dispatches - d);
        let t = base + d * 2_000;
        flows.clear();
        flows.extend((0..n).map(|i| pid_bits | (d + i + 1)));
        w.write_slice(&Slice {
            args: &[Arg {
                name: packets,
                value: ArgValue::Uint(n + 1),
            }],
            flow_ids: &flows,
            ..Slice::new(2, t, t + 500, call)
        })?;
        records += 1;
        for i in 0..n {
            let start = t + 1_000 + i * 1_200;
            w.write_slice(&Slice {
                terminating_flow_ids: &[pid_bits | (d + i + 1)],
                ..Slice::new(5, start, start + 900, kernels[((d + i) % 256) as usize])
            })?;
            records += 1;
        }
        d += n;
    }
    let bytes = w.bytes_written();
    let packets_written = w.packets_written();
    w.finish()?.sync_data()?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{dispatches} dispatches in batches of {batch}: {records} records ({packets_written} packets) in {secs:.3} s"
    );
    println!(
        "  {:.2} M records/s, {:.2} M dispatches/s, {:.1} MB, {:.1} bytes/dispatch -> {}",
        records as f64 / secs / 1e6,
        dispatches as f64 / secs / 1e6,
        bytes as f64 / 1e6,
        bytes as f64 / dispatches as f64,
        path.display()
    );
    Ok(())
}
