//! Steady-state writes allocate nothing: once names are interned and the
//! buffers have grown, slices with numeric args, flows, instants and counters
//! only encode into reused buffers; so do slices with interned string values
//! (rprof's Standard kernel args). Counted with a global allocator that
//! tallies allocations (this test binary has a single test, so no other
//! thread allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use rprof_perfetto::{
    Arg, ArgValue, ClockReadings, CounterTrack, CounterValue, CustomTrack, Slice, TraceWriter,
};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_writes_do_not_allocate() {
    let mut w = TraceWriter::new(std::io::sink());
    w.write_clock_snapshot(&ClockReadings::default()).unwrap();
    w.write_custom_track(&CustomTrack::new(2, "queue 1"))
        .unwrap();
    w.write_counter_track(&CounterTrack {
        uuid: 3,
        parent_uuid: None,
        name: "c",
        unit: None,
    })
    .unwrap();
    let names: Vec<_> = (0..64)
        .map(|i| w.intern_event_name(&format!("kernel_{i}")))
        .collect();
    let grid = w.intern_annotation_name("grid.x");
    let obj = w.intern_annotation_name("kernel_object");
    // rprof's Standard kernel args: a uint and an interned launch string.
    let launch = w.intern_annotation_name("launch");
    let configs: Vec<String> = (0..8)
        .map(|i| format!("grid {}x1x1 wg 256x1x1 lds 0 scratch 0", 256 << i))
        .collect();
    let run = |w: &mut TraceWriter<std::io::Sink>, round: u64| {
        for (i, &name) in names.iter().enumerate() {
            let t = round * 1_000_000 + i as u64 * 1_000;
            let args = [
                Arg {
                    name: grid,
                    value: ArgValue::Uint(i as u64),
                },
                Arg {
                    name: obj,
                    value: ArgValue::Pointer(0x7f00 + i as u64),
                },
            ];
            w.write_slice(&Slice {
                args: &args,
                terminating_flow_ids: &[t],
                flow_ids: &[t, t + 1],
                correlation_id: Some(t),
                ..Slice::new(2, t, t + 500, name)
            })
            .unwrap();
            w.write_instant(2, t + 600, name, &args).unwrap();
            // Looking up an already interned value does not allocate either.
            let config = w.intern_string_value(&configs[i % configs.len()]);
            let standard = [
                Arg {
                    name: grid,
                    value: ArgValue::Uint(t),
                },
                Arg {
                    name: launch,
                    value: ArgValue::InternedString(config),
                },
            ];
            w.write_slice(&Slice {
                args: &standard,
                terminating_flow_ids: &[t],
                ..Slice::new(2, t + 700, t + 800, name)
            })
            .unwrap();
            w.write_counter(3, t, CounterValue::Int(i as i64)).unwrap();
        }
    };
    // Warm up: defines names (their first writes carry the interned names),
    // grows buffers and deflates a first bundle or two.
    let warm = 2;
    for round in 0..warm {
        run(&mut w, round);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for round in warm..100 {
        run(&mut w, round);
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations in steady state");
    assert_eq!(w.packets_written(), 3 + 100 * 64 * 6);
    assert_eq!(w.string_values_interned(), configs.len());
    // Inline string args are copied into the reused packet buffer too.
    let note = w.intern_annotation_name("note");
    let name = names[0];
    let text_arg = [Arg {
        name: note,
        value: ArgValue::Str("a longer text argument, written inline"),
    }];
    w.write_instant(2, 1, name, &text_arg).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    w.write_instant(2, 2, name, &text_arg).unwrap();
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), before);
    // The counter does count: interning a new value allocates.
    w.intern_string_value("a new launch configuration");
    assert!(ALLOCATIONS.load(Ordering::Relaxed) > before);
}
