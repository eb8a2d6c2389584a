//! Engine tests against a simulated device: a thread that executes the
//! packets the interceptor writes, with a small signal pool so that
//! back-pressure is exercised.

use super::*;
use crate::kernels::{KernelTable, NamePolicy};
use crate::record::{
    AgentInfo, CopyDirection, DispatchRecord, InterceptRecord, MemoryCopyRecord, RunInfo,
};
use crate::sink::{KernelInfo, RecordSink};
use hsa_sys::{
    HSA_PACKET_HEADER_TYPE, HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_KERNEL_DISPATCH,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::Arc;

const SIGNALS: usize = 4096;

/// Signal table shared by the fake pool, the fake device and the app.
#[derive(Debug)]
struct Signals {
    value: Vec<AtomicI64>,
    start: Vec<AtomicU64>,
    end: Vec<AtomicU64>,
    /// While set, the completion thread's signal reads block (the thread is
    /// kept off the CPU, as a scheduler can).
    reads_paused: AtomicBool,
}

impl Signals {
    fn new() -> Arc<Self> {
        Arc::new(Signals {
            value: (0..SIGNALS).map(|_| AtomicI64::new(1)).collect(),
            start: (0..SIGNALS).map(|_| AtomicU64::new(0)).collect(),
            end: (0..SIGNALS).map(|_| AtomicU64::new(0)).collect(),
            reads_paused: AtomicBool::new(false),
        })
    }
    fn idx(h: u64) -> usize {
        (h - 1) as usize
    }
}

struct FakePool {
    signals: Arc<Signals>,
    free: Arc<ArrayQueue<u64>>,
    cap: usize,
}

#[derive(Debug)]
struct FakeSignal {
    handle: u64,
    signals: Arc<Signals>,
    free: Arc<ArrayQueue<u64>>,
}

impl DispatchSignal for FakeSignal {
    fn handle(&self) -> u64 {
        self.handle
    }
}

impl Drop for FakeSignal {
    fn drop(&mut self) {
        self.signals.value[Signals::idx(self.handle)].store(1, Ordering::SeqCst);
        self.free.push(self.handle).unwrap();
    }
}

impl FakePool {
    /// Pool signals are handles `1..=cap`; app signals live above.
    fn new(signals: Arc<Signals>, cap: usize) -> Self {
        let free = Arc::new(ArrayQueue::new(cap));
        for h in 1..=cap as u64 {
            free.push(h).unwrap();
        }
        FakePool { signals, free, cap }
    }

    /// Signals on the free list now.
    fn available(&self) -> usize {
        self.free.len()
    }
}

impl SignalSource<FakeSignal> for FakePool {
    fn try_acquire(&self) -> Option<FakeSignal> {
        self.free.pop().map(|handle| FakeSignal {
            handle,
            signals: self.signals.clone(),
            free: self.free.clone(),
        })
    }
    fn capacity(&self) -> usize {
        self.cap
    }
}

struct FakeBackend {
    signals: Arc<Signals>,
}

impl CompletionBackend for FakeBackend {
    fn signal_value(&self, signal: u64) -> i64 {
        while self.signals.reads_paused.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.signals.value[Signals::idx(signal)].load(Ordering::Acquire)
    }
    fn forward(&self, app_signal: u64, _kernel_signal: Option<u64>) {
        self.signals.value[Signals::idx(app_signal)].fetch_sub(1, Ordering::SeqCst);
    }
    fn open_gate(&self, signal: u64) {
        self.signals.value[Signals::idx(signal)].store(0, Ordering::SeqCst);
    }
    fn copy_time(&self, signal: u64) -> Option<(u64, u64)> {
        self.dispatch_time(0, signal)
    }
    fn dispatch_time(&self, _agent: u64, signal: u64) -> Option<(u64, u64)> {
        let i = Signals::idx(signal);
        Some((
            self.signals.start[i].load(Ordering::Acquire),
            self.signals.end[i].load(Ordering::Acquire),
        ))
    }
}

/// Lanes of the device: [`Harness::submit`] puts queue `id`'s packets on
/// lane `id % LANES`.
const LANES: usize = 4;

/// An in-order device with [`LANES`] lanes, each run by its own thread:
/// each lane runs its packets one after the other, the lanes run at the same
/// time (as a GPU runs its queues), so a serializer that lets kernels of
/// different queues through together is seen overlapping (`max_running`).
struct FakeDevice {
    /// Lane 0 (tests that write packets by hand use it).
    ring: Mutex<VecDeque<RawPacket>>,
    /// Lanes 1.. .
    lanes: Vec<Mutex<VecDeque<RawPacket>>>,
    /// How long each kernel runs.
    kernel_ns: AtomicU64,
    /// Kernels running now, and the most at any time.
    running: AtomicU64,
    max_running: AtomicU64,
    signals: Arc<Signals>,
    stop: AtomicBool,
    /// While set, the device runs nothing (a busy GPU).
    paused: AtomicBool,
    kernels: AtomicU64,
    barriers: AtomicU64,
    gates: AtomicU64,
}

impl FakeDevice {
    fn lane(&self, lane: usize) -> &Mutex<VecDeque<RawPacket>> {
        if lane == 0 {
            &self.ring
        } else {
            &self.lanes[lane - 1]
        }
    }

    fn run(&self, lane: usize) {
        loop {
            if self.paused.load(Ordering::SeqCst) {
                std::thread::yield_now();
                continue;
            }
            let p = self.lane(lane).lock().unwrap().pop_front();
            let Some(p) = p else {
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::yield_now();
                continue;
            };
            if p.is_kernel_dispatch() {
                let start = boottime_ns();
                let end = start + self.kernel_ns.load(Ordering::Relaxed);
                self.kernels.fetch_add(1, Ordering::SeqCst);
                let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_running.fetch_max(now, Ordering::SeqCst);
                let s = p.completion_signal();
                if s != 0 {
                    let i = Signals::idx(s);
                    self.signals.start[i].store(start, Ordering::SeqCst);
                    self.signals.end[i].store(end, Ordering::SeqCst);
                }
                while boottime_ns() < end {
                    std::hint::spin_loop();
                }
                self.running.fetch_sub(1, Ordering::SeqCst);
                if s != 0 {
                    self.signals.value[Signals::idx(s)].fetch_sub(1, Ordering::SeqCst);
                }
            } else if p.packet_type() == HSA_PACKET_TYPE_BARRIER_AND {
                self.barriers.fetch_add(1, Ordering::SeqCst);
                for d in 0..5 {
                    let dep = p.dep_signal(d);
                    if dep == 0 {
                        continue;
                    }
                    self.gates.fetch_add(1, Ordering::SeqCst);
                    while self.signals.value[Signals::idx(dep)].load(Ordering::SeqCst) > 0 {
                        if self.stop.load(Ordering::SeqCst) {
                            return;
                        }
                        std::thread::yield_now();
                    }
                }
                let s = p.completion_signal();
                if s != 0 {
                    self.signals.value[Signals::idx(s)].fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }
}

#[derive(Default)]
struct Collected {
    /// Count records without keeping them (load tests: flat memory).
    count_only: bool,
    dispatch_count: u64,
    dispatch_id_sum: u64,
    max_dispatch_id: u64,
    intercept_count: u64,
    started: bool,
    intercepts: Vec<InterceptRecord>,
    dispatches: Vec<(DispatchRecord, String)>,
    copies: Vec<MemoryCopyRecord>,
    finished: Option<RunMetadata>,
    /// Every `.0`-th dispatch record, the writer stops for `.1` (a writer
    /// thread descheduled on a loaded machine).
    stall: Option<(u64, Duration)>,
}

struct CollectSink(Arc<Mutex<Collected>>);

impl RecordSink for CollectSink {
    /// In memory: never writes a file.
    fn spare_room(&self) -> usize {
        usize::MAX
    }
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        self.0.lock().unwrap().started = true;
        Ok(())
    }
    fn intercept(&mut self, rec: &InterceptRecord) -> std::io::Result<()> {
        let mut c = self.0.lock().unwrap();
        c.intercept_count += 1;
        if !c.count_only {
            c.intercepts.push(*rec);
        }
        Ok(())
    }
    fn dispatch(&mut self, rec: &DispatchRecord, kernel: &KernelInfo<'_>) -> std::io::Result<()> {
        let mut c = self.0.lock().unwrap();
        c.dispatch_count += 1;
        c.dispatch_id_sum += rec.dispatch_id;
        c.max_dispatch_id = c.max_dispatch_id.max(rec.dispatch_id);
        if !c.count_only {
            c.dispatches.push((*rec, kernel.display_name.to_string()));
        }
        if let Some((every, pause)) = c.stall {
            if c.dispatch_count % every == 0 {
                drop(c);
                std::thread::sleep(pause);
            }
        }
        Ok(())
    }
    fn memory_copy(&mut self, rec: &MemoryCopyRecord) -> std::io::Result<()> {
        self.0.lock().unwrap().copies.push(*rec);
        Ok(())
    }
    fn finish(&mut self, meta: &RunMetadata) -> std::io::Result<()> {
        self.0.lock().unwrap().finished = Some(*meta);
        Ok(())
    }
}

/// Names `kernel_<object>`, with an optional include/exclude pair.
#[derive(Default)]
struct Names {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

impl KernelNames for Names {
    fn with_kernel(
        &mut self,
        kernel_object: u64,
        _dispatch_id: u64,
        f: &mut dyn FnMut(&KernelInfo<'_>, bool),
    ) {
        let name = format!("kernel_{kernel_object:x}");
        let keep = self.include.as_ref().is_none_or(|r| r.is_match(&name))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(&name));
        let info = KernelInfo {
            kernel_id: kernel_object,
            display_name: &name,
            symbol_name: &name,
            resources: None,
        };
        f(&info, keep);
    }

    fn learn(&mut self, _: &LoadedKernels) {}
}

fn kernel_packet(kernel_object: u64, completion_signal: u64) -> RawPacket {
    let mut p = RawPacket::ZERO;
    let header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) as u16;
    p.bytes[0..2].copy_from_slice(&header.to_le_bytes());
    p.bytes[4..6].copy_from_slice(&64u16.to_le_bytes());
    p.bytes[12..16].copy_from_slice(&4096u32.to_le_bytes());
    p.bytes[32..40].copy_from_slice(&kernel_object.to_le_bytes());
    p.set_completion_signal(completion_signal);
    p
}

fn other_packet() -> RawPacket {
    RawPacket::forwarding_barrier(0, 0)
}

struct Harness {
    engine: Arc<Engine<FakeSignal>>,
    device: Arc<FakeDevice>,
    signals: Arc<Signals>,
    pool: Arc<FakePool>,
    collected: Arc<Mutex<Collected>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    writer: Option<std::thread::JoinHandle<WriterOutcome>>,
}

impl Harness {
    fn new(pool_size: usize, names: Names) -> Self {
        Self::with_options(
            EngineOptions {
                pid: 42,
                max_in_flight: pool_size,
                handoff_queue: pool_size,
                max_copies_in_flight: pool_size,
                record_queue: 64,
                pool_wait: Duration::from_secs(20),
                min_backoff: Duration::from_micros(50),
                max_backoff: Duration::from_micros(500),
                lender_nap: Duration::from_millis(20),
                serialize: false,
                host_forwarding: false,
            },
            names,
        )
    }

    fn with_options(options: EngineOptions, names: impl KernelNames + Send + 'static) -> Self {
        let pool_size = options.max_in_flight;
        let signals = Signals::new();
        let pool = Arc::new(FakePool::new(signals.clone(), pool_size));
        let engine = Arc::new(Engine::new(options));
        let device = Arc::new(FakeDevice {
            ring: Mutex::new(VecDeque::new()),
            lanes: (1..LANES).map(|_| Mutex::new(VecDeque::new())).collect(),
            kernel_ns: AtomicU64::new(500),
            running: AtomicU64::new(0),
            max_running: AtomicU64::new(0),
            signals: signals.clone(),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            kernels: AtomicU64::new(0),
            barriers: AtomicU64::new(0),
            gates: AtomicU64::new(0),
        });
        let collected = Arc::new(Mutex::new(Collected::default()));
        let mut threads = Vec::new();
        for lane in 0..LANES {
            let d = device.clone();
            threads.push(std::thread::spawn(move || d.run(lane)));
        }
        let (e, b) = (
            engine.clone(),
            FakeBackend {
                signals: signals.clone(),
            },
        );
        threads.push(std::thread::spawn(move || e.run_completion(&b)));
        let (e, c) = (engine.clone(), collected.clone());
        let writer = std::thread::spawn(move || {
            let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![Box::new(CollectSink(c))];
            e.run_writer(&mut sinks, Box::new(names), &RunInfo::default(), &[])
        });
        Harness {
            engine,
            device,
            signals,
            pool,
            collected,
            threads,
            writer: Some(writer),
        }
    }

    fn submit(&self, queue: &Arc<QueueContext>, packets: &[RawPacket]) {
        self.submit_and_see(queue, packets, |_| {});
    }

    /// [`Harness::submit`], showing `see` the packets the engine writes.
    fn submit_and_see(
        &self,
        queue: &Arc<QueueContext>,
        packets: &[RawPacket],
        mut see: impl FnMut(&[RawPacket]),
    ) {
        let mut writes = 0;
        self.engine.intercept(queue, packets, &*self.pool, |out| {
            writes += 1;
            see(out);
            let lane = queue.queue_id as usize % LANES;
            self.device
                .lane(lane)
                .lock()
                .unwrap()
                .extend(out.iter().copied());
        });
        assert_eq!(writes, 1, "the writer must be called exactly once");
    }

    fn finish(mut self) -> (WriterOutcome, Collected, Arc<FakeDevice>) {
        let left = self.engine.begin_shutdown(Duration::from_secs(20));
        assert_eq!(left, 0);
        self.device.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
        self.engine.stop_writer();
        let outcome = self.writer.take().unwrap().join().unwrap();
        let collected = std::mem::take(&mut *self.collected.lock().unwrap());
        (outcome, collected, self.device.clone())
    }
}

/// A small harness whose writer names kernels through a live kernel table
/// (returned too), as the tool library's does.
fn harness_with_a_kernel_table() -> (Arc<KernelTable>, Harness) {
    let table = Arc::new(KernelTable::new(NamePolicy::default()));
    let h = Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 8,
            handoff_queue: 8,
            max_copies_in_flight: 0,
            record_queue: 64,
            pool_wait: Duration::from_secs(20),
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: false,
        },
        CachedKernelNames::new(table.clone()),
    );
    (table, h)
}

/// Kernels of a frozen executable reach the writer's table through the
/// engine before any dispatch of them is written, parsed and demangled on the
/// writer's thread.
#[test]
fn loaded_kernels_name_the_dispatches_queued_after_them() {
    let (table, h) = harness_with_a_kernel_table();
    let q = Arc::new(QueueContext::new(7, 0, 0));
    h.engine.push_loaded_kernels(LoadedKernels {
        symbols: vec![(0x1000, "_Z3fooi.kd".into()), (0x3000, "_Z3bard.kd".into())],
        notes: Vec::new(),
        unreadable: None,
        first_dispatch_id: 0,
    });
    h.submit(&q, &[kernel_packet(0x1000, 0), kernel_packet(0x2000, 0)]);
    h.submit(&q, &[kernel_packet(0x3000, 0)]);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 3);
    let mut names: Vec<(u64, String)> = got
        .dispatches
        .iter()
        .map(|(d, name)| (d.kernel_object, name.clone()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            (0x1000, "foo(int)".to_string()),
            (0x2000, "unknown_kernel_0x2000".to_string()),
            (0x3000, "bar(double)".to_string()),
        ]
    );
    assert_eq!(table.len(), 3);
}

/// An executable unloaded and another loaded at the same address (ROCr's
/// allocator reuses the freed block; hipModuleUnload then hipModuleLoad, as
/// JIT compilers do): a dispatch of the first one whose record is written
/// only after the second was learned keeps its own kernel's name, and the
/// second's dispatches get theirs.
#[test]
fn a_kernel_object_reused_by_a_later_executable_names_each_dispatch_after_its_own() {
    let (table, h) = harness_with_a_kernel_table();
    let q = Arc::new(QueueContext::new(7, 0, 0));
    // The engine sets the first dispatch id.
    let executable = |symbol: &str| LoadedKernels {
        symbols: vec![(0x1000, symbol.into())],
        ..LoadedKernels::default()
    };
    h.engine.push_loaded_kernels(executable("_Z5alphav.kd"));
    // The first executable's dispatch is not retired before the second
    // executable is learned.
    h.device.paused.store(true, Ordering::SeqCst);
    h.submit(&q, &[kernel_packet(0x1000, 0)]);
    h.engine.push_loaded_kernels(executable("_Z5gammav.kd"));
    h.device.paused.store(false, Ordering::SeqCst);
    h.submit(&q, &[kernel_packet(0x1000, 0)]);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 2);
    let mut names: Vec<(u64, String)> = got
        .dispatches
        .iter()
        .map(|(d, name)| (d.dispatch_id, name.clone()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [(1, "alpha()".to_string()), (2, "gamma()".to_string())]
    );
    // One kernel object: the newest entry, which keeps the one it replaced.
    assert_eq!(table.len(), 1);
}

/// The hand-off queue to the completion thread is much smaller than the
/// pool: bursts wait for room instead of losing dispatches.
#[test]
fn a_hand_off_queue_smaller_than_the_pool_loses_nothing() {
    const THREADS: u64 = 4;
    const CALLS: u64 = 200;
    let h = Arc::new(Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 256,
            handoff_queue: 2,
            max_copies_in_flight: 0,
            record_queue: 64,
            pool_wait: Duration::from_secs(20),
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: false,
        },
        Names::default(),
    ));
    assert_eq!(h.engine.pending.capacity(), 2);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let h = h.clone();
            std::thread::spawn(move || {
                let q = Arc::new(QueueContext::new(100 + t, t as u32, 0));
                for n in 0..CALLS {
                    let pkts: Vec<RawPacket> = (0..n % 7 + 1)
                        .map(|j| kernel_packet(0x1000 * (j + 1), 0))
                        .collect();
                    h.submit(&q, &pkts);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let h = Arc::try_unwrap(h).ok().expect("workers are done");
    let pool = h.pool.clone();
    let (outcome, got, device) = h.finish();
    let expected = THREADS * (0..CALLS).map(|n| n % 7 + 1).sum::<u64>();
    assert_eq!(got.dispatches.len() as u64, expected);
    assert_eq!(outcome.metadata.dispatches, expected);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(device.kernels.load(Ordering::SeqCst), expected);
    assert_eq!(pool.available(), 256, "every pooled signal came back");
    let ids: HashSet<u64> = got.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(ids, (1..=expected).collect::<HashSet<u64>>());
}

#[test]
fn every_dispatch_is_recorded_once_across_threads_with_a_tiny_pool() {
    const THREADS: u64 = 4;
    const CALLS: u64 = 300;
    let h = Arc::new(Harness::new(8, Names::default()));
    let app_base = 1000u64;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let h = h.clone();
            std::thread::spawn(move || {
                let q = Arc::new(QueueContext::new(100 + t, t as u32, 0));
                let app_signal = app_base + t;
                for n in 0..CALLS {
                    // Mixed batches: 1..3 kernels, some with the app's own
                    // signal, plus a non-kernel packet now and then.
                    let k = n % 3 + 1;
                    let mut pkts: Vec<RawPacket> = Vec::new();
                    for j in 0..k {
                        let sig = if j == k - 1 && n % 2 == 0 {
                            app_signal
                        } else {
                            0
                        };
                        if sig != 0 {
                            h.signals.value[Signals::idx(sig)].store(1, Ordering::SeqCst);
                        }
                        pkts.push(kernel_packet(0x1000 * (j + 1), sig));
                    }
                    if n % 5 == 0 {
                        pkts.push(other_packet());
                    }
                    h.submit(&q, &pkts);
                    if n % 2 == 0 {
                        // The app waits on its own signal: must complete.
                        let t0 = Instant::now();
                        while h.signals.value[Signals::idx(app_signal)].load(Ordering::SeqCst) > 0 {
                            assert!(
                                t0.elapsed() < Duration::from_secs(20),
                                "app signal never completed"
                            );
                            std::thread::yield_now();
                        }
                    }
                }
                q
            })
        })
        .collect();
    let queues: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let h = Arc::try_unwrap(h).ok().expect("workers are done");
    let pool = h.pool.clone();
    let (outcome, got, device) = h.finish();
    assert_eq!(pool.available(), 8, "every pooled signal came back");
    let per_thread: u64 = (0..CALLS).map(|n| n % 3 + 1).sum();
    let expected = THREADS * per_thread;
    assert_eq!(got.dispatches.len() as u64, expected);
    assert_eq!(outcome.metadata.dispatches, expected);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(got.intercepts.len() as u64, THREADS * CALLS);
    assert!(got.started && got.finished.is_some());
    assert_eq!(device.kernels.load(Ordering::SeqCst), expected);
    // One forwarding barrier per kernel with an app signal, plus the others.
    let forwarded = THREADS * (CALLS / 2);
    let others = THREADS * (0..CALLS).filter(|n| n % 5 == 0).count() as u64;
    assert_eq!(device.barriers.load(Ordering::SeqCst), forwarded + others);
    let corr: HashSet<u64> = got
        .dispatches
        .iter()
        .map(|(d, _)| d.correlation_id)
        .collect();
    let disp: HashSet<u64> = got.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(corr.len() as u64, expected);
    assert_eq!(disp, (1..=expected).collect::<HashSet<u64>>());
    for (d, name) in &got.dispatches {
        assert_eq!(d.correlation_id >> 32, 42);
        assert!(
            d.enqueue_ns <= d.start_ns && d.start_ns <= d.end_ns,
            "{d:?}"
        );
        assert_eq!(d.grid, [4096, 0, 0]);
        assert_eq!(d.workgroup[0], 64);
        assert_eq!(name, &format!("kernel_{:x}", d.kernel_object));
        assert!(queues.iter().any(|q| q.queue_id == d.queue_id));
    }
    for q in &queues {
        assert_eq!(q.slots_in_use(), 0);
    }
    // Intercept records point at their dispatches.
    let total: u64 = got
        .intercepts
        .iter()
        .map(|i| u64::from(i.dispatch_count))
        .sum();
    assert_eq!(total, expected);
    for i in &got.intercepts {
        assert!(i.begin_ns <= i.end_ns);
        assert!(corr.contains(&i.first_correlation_id));
    }
}

#[test]
fn non_kernel_batches_pass_through_untouched() {
    let h = Harness::new(4, Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let pkts = [other_packet(), RawPacket::forwarding_barrier(1234, 2)];
    let mut seen = Vec::new();
    h.engine
        .intercept(&q, &pkts, &*h.pool, |out| seen.extend_from_slice(out));
    assert_eq!(seen, pkts);
    let (outcome, got, _) = h.finish();
    assert!(got.intercepts.is_empty());
    assert_eq!(outcome.metadata.dispatches, 0);
}

#[test]
fn rewrite_keeps_order_and_forwards_the_app_signal() {
    let h = Harness::new(4, Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let pkts = [
        kernel_packet(0x10, 0),
        other_packet(),
        kernel_packet(0x20, 3000),
    ];
    h.signals.value[Signals::idx(3000)].store(1, Ordering::SeqCst);
    let mut seen = Vec::new();
    h.engine.intercept(&q, &pkts, &*h.pool, |out| {
        seen.extend_from_slice(out);
        h.device.ring.lock().unwrap().extend(out.iter().copied());
    });
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0].kernel_object(), 0x10);
    assert!(seen[0].completion_signal() >= 1 && seen[0].completion_signal() <= 4);
    assert_eq!(seen[1], other_packet());
    assert_eq!(seen[2].kernel_object(), 0x20);
    assert_ne!(seen[2].completion_signal(), 3000);
    assert_eq!(seen[3].packet_type(), HSA_PACKET_TYPE_BARRIER_AND);
    assert!(seen[3].barrier_bit());
    assert_eq!(seen[3].completion_signal(), 3000);
    let (_, got, _) = h.finish();
    assert_eq!(got.dispatches.len(), 2);
}

/// A call of one kernel (ROCr 5.2.3 calls the interceptor once per packet)
/// takes the interceptor's single-kernel path: the device gets the kernel
/// with a pooled signal and, for an app signal, the forwarding barrier; each
/// call's record is exact and names its own kernel, on its own queue.
#[test]
fn single_kernel_calls_are_rewritten_and_recorded_exactly() {
    const CALLS: u64 = 40;
    let h = Harness::new(8, Names::default());
    let queues = [
        Arc::new(QueueContext::new(1, 0, 0)),
        Arc::new(QueueContext::new(2, 1, 0)),
    ];
    for n in 0..CALLS {
        let q = &queues[(n % 2) as usize];
        let app = if n % 4 < 2 { 0 } else { 3000 + n };
        if app != 0 {
            h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
        }
        let p = kernel_packet(0x100 + n, app);
        let mut seen = Vec::new();
        h.submit_and_see(q, &[p], |out| seen.extend_from_slice(out));
        assert_eq!(seen.len(), if app != 0 { 2 } else { 1 }, "call {n}");
        assert_eq!(seen[0].kernel_object(), 0x100 + n);
        let pooled = seen[0].completion_signal();
        assert!((1..=8).contains(&pooled), "call {n}: signal {pooled}");
        if app != 0 {
            assert_eq!(seen[1].packet_type(), HSA_PACKET_TYPE_BARRIER_AND);
            assert!(seen[1].barrier_bit());
            assert_eq!(seen[1].completion_signal(), app);
        }
    }
    let (outcome, got, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, CALLS);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(device.kernels.load(Ordering::SeqCst), CALLS);
    assert_eq!(device.barriers.load(Ordering::SeqCst), CALLS / 2);
    assert_eq!(got.dispatches.len() as u64, CALLS);
    assert_eq!(got.intercepts.len() as u64, CALLS);
    let by_correlation: HashMap<u64, &DispatchRecord> = got
        .dispatches
        .iter()
        .map(|(d, _)| (d.correlation_id, d))
        .collect();
    let mut calls: Vec<(u64, u64, u64)> = Vec::new();
    for i in &got.intercepts {
        assert_eq!((i.packet_count, i.dispatch_count), (1, 1));
        let d = by_correlation[&i.first_correlation_id];
        assert_eq!(i.queue_id, d.queue_id);
        assert_eq!(i.agent_index, d.agent_index);
        assert_eq!(i.agent_index as u64, d.queue_id - 1);
        assert_eq!(i.thread_id, d.thread_id);
        assert_eq!(i.begin_ns, d.enqueue_ns);
        assert!(i.begin_ns <= i.end_ns);
        assert_eq!((d.grid, d.workgroup), ([4096, 0, 0], [64, 0, 0]));
        calls.push((d.dispatch_id, d.kernel_object, d.queue_id));
    }
    calls.sort_unstable();
    // Call n: dispatch n + 1, kernel 0x100 + n, queue 1 or 2 by turns.
    let expected: Vec<(u64, u64, u64)> =
        (0..CALLS).map(|n| (n + 1, 0x100 + n, n % 2 + 1)).collect();
    assert_eq!(calls, expected);
}

#[test]
fn large_batches_work() {
    let h = Harness::new(256, Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let pkts: Vec<RawPacket> = (0..200).map(|i| kernel_packet(0x100 + i, 0)).collect();
    h.submit(&q, &pkts);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 200);
    assert_eq!(got.intercepts.len(), 1);
    assert_eq!(got.intercepts[0].dispatch_count, 200);
    assert_eq!(got.intercepts[0].packet_count, 200);
}

#[test]
fn filters_apply_to_the_trace() {
    let filter = Names {
        include: Some(Regex::new("kernel_(1|2)").unwrap()),
        exclude: Some(Regex::new("_2").unwrap()),
    };
    let h = Harness::new(16, filter);
    let q = Arc::new(QueueContext::new(1, 0, 0));
    for i in 0..30u64 {
        h.submit(&q, &[kernel_packet(i % 3 + 1, 0)]);
    }
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 10);
    assert_eq!(outcome.metadata.filtered_out, 20);
    assert!(got.dispatches.iter().all(|(_, n)| n == "kernel_1"));
}

use regex::Regex;

#[test]
fn clamping() {
    // In range: untouched.
    assert_eq!(
        clamp_times(10, 100, Some((20, 30))),
        ((20, 30), false, false)
    );
    // Start before enqueue, end after observation.
    assert_eq!(
        clamp_times(10, 100, Some((5, 150))),
        ((10, 100), true, true)
    );
    // End before start.
    assert_eq!(
        clamp_times(10, 100, Some((50, 40))),
        ((50, 50), false, true)
    );
    // No times at all.
    assert_eq!(clamp_times(10, 100, None), ((10, 100), true, true));
}

/// An engine with no completion or writer thread, room for 4 dispatches
/// and `handoff_queue` hand-offs, whose interceptor waits 30 ms for a
/// signal or a hand-off before giving up.
fn engine_waiting_30_ms(handoff_queue: usize) -> Engine<FakeSignal> {
    Engine::new(EngineOptions {
        pid: 1,
        max_in_flight: 4,
        handoff_queue,
        max_copies_in_flight: 4,
        record_queue: 16,
        pool_wait: Duration::from_millis(30),
        min_backoff: Duration::from_micros(100),
        max_backoff: Duration::from_millis(1),
        lender_nap: Duration::from_millis(20),
        serialize: false,
        host_forwarding: false,
    })
}

#[test]
fn an_exhausted_pool_passes_dispatches_through_after_the_wait() {
    // A pool nobody refills: dispatches wait `pool_wait`, then go untraced
    // and are counted as lost; the app is never stuck.
    let engine = engine_waiting_30_ms(4);
    let signals = Signals::new();
    let pool = FakePool::new(signals, 1);
    let held = pool.try_acquire().unwrap();
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let pkt = kernel_packet(1, 0);
    let mut out = Vec::new();
    let t0 = Instant::now();
    engine.intercept(&q, &[pkt], &pool, |o| out.extend_from_slice(o));
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert_eq!(out, [pkt]);
    assert_eq!(engine.counters().lost.load(Ordering::SeqCst), 1);
    assert_eq!(engine.in_flight(), 0);
    drop(held);
}

/// A call whose dispatch cannot be handed to the completion thread (the
/// hand-off queue stayed full for `pool_wait`) loses the dispatch, counted,
/// but not the call: its interceptor record, which rides with the call's
/// first dispatch, goes to the writer from the app's thread.
#[test]
fn a_dispatch_the_completion_thread_never_takes_keeps_its_call_record() {
    let engine = engine_waiting_30_ms(1);
    let pool = FakePool::new(Signals::new(), 4);
    let q = Arc::new(QueueContext::new(1, 0, 0));
    // No completion thread: the first dispatch fills the hand-off queue.
    engine.intercept(&q, &[kernel_packet(1, 0)], &pool, |_| {});
    assert_eq!(engine.records_queued(), 0);
    let t0 = Instant::now();
    engine.intercept(&q, &[kernel_packet(1, 0)], &pool, |_| {});
    assert!(t0.elapsed() >= Duration::from_millis(30));
    assert_eq!(engine.counters().lost.load(Ordering::SeqCst), 1);
    assert_eq!(engine.records_queued(), 1);
}

/// The one packet the device ring may hold beyond a queue's slot limit: the
/// guard frees a kernel's forwarding barrier with the kernel, when the
/// completion thread sees the kernel's signal, but the device may not have
/// taken the barrier out of the ring yet (it is the packet right after the
/// kernel, so there is at most one). It stays within the quarter of the ring
/// the guard leaves free. CI once saw 13 of 12 this way on a loaded machine.
const LINGERING_FORWARDING_BARRIER: usize = 1;

#[test]
fn traced_packets_never_fill_more_than_three_quarters_of_the_ring() {
    let h = Harness::new(64, Names::default());
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 16));
    let mut max_backlog = 0;
    for i in 0..200u64 {
        let app = if i % 2 == 0 { 2000 } else { 0 };
        let pkt = kernel_packet(1, app);
        h.engine.intercept(&q, &[pkt], &*h.pool, |out| {
            let mut ring = h.device.ring.lock().unwrap();
            ring.extend(out.iter().copied());
            max_backlog = max_backlog.max(ring.len());
        });
        assert!(q.slots_in_use() <= 12, "{} slots in use", q.slots_in_use());
    }
    let (outcome, _, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 200);
    assert!(
        max_backlog <= 12 + LINGERING_FORWARDING_BARRIER,
        "device backlog reached {max_backlog}"
    );
    assert_eq!(q.slots_in_use(), 0);
}

/// Benchmark (prints figures; run with `cargo test -p rprof-core --release
/// --lib bench_ -- --ignored --nocapture`): the interceptor's own cost per
/// single-kernel call, against a pool whose signals are recycled as soon as
/// the completion thread sees them, with a device that completes at once.
#[test]
#[ignore]
fn bench_interceptor_cost_per_dispatch() {
    const CALLS: u64 = 200_000;
    let h = Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 4096,
            handoff_queue: 4096,
            max_copies_in_flight: 4096,
            ..EngineOptions::default()
        },
        Names::default(),
    );
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 4096));
    let pkt_plain = kernel_packet(1, 0);
    let pkt_signal = kernel_packet(2, 3000);
    let mut buf: Vec<RawPacket> = Vec::with_capacity(4);
    let thread_cpu = || rprof_abi::clock::now_ns(rprof_abi::clock::Clock::ThreadCpu);
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    for i in 0..CALLS {
        let pkt = if i % 4 == 0 { pkt_signal } else { pkt_plain };
        h.engine.intercept(&q, &[pkt], &*h.pool, |out| {
            buf.clear();
            buf.extend_from_slice(out);
        });
        // Complete it right away, as a fast device would.
        let s = buf[0].completion_signal();
        h.signals.value[Signals::idx(s)].store(0, Ordering::SeqCst);
    }
    let per_call = t0.elapsed().as_nanos() as f64 / CALLS as f64;
    let cpu_per_call = (thread_cpu() - cpu0) as f64 / CALLS as f64;
    let (outcome, _, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, CALLS);
    println!(
        "interceptor: {per_call:.0} ns wall, {cpu_per_call:.0} ns CPU of the calling thread per single-kernel call (engine only, {CALLS} calls, 1 in 4 forwarded)"
    );
}

#[test]
fn serialized_dispatches_pass_their_gates_one_at_a_time() {
    let (outcome, got, device, pool) = three_queues_of_kernels(true);
    let n = 3 * 100;
    assert_eq!(outcome.metadata.dispatches, n);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(device.kernels.load(Ordering::SeqCst), n);
    // Each kernel: a ready barrier and a gate barrier in front of it.
    assert_eq!(device.barriers.load(Ordering::SeqCst), 2 * n);
    assert_eq!(device.gates.load(Ordering::SeqCst), n);
    assert_eq!(got.dispatches.len() as u64, n);
    assert_eq!(pool.available(), 120, "every pooled signal came back");
    // The device runs the three queues at once: only the gates keep their
    // kernels apart.
    assert_eq!(device.max_running.load(Ordering::SeqCst), 1);
    let mut spans: Vec<(u64, u64)> = got
        .dispatches
        .iter()
        .map(|(d, _)| (d.start_ns, d.end_ns))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap: {:?} {:?}", w[0], w[1]);
    }
}

#[test]
fn without_serialization_the_fake_device_runs_queues_at_once() {
    // The control of the test above: the same load unserialized overlaps,
    // so the device can show a serializer that lets kernels through together.
    let (outcome, _, device, _) = three_queues_of_kernels(false);
    assert_eq!(outcome.metadata.dispatches, 300);
    assert!(
        device.max_running.load(Ordering::SeqCst) > 1,
        "kernels of three queues never overlapped"
    );
}

/// Three threads, each with its own queue (lanes 2, 3, 0 of the device),
/// submit 100 kernels of 0.5 ms each (longer than the completion thread's polling interval, so gates opened too early overlap); 120 pooled signals (a smaller pool
/// lets one queue take every signal and starve the others, which hides a
/// serializer letting kernels of several queues through together).
fn three_queues_of_kernels(
    serialize: bool,
) -> (WriterOutcome, Collected, Arc<FakeDevice>, Arc<FakePool>) {
    const THREADS: u64 = 3;
    const CALLS: u64 = 100;
    let h = Arc::new(Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 120,
            handoff_queue: 120,
            max_copies_in_flight: 120,
            record_queue: 64,
            pool_wait: Duration::from_secs(20),
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize,
            host_forwarding: false,
        },
        Names::default(),
    ));
    h.device.kernel_ns.store(500_000, Ordering::SeqCst);
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let h = h.clone();
            std::thread::spawn(move || {
                let q = Arc::new(QueueContext::with_ring(10 + t, 0, 0, 64));
                for n in 0..CALLS {
                    h.submit(&q, &[kernel_packet(n % 2 + 1, 0)]);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let h = Arc::try_unwrap(h).ok().expect("workers are done");
    let pool = h.pool.clone();
    let (outcome, got, device) = h.finish();
    (outcome, got, device, pool)
}

#[test]
fn a_batch_larger_than_the_pool_traces_what_fits_without_waiting() {
    let h = Harness::new(4, Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let pkts: Vec<RawPacket> = (0..10).map(|i| kernel_packet(0x100 + i, 0)).collect();
    let t0 = Instant::now();
    h.submit(&q, &pkts);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "must not wait for signals that cannot come"
    );
    let (outcome, got, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 4);
    assert_eq!(outcome.metadata.records_lost, 6);
    assert_eq!(got.intercepts[0].dispatch_count, 10);
    assert_eq!(
        device.kernels.load(Ordering::SeqCst),
        10,
        "untraced kernels still run"
    );
}

struct PanickingSink;

impl RecordSink for PanickingSink {
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        Ok(())
    }
    fn intercept(&mut self, _rec: &InterceptRecord) -> std::io::Result<()> {
        Ok(())
    }
    fn dispatch(&mut self, _rec: &DispatchRecord, _k: &KernelInfo<'_>) -> std::io::Result<()> {
        panic!("sink bug");
    }
    fn finish(&mut self, _meta: &RunMetadata) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_dead_writer_thread_never_stalls_the_app() {
    let signals = Signals::new();
    let pool = Arc::new(FakePool::new(signals.clone(), 8));
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        pid: 1,
        max_in_flight: 8,
        handoff_queue: 8,
        max_copies_in_flight: 8,
        record_queue: 4,
        pool_wait: Duration::from_secs(20),
        min_backoff: Duration::from_micros(50),
        max_backoff: Duration::from_micros(500),
        lender_nap: Duration::from_millis(20),
        serialize: false,
        host_forwarding: false,
    }));
    let (e, b) = (
        engine.clone(),
        FakeBackend {
            signals: signals.clone(),
        },
    );
    let completion = std::thread::spawn(move || e.run_completion(&b));
    let e = engine.clone();
    let writer = std::thread::spawn(move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![Box::new(PanickingSink)];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.run_writer(
                &mut sinks,
                Box::new(Names::default()),
                &RunInfo::default(),
                &[],
            )
        }));
        if r.is_err() {
            e.writer_failed();
        }
    });
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let t0 = Instant::now();
    for _ in 0..200 {
        engine.intercept(&q, &[kernel_packet(1, 0)], &*pool, |out| {
            // An instant device.
            for p in out {
                let s = p.completion_signal();
                if s != 0 && s < 1000 {
                    signals.value[Signals::idx(s)].store(0, Ordering::SeqCst);
                }
            }
        });
    }
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "interceptors stalled behind a dead writer"
    );
    writer.join().unwrap();
    assert!(!engine.is_tracing());
    engine.begin_shutdown(Duration::from_secs(5));
    completion.join().unwrap();
    assert_eq!(engine.in_flight(), 0);
}

#[test]
fn host_forwarding_completes_the_app_signal_without_a_barrier() {
    let h = Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 8,
            handoff_queue: 8,
            max_copies_in_flight: 8,
            record_queue: 64,
            pool_wait: Duration::from_secs(20),
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: true,
        },
        Names::default(),
    );
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let app = 2500u64;
    for _ in 0..50 {
        h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
        h.submit(&q, &[kernel_packet(1, app)]);
        let t0 = Instant::now();
        while h.signals.value[Signals::idx(app)].load(Ordering::SeqCst) > 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "app signal never completed"
            );
            std::thread::yield_now();
        }
    }
    let (outcome, _, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 50);
    assert_eq!(device.barriers.load(Ordering::SeqCst), 0);
}

/// The app's signal completed by a forwarding barrier: once the kernel is
/// retired, the engine knows the kernel's times for that signal (what the
/// tool answers the app's timestamp query with); a packet the app sends
/// later with the same signal makes them unknown again.
#[test]
fn a_barrier_forwarded_signal_keeps_its_kernels_times() {
    let (_table, h) = harness_with_a_kernel_table();
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let app = 2600u64;
    h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
    h.submit(&q, &[kernel_packet(1, app)]);
    let t0 = Instant::now();
    let times = loop {
        if let ForwardedKernel::Times(start, end) = h.engine.forwarded_kernel(app) {
            break (start, end);
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "never retired");
        std::thread::yield_now();
    };
    // The app's own barrier packet with the same signal.
    let mut barrier = RawPacket::ZERO;
    barrier.set_header((HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE) as u16);
    barrier.set_completion_signal(app);
    h.submit(&q, &[barrier]);
    assert_eq!(h.engine.forwarded_kernel(app), ForwardedKernel::Unknown);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 1);
    let d = &got.dispatches[0].0;
    assert_eq!((d.start_ns, d.end_ns), times, "the record's own times");
}

#[test]
fn kernel_table_names_and_filters_the_writer_sees() {
    use crate::kernels::{KernelTable, NamePolicy};
    let table = Arc::new(KernelTable::new(NamePolicy {
        truncate: false,
        include: None,
        exclude: Some(Regex::new("^skip").unwrap()),
    }));
    table.insert(0x10, "keep_me.kd");
    table.insert(0x20, "skip_me.kd");
    let mut names = CachedKernelNames::new(table);
    let mut seen = Vec::new();
    for object in [0x10u64, 0x20, 0x30] {
        names.with_kernel(object, 1, &mut |k, keep| {
            seen.push((k.display_name.to_string(), k.kernel_id != 0, keep))
        });
    }
    assert_eq!(seen[0], ("keep_me".to_string(), true, true));
    assert_eq!(seen[1], ("skip_me".to_string(), true, false));
    assert!(
        seen[2].0.contains("0x30"),
        "unknown kernels get a placeholder name: {:?}",
        seen[2]
    );
}

// ---------------------------------------------------------------------------
// Batches as ROCr >= 6 delivers them to a rewriter that is not the first one:
// another tool's rewriter registered after rprof runs before it and hands it,
// through its writer, any number of packets per call, may call that writer
// more than once per application packet, and puts intercept markers (vendor
// packets of format 0xFE) right before the packets they mark. ROCr itself
// still calls the first rewriter once per packet (intercept_queue.cpp of
// 6.1.2 and 6.4: `handler.first(&ring[i & mask], 1, i, ...)`).
// ---------------------------------------------------------------------------

/// What ROCr >= 6's final submit does with a rewritten batch: every marker's
/// callback gets the hardware index of the next non-marker packet, markers
/// are dropped, the rest goes to the hardware ring. Returns the packets for
/// the device and `(marker tag, packet the marker landed on)` pairs.
fn rocr6_submit(out: &[RawPacket]) -> (Vec<RawPacket>, Vec<(u64, RawPacket)>) {
    let mut hw = Vec::new();
    let mut pending_tags = Vec::new();
    let mut marked = Vec::new();
    for p in out {
        if p.is_intercept_marker() {
            pending_tags.push(u64::from_le_bytes(p.bytes[16..24].try_into().unwrap()));
            continue;
        }
        for tag in pending_tags.drain(..) {
            marked.push((tag, *p));
        }
        hw.push(*p);
    }
    assert!(pending_tags.is_empty(), "a marker ended the batch");
    (hw, marked)
}

fn serial_options(serialize: bool) -> EngineOptions {
    EngineOptions {
        pid: 42,
        max_in_flight: 256,
        handoff_queue: 256,
        max_copies_in_flight: 256,
        record_queue: 64,
        pool_wait: Duration::from_secs(20),
        min_backoff: Duration::from_micros(50),
        max_backoff: Duration::from_micros(500),
        lender_nap: Duration::from_millis(20),
        serialize,
        host_forwarding: false,
    }
}

#[test]
fn serialization_barriers_go_in_front_of_intercept_markers() {
    let h = Harness::with_options(serial_options(true), Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let app = 3000u64;
    h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
    let pkts = [
        RawPacket::intercept_marker(1),
        kernel_packet(0x10, 0),
        other_packet(),
        RawPacket::intercept_marker(2),
        RawPacket::intercept_marker(3),
        kernel_packet(0x20, app),
    ];
    let mut seen = Vec::new();
    h.engine.intercept(&q, &pkts, &*h.pool, |out| {
        seen.extend_from_slice(out);
        let (hw, _) = rocr6_submit(out);
        h.device.ring.lock().unwrap().extend(hw);
    });
    // ready, gate, marker, kernel | other | ready, gate, marker, marker, kernel, forward
    assert_eq!(seen.len(), 11, "{seen:?}");
    assert_eq!(seen[2], pkts[0], "markers pass through unchanged");
    assert!(seen[3].is_kernel_dispatch() && seen[3].kernel_object() == 0x10);
    assert_eq!(seen[4], other_packet());
    assert_eq!(&seen[7..9], &pkts[3..5]);
    assert!(seen[9].is_kernel_dispatch() && seen[9].kernel_object() == 0x20);
    assert_eq!(seen[10].completion_signal(), app);
    for i in [0, 5] {
        assert!(seen[i].barrier_bit(), "ready barrier at {i}");
        assert_eq!(seen[i + 1].dep_signal(0), seen[i + 1].dep_signal(0));
        assert_ne!(seen[i + 1].dep_signal(0), 0, "gate barrier at {}", i + 1);
    }
    let (hw, marked) = rocr6_submit(&seen);
    assert_eq!(hw.len(), 8);
    // Every marker lands on the kernel it marked, not on rprof's barriers.
    let marked: Vec<(u64, u64)> = marked
        .iter()
        .map(|(tag, p)| {
            assert!(p.is_kernel_dispatch(), "marker {tag} landed on {p:?}");
            (*tag, p.kernel_object())
        })
        .collect();
    assert_eq!(marked, [(1, 0x10), (2, 0x20), (3, 0x20)]);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 2);
    assert_eq!(got.intercepts[0].packet_count, 6);
    assert_eq!(got.intercepts[0].dispatch_count, 2);
}

/// A rewriter in front of rprof: for application packet `n` it calls its
/// writer (rprof's interceptor) twice, with marked kernels, a barrier, and
/// an app signal on some kernels.
fn chained_rewriter_calls(n: u64, app: u64) -> [Vec<RawPacket>; 2] {
    [
        vec![
            RawPacket::intercept_marker(3 * n),
            kernel_packet(0x100 + n % 4, 0),
            other_packet(),
        ],
        vec![
            RawPacket::intercept_marker(3 * n + 1),
            kernel_packet(0x200, if n % 2 == 0 { app } else { 0 }),
            RawPacket::intercept_marker(3 * n + 2),
            kernel_packet(0x300, 0),
        ],
    ]
}

fn chained_rewriter_is_traced_exactly(serialize: bool) {
    const PACKETS: u64 = 150;
    let h = Harness::with_options(serial_options(serialize), Names::default());
    let q = Arc::new(QueueContext::with_ring(7, 0, 0, 64));
    let app = 3100u64;
    let mut marked_kernels = Vec::new();
    for n in 0..PACKETS {
        if n % 2 == 0 {
            h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
        }
        for call in chained_rewriter_calls(n, app) {
            let mut writes = 0;
            h.engine.intercept(&q, &call, &*h.pool, |out| {
                writes += 1;
                let (hw, marked) = rocr6_submit(out);
                for (tag, p) in marked {
                    assert!(p.is_kernel_dispatch(), "marker {tag} landed on {p:?}");
                    marked_kernels.push((tag, p.kernel_object()));
                }
                h.device.ring.lock().unwrap().extend(hw);
            });
            assert_eq!(writes, 1, "one writer call per interceptor call");
        }
        if n % 2 == 0 {
            let t0 = Instant::now();
            while h.signals.value[Signals::idx(app)].load(Ordering::SeqCst) > 0 {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "app signal never completed"
                );
                std::thread::yield_now();
            }
        }
    }
    let expected_marks: Vec<(u64, u64)> = (0..PACKETS)
        .flat_map(|n| {
            [
                (3 * n, 0x100 + n % 4),
                (3 * n + 1, 0x200),
                (3 * n + 2, 0x300),
            ]
        })
        .collect();
    assert_eq!(marked_kernels, expected_marks);
    let pool = h.pool.clone();
    let (outcome, got, device) = h.finish();
    let kernels = 3 * PACKETS;
    assert_eq!(outcome.metadata.dispatches, kernels);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(device.kernels.load(Ordering::SeqCst), kernels);
    assert_eq!(got.intercepts.len() as u64, 2 * PACKETS);
    let per_call: Vec<(u32, u32)> = got
        .intercepts
        .iter()
        .map(|i| (i.packet_count, i.dispatch_count))
        .collect();
    assert_eq!(per_call, [(3, 1), (4, 2)].repeat(PACKETS as usize));
    let ids: HashSet<u64> = got.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(ids, (1..=kernels).collect::<HashSet<u64>>());
    let corr: HashSet<u64> = got
        .dispatches
        .iter()
        .map(|(d, _)| d.correlation_id)
        .collect();
    assert_eq!(corr.len() as u64, kernels);
    // Barriers on the device: the rewriter's own, one forward per app
    // signal, and two per kernel when serialized.
    let forwards = PACKETS / 2;
    let serial = if serialize { 2 * kernels } else { 0 };
    assert_eq!(
        device.barriers.load(Ordering::SeqCst),
        PACKETS + forwards + serial
    );
    assert_eq!(pool.available(), 256, "every pooled signal came back");
    assert_eq!(q.slots_in_use(), 0);
}

#[test]
fn chained_rewriter_batches_with_markers_are_traced_exactly() {
    chained_rewriter_is_traced_exactly(false);
}

#[test]
fn chained_rewriter_batches_with_markers_are_traced_exactly_when_serialized() {
    chained_rewriter_is_traced_exactly(true);
}

#[test]
fn a_batch_needing_more_slots_than_the_ring_allows_waits_only_for_the_queue_to_drain() {
    let h = Harness::with_options(
        EngineOptions {
            pool_wait: Duration::from_secs(4),
            ..serial_options(false)
        },
        Names::default(),
    );
    // 16-packet ring: rprof keeps at most 12 traced slots.
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 16));
    // The device stalls on an app barrier until `hold` is released, so one
    // traced kernel stays in flight.
    let hold = 3200u64;
    h.signals.value[Signals::idx(hold)].store(1, Ordering::SeqCst);
    h.submit(&q, &[RawPacket::gate_barrier(hold), kernel_packet(1, 0)]);
    assert_eq!(q.slots_in_use(), 1);
    let signals = h.signals.clone();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        signals.value[Signals::idx(hold)].store(0, Ordering::SeqCst);
    });
    // 20 slots can never fit under 12: the call waits until the queue's
    // earlier traced packets are gone (not for the whole pool wait), then
    // writes (ROCr >= 6 submits what fits and the rest after a retry).
    let big: Vec<RawPacket> = (0..20).map(|i| kernel_packet(0x40 + i, 0)).collect();
    let t0 = Instant::now();
    h.submit(&q, &big);
    let waited = t0.elapsed();
    release.join().unwrap();
    assert!(
        waited >= Duration::from_millis(250),
        "did not wait for the queue: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(2),
        "waited {waited:?} for room that never comes"
    );
    let (outcome, _, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 21);
    assert_eq!(outcome.metadata.records_lost, 0);
}

/// Counts heap allocations made by the current thread while enabled.
struct CountingAlloc;

thread_local! {
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the
// thread-local counters are const-initialised `Cell`s without destructors,
// so touching them never allocates or recurses.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: as for `alloc` / `dealloc`.
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Heap allocations made by this thread while `f` runs.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(|a| a.get())
}

fn long_batches_allocate_nothing(serialize: bool) {
    let h = Harness::with_options(
        EngineOptions {
            max_in_flight: 1024,
            handoff_queue: 1024,
            max_copies_in_flight: 1024,
            ..serial_options(serialize)
        },
        Names::default(),
    );
    // Room for everything the device has not run yet, so the fake device's
    // ring never grows on this thread.
    h.device.ring.lock().unwrap().reserve(1 << 16);
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 4096));
    let app = 3300u64;
    // 40 kernels (every 4th with an app signal), markers and barriers: well
    // past the inline 16 packets / 8 dispatches.
    let mut batch = Vec::new();
    for i in 0..40u64 {
        if i % 5 == 0 {
            batch.push(RawPacket::intercept_marker(i));
        }
        batch.push(kernel_packet(0x500 + i, if i % 4 == 0 { app } else { 0 }));
        if i % 7 == 0 {
            batch.push(other_packet());
        }
    }
    let submit = |h: &Harness| {
        h.engine.intercept(&q, &batch, &*h.pool, |out| {
            let mut ring = h.device.ring.lock().unwrap();
            ring.extend(out.iter().filter(|p| !p.is_intercept_marker()).copied());
        });
        // Let the device catch up, so the signal pool never runs dry.
        let t0 = Instant::now();
        while q.has_work_in_flight() {
            assert!(t0.elapsed() < Duration::from_secs(20), "device stuck");
            std::thread::yield_now();
        }
    };
    // The first calls may set up reusable storage.
    for _ in 0..3 {
        submit(&h);
    }
    let calls = 20;
    let allocated = allocations_in(|| {
        for _ in 0..calls {
            submit(&h);
        }
    });
    assert_eq!(
        allocated, 0,
        "{allocated} heap allocations in {calls} interceptor calls of 40 kernels (serialize {serialize})"
    );
    let (outcome, _, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 40 * (3 + calls));
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(device.kernels.load(Ordering::SeqCst), 40 * (3 + calls));
}

#[test]
fn long_batches_allocate_nothing_in_steady_state() {
    long_batches_allocate_nothing(false);
}

#[test]
fn long_serialized_batches_allocate_nothing_in_steady_state() {
    long_batches_allocate_nothing(true);
}

/// A harness for the ring guard's stall tests: 64 signals, the given
/// `pool_wait` (the longest wait in all).
fn ring_guard_harness(pool_wait: Duration) -> Harness {
    Harness::with_options(
        EngineOptions {
            pid: 42,
            max_in_flight: 64,
            handoff_queue: 64,
            max_copies_in_flight: 64,
            record_queue: 64,
            pool_wait,
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: false,
        },
        Names::default(),
    )
}

/// A ring guard harness whose queue's 12 slots are taken (6 kernels with
/// their forwarding barriers) while the completion thread reads no signal;
/// reads resume after `pause` (the returned thread).
fn full_ring_with_reads_paused_for(
    pause: Duration,
) -> (Harness, Arc<QueueContext>, std::thread::JoinHandle<()>) {
    let h = ring_guard_harness(Duration::from_secs(10));
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 16));
    h.signals.reads_paused.store(true, Ordering::SeqCst);
    for _ in 0..6 {
        h.submit(&q, &[kernel_packet(1, 2000)]);
    }
    let signals = h.signals.clone();
    let resume = std::thread::spawn(move || {
        std::thread::sleep(pause);
        signals.reads_paused.store(false, Ordering::SeqCst);
    });
    (h, q, resume)
}

#[test]
fn a_completion_thread_kept_off_the_cpu_is_not_a_stuck_device() {
    // The device finishes every kernel, but the completion thread cannot
    // look for 1.5 s (an overloaded machine; valgrind runs one thread at a
    // time). The interceptor waiting for ring space meanwhile sees no slot
    // come back; that is no stall of the device: it keeps waiting, and its
    // kernel is traced once the completion thread runs again.
    let pause = Duration::from_millis(1500);
    let (h, q, resume) = full_ring_with_reads_paused_for(pause);
    let t = Instant::now();
    h.submit(&q, &[kernel_packet(1, 2000)]);
    let waited = t.elapsed();
    resume.join().unwrap();
    assert!(waited >= pause - Duration::from_millis(100), "{waited:?}");
    assert!(!q.ring_wait_gave_up());
    assert_eq!(h.engine.counters().lost.load(Ordering::SeqCst), 0);
    let (outcome, collected, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 7);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(collected.dispatches.len(), 7);
    assert_eq!(device.kernels.load(Ordering::SeqCst), 7);
}

/// Voluntary context switches of the calling thread so far (Linux).
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_ring_wait_sleeps_until_the_completion_thread_gives_slots_back() {
    // The interceptor waiting for ring space used to nap 50 µs at a time
    // (a sleep and a wake-up every ~100 µs, thousands per second of
    // waiting, each waking the completion thread every 16th time). It now
    // sleeps until the completion thread has given back the queue's
    // slots, looking by itself only every RING_WAIT_TICK.
    let pause = Duration::from_millis(300);
    let (h, q, resume) = full_ring_with_reads_paused_for(pause);
    let (t, switches) = (Instant::now(), voluntary_switches());
    h.submit(&q, &[kernel_packet(1, 2000)]);
    let (waited, slept) = (t.elapsed(), voluntary_switches() - switches);
    resume.join().unwrap();
    assert!(waited >= pause - Duration::from_millis(50), "{waited:?}");
    assert!(waited < pause + Duration::from_millis(500), "{waited:?}");
    // 300 ms at one look per 2 ms tick is 150; 50 µs naps were thousands.
    assert!(slept < 600, "{slept} sleeps in {waited:?}");
    let (outcome, collected, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 7);
    assert_eq!(collected.dispatches.len(), 7);
    assert_eq!(q.slots_in_use(), 0);
}

#[test]
fn a_queue_whose_head_waits_for_the_host_stops_waiting_for_ring_space_after_one_stall() {
    // The app's queue starts with a barrier on a host signal that the
    // submitting thread opens only after its launches; the device cannot
    // free ring slots until then. One wait of RING_STALL, then the queue
    // never waits again: the launches that do not fit pass through
    // untraced (counted lost).
    let h = ring_guard_harness(Duration::from_secs(3));
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 16)); // 12 slots
    let host_gate = 3000u64;
    h.submit(&q, &[RawPacket::gate_barrier(host_gate)]);
    let t0 = Instant::now();
    let mut call_times = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        h.submit(&q, &[kernel_packet(1, 2000)]);
        call_times.push(t.elapsed());
    }
    let took = t0.elapsed();
    // 6 kernels with their forwarding barriers fill the 12 slots; the 7th
    // waits RING_STALL; the last 3 do not wait at all.
    assert!(
        took < RING_STALL + Duration::from_millis(700),
        "took {took:?}"
    );
    assert!(call_times[6] >= RING_STALL, "{call_times:?}");
    for t in &call_times[7..] {
        assert!(*t < Duration::from_millis(100), "{call_times:?}");
    }
    assert!(q.ring_wait_gave_up());
    assert_eq!(h.engine.counters().lost.load(Ordering::SeqCst), 4);
    h.signals.value[Signals::idx(host_gate)].store(0, Ordering::SeqCst);
    let (outcome, collected, device) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 6);
    assert_eq!(outcome.metadata.records_lost, 4);
    assert_eq!(collected.dispatches.len(), 6);
    assert_eq!(device.kernels.load(Ordering::SeqCst), 10);
    assert_eq!(q.slots_in_use(), 0);
}

/// A pool whose first acquire stalls (the interceptor is past the tracing
/// check, preempted before it counts its dispatch in flight).
struct StallingSource {
    inner: Arc<FakePool>,
    first: AtomicBool,
    entered: std::sync::mpsc::SyncSender<()>,
}

impl SignalSource<FakeSignal> for StallingSource {
    fn try_acquire(&self) -> Option<FakeSignal> {
        if self.first.swap(false, Ordering::SeqCst) {
            let _ = self.entered.send(());
            std::thread::sleep(Duration::from_millis(300));
        }
        self.inner.try_acquire()
    }
    fn capacity(&self) -> usize {
        self.inner.capacity()
    }
}

#[test]
fn a_dispatch_past_the_tracing_check_when_shutdown_begins_is_recorded() {
    let h = Harness::new(8, Names::default());
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let source = StallingSource {
        inner: h.pool.clone(),
        first: AtomicBool::new(true),
        entered: tx,
    };
    let (engine, device) = (h.engine.clone(), h.device.clone());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let app = std::thread::spawn(move || {
        engine.intercept(&q, &[kernel_packet(1, 0)], &source, |out| {
            device.ring.lock().unwrap().extend(out.iter().copied());
        });
    });
    rx.recv().unwrap();
    // Shutdown begins while the call is inside the interceptor.
    let (outcome, collected, device) = h.finish();
    app.join().unwrap();
    assert_eq!(device.kernels.load(Ordering::SeqCst), 1);
    // It ran, so it is recorded (or, at worst, counted lost): never neither.
    assert_eq!(outcome.metadata.dispatches, 1);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(collected.dispatches.len(), 1);
    assert_eq!(collected.intercepts.len(), 1);
}

#[test]
fn the_ring_guard_holds_after_recording_stops_while_app_threads_keep_launching() {
    let mut h = Harness::new(64, Names::default());
    h.engine.keep_guard_after_stop();
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 16)); // 12 slots
    let stop = Arc::new(AtomicBool::new(false));
    let after_close = Arc::new(AtomicU64::new(0));
    let max_backlog = Arc::new(AtomicU64::new(0));
    let worker = {
        let (engine, device, pool, q, stop, after_close, max_backlog) = (
            h.engine.clone(),
            h.device.clone(),
            h.pool.clone(),
            q.clone(),
            stop.clone(),
            after_close.clone(),
            max_backlog.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let closed = engine.records_closed();
                engine.intercept(&q, &[kernel_packet(1, 2000)], &*pool, |out| {
                    // The guard's own count never passes the limit.
                    assert!(q.slots_in_use() <= 12, "{} slots in use", q.slots_in_use());
                    let mut ring = device.ring.lock().unwrap();
                    ring.extend(out.iter().copied());
                    max_backlog.fetch_max(ring.len() as u64, Ordering::SeqCst);
                });
                if closed {
                    after_close.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    // The at-exit flush: stop recording, wait for what was recorded, let
    // the writer finish, while the app thread keeps launching.
    let t0 = Instant::now();
    let left = h.engine.begin_shutdown(Duration::from_secs(5));
    while !h.engine.records_closed() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(h.engine.records_closed());
    h.engine.stop_writer();
    let outcome = h.writer.take().unwrap().join().unwrap();
    let flush = t0.elapsed();
    // A busy device after the flush: the app thread keeps submitting.
    h.device.paused.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    h.device.paused.store(false, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::SeqCst);
    worker.join().unwrap();
    assert_eq!(left, 0);
    assert!(flush < Duration::from_millis(500), "flush took {flush:?}");
    assert!(after_close.load(Ordering::SeqCst) > 0);
    assert!(
        max_backlog.load(Ordering::SeqCst) <= 12 + LINGERING_FORWARDING_BARRIER as u64,
        "the device ring held {} packets of a 12-slot queue",
        max_backlog.load(Ordering::SeqCst)
    );
    let collected = std::mem::take(&mut *h.collected.lock().unwrap());
    let m = outcome.metadata;
    assert_eq!(m.records_lost, 0);
    assert_eq!(m.dispatches, collected.dispatches.len() as u64);
    assert!(m.dispatches > 0);
    let ids: HashSet<u64> = collected
        .dispatches
        .iter()
        .map(|(d, _)| d.dispatch_id)
        .collect();
    assert_eq!(ids.len(), collected.dispatches.len());
    // Every recorded dispatch has its interceptor slice.
    assert_eq!(collected.intercepts.len(), collected.dispatches.len());
    // The completion thread keeps recycling until the runtime shuts down,
    // then returns when told to.
    assert!(!h.threads[1].is_finished());
    h.engine.stop_guard();
    h.device.stop.store(true, Ordering::SeqCst);
    for t in h.threads.drain(..) {
        assert!(
            join_within(t, Duration::from_secs(2)).is_some(),
            "a thread did not stop"
        );
    }
}

/// A sink that runs `.0` before writing each interceptor record: a slow
/// disk, or a FIFO nobody reads.
struct DelayingSink<F: FnMut() + Send>(F);

impl<F: FnMut() + Send> RecordSink for DelayingSink<F> {
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        Ok(())
    }
    fn intercept(&mut self, _rec: &InterceptRecord) -> std::io::Result<()> {
        (self.0)();
        Ok(())
    }
    fn dispatch(&mut self, _rec: &DispatchRecord, _k: &KernelInfo<'_>) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _meta: &RunMetadata) -> std::io::Result<()> {
        Ok(())
    }
}

/// A sink stuck in its first write (a FIFO nobody reads, a hung file
/// system) until `release` is set.
fn stuck_sink(release: Arc<AtomicBool>) -> DelayingSink<impl FnMut() + Send> {
    DelayingSink(move || {
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn a_stuck_writer_never_hangs_the_app_or_the_teardown() {
    let signals = Signals::new();
    let pool = Arc::new(FakePool::new(signals.clone(), 8));
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        pid: 1,
        max_in_flight: 8,
        handoff_queue: 8,
        max_copies_in_flight: 8,
        record_queue: 8,
        pool_wait: Duration::from_secs(1),
        min_backoff: Duration::from_micros(50),
        max_backoff: Duration::from_micros(500),
        lender_nap: Duration::from_millis(20),
        serialize: false,
        host_forwarding: false,
    }));
    let (e, b) = (
        engine.clone(),
        FakeBackend {
            signals: signals.clone(),
        },
    );
    let completion = std::thread::spawn(move || e.run_completion(&b));
    let release = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(engine.clone(), Box::new(stuck_sink(release.clone())));
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let t0 = Instant::now();
    const N: u64 = 30;
    for _ in 0..N {
        engine.intercept(&q, &[kernel_packet(1, 0)], &*pool, |out| {
            for p in out {
                let s = p.completion_signal();
                if s != 0 && s < 1000 {
                    signals.value[Signals::idx(s)].store(0, Ordering::SeqCst);
                }
            }
        });
    }
    // The teardown of the flush, bounded.
    let left = engine.begin_shutdown(Duration::from_secs(3));
    let joined = join_within(completion, Duration::from_secs(3));
    engine.stop_writer();
    let outcome = join_within(writer, Duration::from_millis(200));
    let took = t0.elapsed();
    assert_eq!(left, 0);
    assert!(
        joined.is_some(),
        "the completion thread hung behind the writer"
    );
    assert!(outcome.is_none(), "the writer cannot have finished");
    assert!(
        took < WRITER_STALL + Duration::from_secs(2),
        "took {took:?}"
    );
    // Everything is accounted for: each dispatch became a record in the
    // queue (at most 8, the writer holds one intercept record) or was
    // counted lost, and each interceptor record likewise.
    let lost = engine.counters().lost.load(Ordering::SeqCst);
    let queued = engine.records_queued() as u64;
    assert_eq!(lost + queued + 1, 2 * N, "lost {lost}, queued {queued}");
    assert!(engine.writer_stalled());
    release.store(true, Ordering::SeqCst);
}

/// The flush's join of the writer waits as long as the writer keeps taking
/// records (CI once saw a storm's files cut 442 dispatches short: the
/// writer, slowed by a loaded disk, missed a fixed 5 s bound at exit), and
/// gives up on one that stopped moving once it has not moved for the stall.
#[test]
fn the_flush_waits_for_a_slow_writer_and_gives_up_on_a_stuck_one() {
    for (per_record, expect_joined) in [
        (Duration::from_millis(20), true),
        (Duration::from_secs(3), false),
    ] {
        let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
            pid: 1,
            max_in_flight: 8,
            handoff_queue: 8,
            max_copies_in_flight: 8,
            record_queue: 64,
            pool_wait: Duration::from_secs(1),
            min_backoff: Duration::from_micros(50),
            max_backoff: Duration::from_micros(500),
            lender_nap: Duration::from_millis(20),
            serialize: false,
            host_forwarding: false,
        }));
        const N: u64 = 40;
        for i in 0..N {
            engine.push_record(Record::Intercept(InterceptRecord {
                thread_id: 1,
                queue_id: 1,
                agent_index: 0,
                begin_ns: i,
                end_ns: i + 1,
                first_correlation_id: 0,
                dispatch_count: 0,
                packet_count: 1,
            }));
        }
        let e = engine.clone();
        // Left running when it is given up on.
        let _writer = std::thread::spawn(move || {
            let mut sinks: Vec<Box<dyn RecordSink + Send>> =
                vec![Box::new(DelayingSink(move || {
                    std::thread::sleep(per_record)
                }))];
            e.run_writer(
                &mut sinks,
                Box::new(Names::default()),
                &RunInfo::default(),
                &[],
            )
        });
        engine.begin_shutdown(Duration::from_millis(10));
        engine.stop_writer();
        let t0 = Instant::now();
        // 40 records of 20 ms: 0.8 s, four times the stall.
        let stall = Duration::from_millis(200);
        let joined = engine.join_writer(stall, Duration::from_secs(30));
        let took = t0.elapsed();
        if expect_joined {
            let outcome = joined.expect("a writer that keeps taking records is waited for");
            assert!(took >= stall * 3, "took {took:?}");
            assert_eq!(outcome.intercept_calls, N);
        } else {
            assert!(joined.is_none(), "a writer stuck for 3 s on one record");
            assert!(took >= stall && took < stall * 5, "gave up after {took:?}");
        }
    }
}

/// Counts `flush` calls and how many dispatches it had seen at each.
struct FlushCounter(Arc<Mutex<(u64, Vec<u64>)>>);

impl RecordSink for FlushCounter {
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        Ok(())
    }
    fn intercept(&mut self, _rec: &InterceptRecord) -> std::io::Result<()> {
        Ok(())
    }
    fn dispatch(&mut self, _rec: &DispatchRecord, _k: &KernelInfo<'_>) -> std::io::Result<()> {
        self.0.lock().unwrap().0 += 1;
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let mut g = self.0.lock().unwrap();
        let seen = g.0;
        g.1.push(seen);
        Ok(())
    }
    fn finish(&mut self, _meta: &RunMetadata) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs a writer over a [`FlushCounter`], idle for `idle_first`, then
/// pushes 10 dispatches and waits a flush period and a margin; returns
/// the dispatch counts each flush saw.
fn flushes_after_records_arrive(idle_first: Duration) -> Vec<u64> {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions::default()));
    let state = Arc::new(Mutex::new((0u64, Vec::new())));
    let (e, st) = (engine.clone(), state.clone());
    let writer = std::thread::spawn(move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![Box::new(FlushCounter(st))];
        e.run_writer(
            &mut sinks,
            Box::new(Names::default()),
            &RunInfo::default(),
            &[],
        )
    });
    std::thread::sleep(idle_first);
    // Records arrive, then nothing for a while: the process is killed
    // later without a finish; they must be flushed meanwhile.
    for i in 0..10u64 {
        let rec = DispatchRecord {
            dispatch_id: i + 1,
            kernel_object: 1,
            ..Default::default()
        };
        engine.records.push(Record::Dispatch(rec)).unwrap();
    }
    std::thread::sleep(writer::FLUSH_EVERY + Duration::from_millis(150));
    let flushes = state.lock().unwrap().1.clone();
    engine.stop_writer();
    writer.join().unwrap();
    flushes
}

#[test]
fn the_writer_flushes_the_sinks_within_100_ms_of_records_arriving() {
    let flushes = flushes_after_records_arrive(Duration::ZERO);
    assert!(flushes.contains(&10), "flushes: {flushes:?}");
}

#[test]
fn records_after_a_long_idle_spell_are_flushed_as_soon() {
    // Half a second with nothing to write: the idle writer's sleep has
    // grown to its longest, and must still be short enough for the
    // flush promise.
    let flushes = flushes_after_records_arrive(Duration::from_millis(500));
    assert!(flushes.contains(&10), "flushes: {flushes:?}");
}

struct NullSink;

impl RecordSink for NullSink {
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        Ok(())
    }
    fn intercept(&mut self, _rec: &InterceptRecord) -> std::io::Result<()> {
        Ok(())
    }
    fn dispatch(&mut self, _rec: &DispatchRecord, _k: &KernelInfo<'_>) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _meta: &RunMetadata) -> std::io::Result<()> {
        Ok(())
    }
}

/// Kernel names without allocating: one fixed name.
struct StaticNames;

impl KernelNames for StaticNames {
    fn with_kernel(
        &mut self,
        kernel_object: u64,
        _dispatch_id: u64,
        f: &mut dyn FnMut(&KernelInfo<'_>, bool),
    ) {
        let info = KernelInfo {
            kernel_id: kernel_object,
            display_name: "k",
            symbol_name: "k",
            resources: None,
        };
        f(&info, true);
    }

    fn learn(&mut self, _: &LoadedKernels) {}
}

#[test]
fn the_hot_paths_allocate_nothing_per_dispatch_over_100k_dispatches() {
    const N: u64 = 100_000;
    let signals = Signals::new();
    let pool = Arc::new(FakePool::new(signals.clone(), 64));
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        pid: 9,
        max_in_flight: 64,
        handoff_queue: 64,
        max_copies_in_flight: 64,
        record_queue: 1 << 16,
        pool_wait: Duration::from_secs(20),
        min_backoff: Duration::from_micros(20),
        max_backoff: Duration::from_micros(200),
        lender_nap: Duration::from_millis(20),
        serialize: false,
        host_forwarding: false,
    }));
    let device = Arc::new(FakeDevice {
        ring: Mutex::new(VecDeque::with_capacity(4096)),
        lanes: Vec::new(),
        kernel_ns: AtomicU64::new(500),
        running: AtomicU64::new(0),
        max_running: AtomicU64::new(0),
        signals: signals.clone(),
        stop: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        kernels: AtomicU64::new(0),
        barriers: AtomicU64::new(0),
        gates: AtomicU64::new(0),
    });
    let d = device.clone();
    let device_thread = std::thread::spawn(move || d.run(0));
    // The completion thread counts its own allocations from its start.
    let (e, b) = (
        engine.clone(),
        FakeBackend {
            signals: signals.clone(),
        },
    );
    let completion = std::thread::spawn(move || allocations_in(|| e.run_completion(&b)));
    let e = engine.clone();
    let writer = std::thread::spawn(move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![Box::new(NullSink)];
        e.run_writer(&mut sinks, Box::new(StaticNames), &RunInfo::default(), &[])
    });
    let q = Arc::new(QueueContext::with_ring(1, 0, 0, 256));
    let submit = |i: u64| {
        let app = if i % 3 == 0 { 3000 } else { 0 };
        engine.intercept(&q, &[kernel_packet(1, app)], &*pool, |out| {
            device.ring.lock().unwrap().extend(out.iter().copied());
        });
    };
    // Warm-up: thread-local caches, the ring's capacity.
    for i in 0..1000 {
        submit(i);
    }
    let on_app_thread = allocations_in(|| {
        for i in 0..N {
            submit(i);
        }
    });
    let left = engine.begin_shutdown(Duration::from_secs(20));
    let in_completion = completion.join().unwrap();
    device.stop.store(true, Ordering::SeqCst);
    device_thread.join().unwrap();
    engine.stop_writer();
    let outcome = writer.join().unwrap();
    assert_eq!(left, 0);
    assert_eq!(outcome.metadata.dispatches, N + 1000);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(
        on_app_thread, 0,
        "interceptor allocations over {N} dispatches"
    );
    // The completion thread allocates its tracking list once at start.
    assert!(
        in_completion <= 4,
        "completion thread allocated {in_completion} times over {} dispatches",
        N + 1000
    );
}

/// A copy from CPU agent 1 to GPU agent 0 of `bytes`.
fn h2d(bytes: u64) -> MemoryCopyRecord {
    MemoryCopyRecord {
        src_agent: 1,
        dst_agent: 0,
        direction: CopyDirection::HostToDevice,
        bytes,
        ..Default::default()
    }
}

impl Harness {
    /// One traced copy whose runtime call accepts it (returns 0); the
    /// completion signal the runtime got.
    fn copy(&self, app_signal: u64, rec: MemoryCopyRecord) -> u64 {
        let mut got = None;
        let status = self.engine.trace_copy(
            &*self.pool,
            app_signal,
            rec,
            |signal| {
                got = Some(signal);
                0u32
            },
            |st| *st == 0,
        );
        assert_eq!(status, 0);
        got.expect("the runtime was called")
    }

    /// The copy engine finishing the copy that completes `signal`.
    fn finish_copy(&self, signal: u64, start: u64, end: u64) {
        let i = Signals::idx(signal);
        self.signals.start[i].store(start, Ordering::SeqCst);
        self.signals.end[i].store(end, Ordering::SeqCst);
        self.signals.value[i].fetch_sub(1, Ordering::SeqCst);
    }

    fn wait_value(&self, signal: u64, value: i64) {
        let t0 = Instant::now();
        while self.signals.value[Signals::idx(signal)].load(Ordering::SeqCst) != value {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "signal {signal} never reached {value}"
            );
            std::thread::yield_now();
        }
    }
}

#[test]
fn copies_sharing_an_app_signal_decrement_it_once_each_and_are_recorded() {
    let h = Harness::new(8, Names::default());
    let app = 2500u64;
    h.signals.value[Signals::idx(app)].store(4, Ordering::SeqCst);
    let t0 = boottime_ns();
    let ours: Vec<u64> = (1..=4).map(|n| h.copy(app, h2d(1000 * n))).collect();
    assert!(
        ours.iter().all(|&s| s != app && s <= 8),
        "pooled signals: {ours:?}"
    );
    assert_eq!(h.engine.copies_in_flight(), 4);
    for (k, &s) in ours.iter().enumerate() {
        // Not before its copy is done...
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            h.signals.value[Signals::idx(app)].load(Ordering::SeqCst),
            4 - k as i64
        );
        let start = boottime_ns();
        h.finish_copy(s, start, start + 100);
        // ...then exactly one decrement.
        h.wait_value(app, 3 - k as i64);
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(h.signals.value[Signals::idx(app)].load(Ordering::SeqCst), 0);
    assert_eq!(h.engine.copies_in_flight(), 0);
    // Every pooled signal came back.
    assert_eq!(h.pool.available(), 8);
    let (outcome, collected, _) = h.finish();
    assert_eq!(outcome.metadata.memory_copies, 4);
    assert_eq!(outcome.metadata.records_lost, 0);
    let mut bytes: Vec<u64> = collected.copies.iter().map(|c| c.bytes).collect();
    bytes.sort();
    assert_eq!(bytes, [1000, 2000, 3000, 4000]);
    let ids: HashSet<u64> = collected.copies.iter().map(|c| c.correlation_id).collect();
    assert_eq!(ids.len(), 4);
    for c in &collected.copies {
        assert_eq!(c.correlation_id >> 32, 42, "same id space as dispatches");
        assert!(c.enqueue_ns >= t0 && c.call_end_ns >= c.enqueue_ns);
        assert_eq!(c.end_ns - c.start_ns, 100);
        assert_eq!(c.direction, CopyDirection::HostToDevice);
        assert_eq!((c.src_agent, c.dst_agent), (1, 0));
    }
}

/// A fake backend on whose device something happens at the moment a
/// signal is read: `before_read` runs with the signal first (a copy that
/// finishes then, an app thread that launches then).
struct ActingOnRead<F: Fn(u64) + Send + Sync> {
    inner: FakeBackend,
    before_read: F,
}

impl<F: Fn(u64) + Send + Sync> CompletionBackend for ActingOnRead<F> {
    fn signal_value(&self, signal: u64) -> i64 {
        (self.before_read)(signal);
        self.inner.signal_value(signal)
    }
    fn forward(&self, app_signal: u64, kernel_signal: Option<u64>) {
        self.inner.forward(app_signal, kernel_signal)
    }
    fn open_gate(&self, signal: u64) {
        self.inner.open_gate(signal)
    }
    fn copy_time(&self, signal: u64) -> Option<(u64, u64)> {
        self.inner.copy_time(signal)
    }
    fn dispatch_time(&self, agent: u64, signal: u64) -> Option<(u64, u64)> {
        self.inner.dispatch_time(agent, signal)
    }
}

/// Bug: the copy pass read the clock at the first finished copy and bounded
/// every copy found finished later in the same pass by it, so a copy that
/// finished in between had its times clamped (seen at exit on ROCr 5.2.3:
/// `copies_in_flight_at_exit_are_waited_for`, end_clamped = 2, 1 run in 16).
#[test]
fn a_copy_finishing_during_the_copy_pass_keeps_its_times() {
    let signals = Signals::new();
    let pool = FakePool::new(signals.clone(), 4);
    let engine = Engine::<FakeSignal>::new(EngineOptions {
        max_copies_in_flight: 4,
        ..EngineOptions::default()
    });
    let app = 2500u64;
    signals.value[Signals::idx(app)].store(2, Ordering::SeqCst);
    let mut ours = Vec::new();
    for bytes in [1000, 2000] {
        let status = engine.trace_copy(
            &pool,
            app,
            h2d(bytes),
            |signal| {
                signals.value[Signals::idx(signal)].store(1, Ordering::SeqCst);
                ours.push(signal);
                0u32
            },
            |st| *st == 0,
        );
        assert_eq!(status, 0);
    }
    // The first copy is done before the pass; the second finishes while
    // the pass reads its signal, after the first was seen done.
    let first = Signals::idx(ours[0]);
    let t = boottime_ns();
    signals.start[first].store(t, Ordering::SeqCst);
    signals.end[first].store(t + 1, Ordering::SeqCst);
    signals.value[first].store(0, Ordering::SeqCst);
    // The copy engine finishes the second copy when its signal is first
    // read, stamping it with the clock of that moment.
    let second = ours[1];
    let backend = ActingOnRead {
        inner: FakeBackend {
            signals: signals.clone(),
        },
        before_read: |signal| {
            let i = Signals::idx(signal);
            if signal == second && signals.value[i].load(Ordering::SeqCst) > 0 {
                let start = boottime_ns();
                signals.start[i].store(start, Ordering::SeqCst);
                signals.end[i].store(start + 1, Ordering::SeqCst);
                signals.value[i].store(0, Ordering::SeqCst);
            }
        },
    };
    let mut copies = Vec::new();
    assert_eq!(engine.poll_copies(&backend, &mut copies, usize::MAX), 2);
    assert!(copies.is_empty());
    let meta = engine.metadata();
    assert_eq!((meta.start_clamped, meta.end_clamped), (0, 0));
    let mut recorded = Vec::new();
    while let Some(Record::MemoryCopy(c)) = engine.records.pop() {
        recorded.push((c.bytes, c.end_ns - c.start_ns));
    }
    recorded.sort();
    assert_eq!(recorded, [(1000, 1), (2000, 1)]);
    assert_eq!(signals.value[Signals::idx(app)].load(Ordering::SeqCst), 0);
}

#[test]
fn a_refused_copy_gives_its_signal_back_and_records_nothing() {
    let h = Harness::new(4, Names::default());
    let app = 2500u64;
    h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
    let mut got = 0;
    let status = h.engine.trace_copy(
        &*h.pool,
        app,
        h2d(64),
        |signal| {
            got = signal;
            7u32
        },
        |st| *st == 0,
    );
    assert_eq!(status, 7, "the runtime's status goes back to the app");
    assert_ne!(got, app);
    assert_eq!(h.pool.available(), 4);
    assert_eq!(h.engine.copies_in_flight(), 0);
    assert_eq!(h.engine.in_flight(), 0);
    let (outcome, collected, _) = h.finish();
    assert_eq!(outcome.metadata.memory_copies, 0);
    assert!(collected.copies.is_empty());
}

#[test]
fn a_zero_signal_or_an_empty_pool_runs_the_copy_with_the_apps_signal() {
    let h = Harness::new(2, Names::default());
    // A zero handle: passed through, so the runtime gives its own error.
    let mut got = u64::MAX;
    h.engine
        .trace_copy(&*h.pool, 0, h2d(8), |s| got = s, |_| true);
    assert_eq!(got, 0);
    // No free signal: the app's own signal, untraced, counted lost.
    let held: Vec<_> = (0..2).map(|_| h.pool.try_acquire().unwrap()).collect();
    let app = 2500u64;
    h.engine
        .trace_copy(&*h.pool, app, h2d(8), |s| got = s, |_| true);
    assert_eq!(got, app);
    drop(held);
    let (outcome, collected, _) = h.finish();
    assert_eq!(outcome.metadata.records_lost, 1);
    assert_eq!(outcome.metadata.memory_copies, 0);
    assert!(collected.copies.is_empty());
}

#[test]
fn a_copy_still_running_at_shutdown_is_counted_lost_and_still_forwarded() {
    let h = Harness::new(4, Names::default());
    let app = 2500u64;
    h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
    let ours = h.copy(app, h2d(8));
    // The flush's wait ends with the copy still running.
    h.engine.keep_guard_after_stop();
    assert_eq!(h.engine.begin_shutdown(Duration::from_millis(50)), 1);
    let t0 = Instant::now();
    while !h.engine.records_closed() {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::yield_now();
    }
    // The copy ends later: the app's signal still completes.
    h.finish_copy(ours, 1, 2);
    h.wait_value(app, 0);
    h.engine.stop_guard();
    h.device.stop.store(true, Ordering::SeqCst);
    let mut h = h;
    for t in h.threads.drain(..) {
        t.join().unwrap();
    }
    h.engine.stop_writer();
    let outcome = h.writer.take().unwrap().join().unwrap();
    assert_eq!(outcome.metadata.records_lost, 1);
    assert_eq!(outcome.metadata.memory_copies, 0);
}

// ---------------------------------------------------------------------------
// Bad packets: whatever the app writes that is not a dispatch of a code
// object reaches the device exactly as written.
// ---------------------------------------------------------------------------

/// Packets no tracer should touch: type INVALID, an undefined type (7),
/// a vendor-specific packet that is not an intercept marker (format 1, a
/// PM4 indirect buffer), and dispatches of kernel object 0 (with and
/// without the app's signal).
fn bad_packets() -> Vec<RawPacket> {
    use rprof_abi::packet::{make_header, VENDOR_FORMAT_OFFSET};
    let mut invalid = RawPacket::with_header(make_header(1, true, 2, 2));
    invalid.bytes[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    let mut undefined = RawPacket::with_header(make_header(7, false, 1, 1));
    undefined.bytes[40..48].copy_from_slice(&0xabcdu64.to_le_bytes());
    undefined.set_completion_signal(3001);
    let mut vendor = RawPacket::with_header(make_header(
        hsa_sys::HSA_PACKET_TYPE_VENDOR_SPECIFIC,
        false,
        2,
        2,
    ));
    vendor.bytes[VENDOR_FORMAT_OFFSET] = 1;
    vendor.bytes[8..16].copy_from_slice(&0xfeed_f00du64.to_le_bytes());
    vendor.set_completion_signal(3002);
    vec![
        invalid,
        undefined,
        vendor,
        kernel_packet(0, 3003),
        kernel_packet(0, 0),
    ]
}

#[test]
fn bad_packets_reach_the_device_untouched_and_dispatches_of_unknown_kernels_are_recorded() {
    let h = Harness::new(8, Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let bad = bad_packets();
    // A call of bad packets only: written as they are, no intercept record.
    let mut seen = Vec::new();
    h.engine
        .intercept(&q, &bad, &*h.pool, |out| seen.extend_from_slice(out));
    assert_eq!(seen, bad, "bad packets alone pass through byte for byte");
    // Bad packets around two real dispatches (one of a kernel object no
    // table knows): only the dispatches are rewritten; order kept.
    let mut mixed = vec![kernel_packet(0xdead_0000, 0)];
    mixed.extend_from_slice(&bad);
    mixed.push(kernel_packet(0x40, 0));
    let mut seen = Vec::new();
    h.engine
        .intercept(&q, &mixed, &*h.pool, |out| seen.extend_from_slice(out));
    assert_eq!(seen.len(), mixed.len());
    assert_eq!(seen[0].kernel_object(), 0xdead_0000);
    assert_ne!(
        seen[0].completion_signal(),
        0,
        "a dispatch gets a timestamp signal"
    );
    assert_eq!(
        &seen[1..=bad.len()],
        &bad[..],
        "bad packets untouched in a mixed call"
    );
    assert_eq!(seen[bad.len() + 1].kernel_object(), 0x40);
    // Run the two traced dispatches (the fake device would spin on the bad
    // packets' signals otherwise): only the rewritten kernels go to it.
    h.device
        .ring
        .lock()
        .unwrap()
        .extend([seen[0], seen[bad.len() + 1]]);
    let (outcome, got, _) = h.finish();
    let objects: Vec<u64> = got
        .dispatches
        .iter()
        .map(|(d, _)| d.kernel_object)
        .collect();
    assert_eq!(objects, [0xdead_0000, 0x40]);
    assert_eq!(got.dispatches[0].1, "kernel_dead0000");
    assert_eq!(outcome.metadata.dispatches, 2);
    // The four dispatches of kernel object 0 (two calls) are never timed.
    assert_eq!(outcome.metadata.records_lost, 4);
    assert_eq!(got.intercepts.len(), 1);
    assert_eq!(got.intercepts[0].dispatch_count, 2);
    assert_eq!(got.intercepts[0].packet_count, mixed.len() as u32);
}

#[test]
fn bad_packets_pass_through_untouched_when_serialized() {
    let h = Harness::with_options(serial_options(true), Names::default());
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let bad = bad_packets();
    let mut seen = Vec::new();
    h.engine
        .intercept(&q, &bad, &*h.pool, |out| seen.extend_from_slice(out));
    assert_eq!(seen, bad, "no gate for a dispatch that is not traced");
    // After a serialized dispatch: its two gate barriers and itself, then
    // the bad packets as written.
    let mut mixed = vec![kernel_packet(0x50, 0)];
    mixed.extend_from_slice(&bad);
    let mut seen = Vec::new();
    h.engine
        .intercept(&q, &mixed, &*h.pool, |out| seen.extend_from_slice(out));
    assert_eq!(seen.len(), bad.len() + 3);
    assert_eq!(seen[2].kernel_object(), 0x50);
    assert_eq!(&seen[3..], &bad[..]);
    h.device
        .ring
        .lock()
        .unwrap()
        .extend(seen[..3].iter().copied());
    let (outcome, got, _) = h.finish();
    assert_eq!(got.dispatches.len(), 1);
    assert_eq!(outcome.metadata.records_lost, 4);
}

/// Bounded fuzzing of batch building (stable Rust, deterministic): calls of
/// 1..24 random packets — any header type (defined, INVALID, undefined),
/// random fence and barrier bits, vendor formats including intercept
/// markers, random bodies, dispatches of kernel object 0 or not — through
/// the interceptor. Every call writes once; each packet that is not a
/// traceable dispatch comes out byte for byte, in order; each traceable one
/// differs only in its completion signal (the app gave none here); the
/// trace has every traceable dispatch and counts every kernel-object-0
/// dispatch lost. `RPROF_FUZZ_ITERATIONS` raises the count (CI: 3,000 calls).
#[test]
fn fuzz_random_packets_are_passed_or_traced_exactly() {
    let iterations: u64 = std::env::var("RPROF_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let mut state = 0xB0A7_F00D_1234_5678u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // A record queue the writer cannot fall 100 ms behind on (an app
    // thread's record push is bounded: a slow writer loses records).
    let h = Harness::with_options(
        EngineOptions {
            max_in_flight: 64,
            handoff_queue: 64,
            max_copies_in_flight: 64,
            record_queue: 1 << 16,
            ..serial_options(false)
        },
        Names::default(),
    );
    let q = Arc::new(QueueContext::new(1, 0, 0));
    let (mut traced, mut codeless) = (0u64, 0u64);
    for _ in 0..iterations {
        let n = 1 + next() % 24;
        let mut packets = Vec::new();
        for _ in 0..n {
            let mut p = RawPacket::ZERO;
            for chunk in p.bytes.chunks_mut(8) {
                chunk.copy_from_slice(&next().to_le_bytes()[..chunk.len()]);
            }
            let ty = match next() % 6 {
                0 | 1 => HSA_PACKET_TYPE_KERNEL_DISPATCH,
                2 => hsa_sys::HSA_PACKET_TYPE_VENDOR_SPECIFIC,
                3 => 1, // INVALID
                4 => (next() % 256) as u32,
                _ => (next() % 6) as u32,
            };
            let header = (p.header() & !0xff) | ty as u16;
            p.set_header(header);
            if ty == hsa_sys::HSA_PACKET_TYPE_VENDOR_SPECIFIC && next() % 2 == 0 {
                p.bytes[rprof_abi::packet::VENDOR_FORMAT_OFFSET] =
                    rprof_abi::packet::AMD_AQL_FORMAT_INTERCEPT_MARKER;
            }
            if p.is_kernel_dispatch() {
                p.set_completion_signal(0);
                if next() % 4 == 0 {
                    p.bytes[32..40].copy_from_slice(&0u64.to_le_bytes());
                }
            }
            packets.push(p);
        }
        let mut seen = Vec::new();
        let mut writes = 0;
        h.engine.intercept(&q, &packets, &*h.pool, |out| {
            writes += 1;
            seen.extend_from_slice(out);
        });
        assert_eq!(writes, 1);
        assert_eq!(seen.len(), packets.len(), "{packets:?}");
        for (i, (p, o)) in packets.iter().zip(&seen).enumerate() {
            if p.is_kernel_dispatch() && p.kernel_object() != 0 {
                traced += 1;
                let mut back = *o;
                back.set_completion_signal(0);
                assert_eq!(&back, p, "packet {i}: only the completion signal changes");
                assert_ne!(
                    o.completion_signal(),
                    0,
                    "packet {i} got a timestamp signal"
                );
            } else {
                codeless += u64::from(p.is_kernel_dispatch());
                assert_eq!(o, p, "packet {i} (type {}) untouched", p.packet_type());
            }
        }
        // Only the traced kernels run on the fake device.
        h.device.ring.lock().unwrap().extend(
            seen.iter()
                .zip(&packets)
                .filter(|(_, p)| p.is_kernel_dispatch() && p.kernel_object() != 0)
                .map(|(o, _)| *o),
        );
    }
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, traced);
    assert_eq!(got.dispatches.len() as u64, traced);
    assert_eq!(outcome.metadata.records_lost, codeless);
    assert!(
        traced > 1000 && codeless > 100,
        "{traced} traced, {codeless} codeless"
    );
}

/// A queue destroyed with dispatches that will never run (the device never
/// reached them): the completion thread drops them, counts them lost, and
/// gives their signals and ring slots back; the other queue's work goes on
/// (with serialization: no token stays held by the dead queue).
fn queue_destroyed_with_work_pending(serialize: bool) {
    let h = Harness::with_options(
        EngineOptions {
            max_in_flight: 32,
            handoff_queue: 32,
            max_copies_in_flight: 32,
            ..serial_options(serialize)
        },
        Names::default(),
    );
    let dead = Arc::new(QueueContext::with_ring(1, 0, 0, 64));
    let live = Arc::new(QueueContext::with_ring(2, 0, 0, 64));
    // The device never reaches the dead queue's packets: they stay on a
    // ring nobody runs (as on a queue whose head waits forever).
    let mut stuck = Vec::new();
    for n in 0..5 {
        h.engine
            .intercept(&dead, &[kernel_packet(0x10 + n, 0)], &*h.pool, |out| {
                stuck.extend_from_slice(out)
            });
    }
    // One slot per kernel, three with its serialization barriers.
    assert_eq!(dead.slots_in_use(), if serialize { 15 } else { 5 });
    dead.mark_destroyed();
    let t0 = Instant::now();
    while dead.has_work_in_flight() {
        assert!(t0.elapsed() < Duration::from_secs(5), "never dropped");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(dead.slots_in_use(), 0, "ring slots given back");
    // The live queue still traces (and, serialized, gets the token).
    for n in 0..5 {
        h.submit(&live, &[kernel_packet(0x20 + n, 0)]);
    }
    let pool = h.pool.clone();
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.records_lost, 5);
    assert_eq!(outcome.metadata.dispatches, 5);
    assert!(got.dispatches.iter().all(|(d, _)| d.queue_id == 2));
    assert_eq!(pool.available(), 32, "the dead queue's signals came back");
    drop(stuck);
}

#[test]
fn a_queue_destroyed_with_work_pending_drops_it_as_lost() {
    queue_destroyed_with_work_pending(false);
}

#[test]
fn a_queue_destroyed_with_work_pending_drops_it_as_lost_when_serialized() {
    queue_destroyed_with_work_pending(true);
}

/// Resident set size of this process, bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The load test of issue 12: 8 threads, each with 4 queues, `per_queue`
/// calls per queue, round robin over its queues: kernels (every 7th with an
/// app signal the thread then waits for), and every 5th call a barrier-AND
/// completing an app signal, also waited for. A 64-signal pool and 48-slot
/// rings keep back-pressure on. Exact counts, no loss, every pooled signal
/// back, and memory flat once warm (a counting sink keeps no records).
fn load_8_threads_4_queues(per_queue: u64) {
    load_8_threads_4_queues_with(per_queue, 4096, None);
}

/// [`load_8_threads_4_queues`] with a record queue of `record_queue` and a
/// writer that stops now and then (`stall`, see [`Collected::stall`]).
fn load_8_threads_4_queues_with(
    per_queue: u64,
    record_queue: usize,
    stall: Option<(u64, Duration)>,
) {
    const THREADS: u64 = 8;
    const QUEUES: u64 = 4;
    let h = Arc::new(Harness::with_options(
        EngineOptions {
            max_in_flight: 64,
            handoff_queue: 64,
            max_copies_in_flight: 64,
            record_queue,
            ..serial_options(false)
        },
        Names::default(),
    ));
    h.collected.lock().unwrap().count_only = true;
    h.collected.lock().unwrap().stall = stall;
    let warm_rss = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (h, warm_rss, done) = (h.clone(), warm_rss.clone(), done.clone());
            std::thread::spawn(move || {
                let queues: Vec<_> = (0..QUEUES)
                    .map(|q| Arc::new(QueueContext::with_ring(100 + t * QUEUES + q, 0, 0, 64)))
                    .collect();
                let app = 2000 + t;
                let wait_app = || {
                    let t0 = Instant::now();
                    while h.signals.value[Signals::idx(app)].load(Ordering::SeqCst) > 0 {
                        assert!(
                            t0.elapsed() < Duration::from_secs(30),
                            "deadlock: app signal never completed"
                        );
                        std::thread::yield_now();
                    }
                };
                for n in 0..per_queue * QUEUES {
                    let q = &queues[(n % QUEUES) as usize];
                    if n % 5 == 4 {
                        h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
                        h.submit(q, &[RawPacket::forwarding_barrier(app, 2)]);
                        wait_app();
                    } else if n % 7 == 6 {
                        h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
                        h.submit(q, &[kernel_packet(0x100 + n % 3, app)]);
                        wait_app();
                    } else {
                        h.submit(q, &[kernel_packet(0x100 + n % 3, 0)]);
                    }
                    if t == 0 && n == per_queue * QUEUES / 10 {
                        warm_rss.store(rss_bytes(), Ordering::SeqCst);
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let end_rss = rss_bytes();
    let elapsed = t0.elapsed();
    let h = Arc::try_unwrap(h).ok().expect("workers are done");
    let pool = h.pool.clone();
    let (outcome, got, device) = h.finish();
    let calls = per_queue * QUEUES;
    let kernels_per_thread = (0..calls).filter(|n| n % 5 != 4).count() as u64;
    let expected = THREADS * kernels_per_thread;
    assert_eq!(done.load(Ordering::SeqCst), THREADS);
    eprintln!(
        "load: lost {}, dispatch records {}, intercept records {} of {expected}",
        outcome.metadata.records_lost, got.dispatch_count, got.intercept_count
    );
    assert_eq!(outcome.metadata.records_lost, 0, "back-pressure, not loss");
    assert_eq!(outcome.metadata.dispatches, expected);
    assert_eq!(got.dispatch_count, expected);
    assert_eq!(got.max_dispatch_id, expected);
    assert_eq!(
        got.dispatch_id_sum,
        expected * (expected + 1) / 2,
        "dispatch ids 1..=n once each"
    );
    assert_eq!(got.intercept_count, expected);
    assert_eq!(device.kernels.load(Ordering::SeqCst), expected);
    assert_eq!(pool.available(), 64, "every pooled signal came back");
    let warm = warm_rss.load(Ordering::SeqCst);
    let growth = end_rss.saturating_sub(warm);
    eprintln!(
        "load: {expected} dispatches in {elapsed:?}, RSS {} MiB after 10%, {} MiB at the end",
        warm >> 20,
        end_rss >> 20
    );
    assert!(
        growth < 16 << 20,
        "memory grew {} MiB after warm-up",
        growth >> 20
    );
}

#[test]
fn load_with_a_writer_descheduled_for_150_ms_now_and_then_loses_nothing() {
    // The 1M load test once counted 66 of 25.6M records lost on a loaded
    // machine. A writer thread that gets no CPU for a while (here: 150 ms
    // every 20,000 dispatch records, 8 x 4 x 5,000 calls) must cost the
    // app back-pressure, never records: the writer is slow, not stuck.
    load_8_threads_4_queues_with(5_000, 4096, Some((20_000, Duration::from_millis(150))));
}

#[test]
fn load_8_threads_4_queues_exact_counts_no_deadlock_flat_memory() {
    // CI size: 8 x 4 x 10,000 calls (256,000 kernels, 64,000 barriers).
    load_8_threads_4_queues(10_000);
}

#[test]
#[ignore = "benchmark-size load test (8 x 4 x 1M calls, minutes): cargo test -p rprof-core --lib -- --ignored load_8_threads_4_queues_1m"]
fn load_8_threads_4_queues_1m() {
    load_8_threads_4_queues(1_000_000);
}

/// Benchmark (prints figures; `cargo test -p rprof-core --release --lib
/// bench_writer -- --ignored --nocapture`, or under callgrind with
/// `scripts/callgrind.sh`): the writer thread's cost per dispatch with the
/// default outputs (CSV and Perfetto) on the graph storm's record stream as
/// ROCr 6.4.3 produces it for a plain HIP app: one interceptor call per
/// dispatch, 256 kernels in turn, irregular GPU timestamps.
#[test]
#[ignore]
fn bench_writer_cost_per_dispatch() {
    use crate::output::csv::CsvSink;
    use crate::output::perfetto::PerfettoSink;
    const DISPATCHES: u64 = 200_000;
    let dir = std::env::temp_dir().join(format!("rprof-bench-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Every record is queued before the writer starts, and the writer is
    // told to stop at once: it drains them in one go, alone, as a writer
    // that keeps up does in a live run (no hand-over between threads in
    // the figure).
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        record_queue: 2 * DISPATCHES as usize,
        ..EngineOptions::default()
    }));
    let (e, d) = (engine.clone(), dir.clone());
    let writer = move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![
            Box::new(CsvSink::create(&d.join("run_kernel_trace.csv")).unwrap()),
            Box::new(PerfettoSink::create(&d.join("run.pftrace")).unwrap()),
        ];
        let table = KernelTable::new(NamePolicy::default());
        let run = RunInfo {
            pid: 42,
            process_name: "graph_storm".into(),
            ..Default::default()
        };
        let agents = [AgentInfo {
            index: 0,
            name: "gfx90a".into(),
            product_name: "emulated".into(),
            handle: 0x1000,
            compute_units: 104,
            cpu: false,
        }];
        let cpu0 = rprof_abi::clock::now_ns(rprof_abi::clock::Clock::ThreadCpu);
        let outcome = e.run_writer(
            &mut sinks,
            Box::new(CachedKernelNames::new(Arc::new(table))),
            &run,
            &agents,
        );
        let cpu = rprof_abi::clock::now_ns(rprof_abi::clock::Clock::ThreadCpu) - cpu0;
        (outcome, cpu)
    };
    // A small generator of irregular gaps (xorshift), so that the deltas
    // and the deflated bytes look like a real run's.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut jitter = move |max: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % max
    };
    let push = |rec: Record| {
        assert!(engine.records.push(rec).is_ok(), "the queue holds them all");
    };
    let base = 1_700_000_000_000_000_000u64;
    let (mut host, mut gpu) = (base, base + 50_000);
    for n in 1..=DISPATCHES {
        let correlation_id = (42u64 << 32) | n;
        host += 1_500 + jitter(3_000);
        push(Record::Intercept(InterceptRecord {
            thread_id: 42,
            queue_id: 1,
            agent_index: 0,
            begin_ns: host,
            end_ns: host + 300 + jitter(200),
            first_correlation_id: correlation_id,
            dispatch_count: 1,
            packet_count: 1,
        }));
        gpu = gpu.max(host + 2_000) + 200 + jitter(400);
        let end = gpu + 1_000 + jitter(2_000);
        let k = n % 256;
        push(Record::Dispatch(DispatchRecord {
            correlation_id,
            dispatch_id: n,
            agent_index: 0,
            queue_id: 1,
            thread_id: 42,
            kernel_object: 0x7f00_0000_0000 + k * 0x40,
            grid: [256 << (k % 4), 1, 1],
            workgroup: [256, 1, 1],
            private_segment_size: 0,
            group_segment_size: 0,
            enqueue_ns: host + 100,
            start_ns: gpu,
            end_ns: end,
        }));
        gpu = end;
    }
    engine.stop_writer();
    let (outcome, cpu) = std::thread::spawn(writer).join().unwrap();
    assert_eq!(outcome.metadata.dispatches, DISPATCHES);
    assert!(outcome.sink_failures.iter().all(Option::is_none));
    let bytes = std::fs::metadata(dir.join("run.pftrace")).unwrap().len();
    std::fs::remove_dir_all(&dir).unwrap();
    println!(
        "writer: {:.0} ns CPU per dispatch (CSV + Perfetto, {DISPATCHES} dispatches, one interceptor call each, queued before the writer starts), trace {:.1} bytes per dispatch",
        cpu as f64 / DISPATCHES as f64,
        bytes as f64 / DISPATCHES as f64
    );
}

/// The writer's kernel cache finds a replaced entry (a code object unloaded
/// and its memory reused by another kernel) and a new object at once.
#[test]
fn the_writers_kernel_cache_follows_the_table() {
    let table = Arc::new(KernelTable::new(NamePolicy::default()));
    table.insert(0x100, "first.kd");
    let mut names = CachedKernelNames::new(table.clone());
    let mut name_of = |object: u64| {
        let mut got = (String::new(), 0);
        names.with_kernel(object, 1, &mut |k, _| {
            got = (k.display_name.to_string(), k.kernel_id)
        });
        got
    };
    assert_eq!(name_of(0x100), ("first".to_string(), 1));
    assert_eq!(name_of(0x100), ("first".to_string(), 1));
    table.insert(0x100, "second.kd");
    assert_eq!(name_of(0x100), ("second".to_string(), 2));
    assert_eq!(name_of(0x200), ("unknown_kernel_0x200".to_string(), 3));
    table.insert(0x200, "third.kd");
    assert_eq!(name_of(0x200), ("third".to_string(), 4));
    assert_eq!(name_of(0x100), ("second".to_string(), 2));
}

/// Runs `run_writer` for `engine` on a thread of its own, into `sink`.
fn spawn_writer(
    engine: Arc<Engine<FakeSignal>>,
    sink: Box<dyn RecordSink + Send>,
) -> std::thread::JoinHandle<WriterOutcome> {
    std::thread::spawn(move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![sink];
        engine.run_writer(
            &mut sinks,
            Box::new(Names::default()),
            &RunInfo::default(),
            &[],
        )
    })
}

/// Dispatch record `n` of a lending test (ids and end time from `n`).
fn numbered_dispatch(n: u64) -> Record {
    Record::Dispatch(DispatchRecord {
        correlation_id: n,
        dispatch_id: n,
        kernel_object: 0x1000,
        end_ns: 2_500 + n,
        ..Default::default()
    })
}

/// Threads that lend themselves to the writer (`lend_writer`, as an app
/// thread spinning on the device does between slices of its wait) write
/// records beside the writer thread: each reaches the sinks exactly once,
/// in queue order, and none is written before the writer has started or
/// after it has finished.
#[test]
fn lending_threads_write_each_record_once_in_queue_order() {
    const N: u64 = 20_000;
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        record_queue: 1024,
        ..EngineOptions::default()
    }));
    let dispatch = numbered_dispatch;
    // No writer yet: there is nothing to lend to, and the record stays.
    assert!(engine.records.push(dispatch(1)).is_ok());
    assert_eq!(engine.lend_writer(16), 0);
    let collected = Arc::new(Mutex::new(Collected::default()));
    let writer = spawn_writer(engine.clone(), Box::new(CollectSink(collected.clone())));
    let stop = Arc::new(AtomicBool::new(false));
    let lenders: Vec<_> = (0..3)
        .map(|_| {
            let (e, stop) = (engine.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut lent = 0;
                while !stop.load(Ordering::Acquire) {
                    lent += e.lend_writer(16);
                    std::hint::spin_loop();
                }
                lent
            })
        })
        .collect();
    for n in 2..=N {
        let mut rec = dispatch(n);
        while let Err(back) = engine.records.push(rec) {
            rec = back;
            std::thread::yield_now();
        }
    }
    while !engine.records.is_empty() {
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    let lent: usize = lenders.into_iter().map(|h| h.join().unwrap()).sum();
    engine.stop_writer();
    let outcome = writer.join().unwrap();
    assert_eq!(outcome.metadata.dispatches, N);
    let c = collected.lock().unwrap();
    let ids: Vec<u64> = c.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(ids, (1..=N).collect::<Vec<_>>());
    assert!(lent > 0, "the lending threads wrote no record");
    assert_eq!(engine.counters().lent.load(Ordering::Relaxed), lent as u64);
    // Finished: nothing is written on a lender's thread any more.
    assert!(engine.records.push(dispatch(N + 1)).is_ok());
    assert_eq!(engine.lend_writer(16), 0);
}

/// While an app thread writes records between slices of its wait, the
/// writer thread leaves the queue to it (what the writer thread writes
/// takes a core from the app or the device; what a waiting app thread
/// writes does not), and takes over once the lending stops: every record
/// once, in order. (Before, the writer thread woke every 2 ms and took what
/// the completion thread had just queued.)
#[test]
fn the_writer_thread_leaves_the_records_to_a_lending_app_thread() {
    let _alone = timing_sensitive();
    const N: u64 = 3_000;
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions::default()));
    let dispatch = numbered_dispatch;
    let collected = Arc::new(Mutex::new(Collected::default()));
    let writer = spawn_writer(engine.clone(), Box::new(CollectSink(collected.clone())));
    let stop = Arc::new(AtomicBool::new(false));
    // The app's thread: 16 records between 200 µs slices of its wait.
    let lender = {
        let (e, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut lent = 0;
            while !stop.load(Ordering::Acquire) {
                lent += e.lend_writer(16);
                std::thread::sleep(Duration::from_micros(200));
            }
            lent
        })
    };
    // The completion thread: 60 records a millisecond, in bursts (the app
    // thread takes 80).
    for burst in 0..N / 60 {
        for n in 0..60 {
            assert!(engine.records.push(dispatch(1 + burst * 60 + n)).is_ok());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !engine.records.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    let lent = lender.join().unwrap() as u64;
    // The lending stopped: the writer thread writes what comes now.
    for n in N + 1..=N + 100 {
        assert!(engine.records.push(dispatch(n)).is_ok());
    }
    engine.stop_writer();
    let outcome = writer.join().unwrap();
    assert_eq!(outcome.metadata.dispatches, N + 100);
    let c = collected.lock().unwrap();
    let ids: Vec<u64> = c.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(ids, (1..=N + 100).collect::<Vec<_>>());
    assert!(
        lent * 10 >= N * 9,
        "the app thread wrote {lent} of {N} records while it lent"
    );
}

/// A thread that enters a lending wait while a backlog is queued (the
/// interceptor's records of a burst of launches, queued before the app
/// waits) gets the backlog: the writer thread leaves the queue to it while
/// the queue is under 3/4 full, and stops its own batch within 256 records.
/// (Before, the writer thread took any backlog over 1/8 of the queue itself
/// in one batch of up to 4,096, while the waiting app thread spun beside it:
/// on the emulated GPU, on the device's core.) Past 3/4 the writer thread
/// writes too.
#[test]
fn a_backlog_queued_before_the_app_waits_is_left_to_the_waiting_thread() {
    let _alone = timing_sensitive();
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions::default()));
    let capacity = engine.records.capacity() as u64;
    let (writer, _room, written, _flushes) = spawn_room_writer(&engine, 1 << 20);
    // Half the queue: over the old 1/8, under 3/4.
    let backlog = capacity / 2;
    let lending = engine.lending();
    for n in 1..=backlog {
        assert!(engine.records.push(numbered_dispatch(n)).is_ok());
    }
    // The writer thread wakes within its 2 ms nap; the app's thread writes
    // 16 records between 200 µs slices of its wait.
    let mut lent = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !engine.records.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
        while engine.lend_writer(16) > 0 {}
        lent = engine.counters().lent.load(Ordering::Relaxed);
    }
    assert_eq!(lent, backlog, "the app thread wrote {lent} of {backlog}");
    // 7/8 full, the app thread still in its wait: the writer thread writes
    // the queue down to under 3/4 and leaves the rest.
    let more = capacity * 7 / 8;
    for n in backlog + 1..=backlog + more {
        assert!(engine.records.push(numbered_dispatch(n)).is_ok());
    }
    let three_quarters = capacity * 3 / 4;
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.records.len() as u64 >= three_quarters && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let left = engine.records.len() as u64;
    assert!(
        (three_quarters - 256..three_quarters).contains(&left),
        "{left} records left of {capacity}"
    );
    // The wait is over: the writer thread writes the rest.
    drop(lending);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !engine.records.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(engine.records.is_empty(), "the writer thread left records");
    assert_eq!(engine.counters().lent.load(Ordering::Relaxed), backlog);
    engine.stop_writer();
    writer.join().unwrap();
    assert_eq!(written.load(Ordering::SeqCst), backlog + more);
}

/// Held by the tests whose figures depend on how often each thread gets a
/// core, so that they do not run beside one another: beside the lending
/// retire test (a fake device of four spinning lanes), the lending writer
/// test's app thread wrote 78-88 % of the records instead of 98 %.
fn timing_sensitive() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A sink with `room` bytes left in its buffers (shared, so the test can
/// change it), counting records and flushes; a flush empties its buffers.
struct RoomSink {
    room: Arc<AtomicU64>,
    records: Arc<AtomicU64>,
    flushes: Arc<AtomicU64>,
}

impl RecordSink for RoomSink {
    fn spare_room(&self) -> usize {
        self.room.load(Ordering::SeqCst) as usize
    }
    fn start(&mut self, _run: &RunInfo, _agents: &[AgentInfo]) -> std::io::Result<()> {
        Ok(())
    }
    fn intercept(&mut self, _rec: &InterceptRecord) -> std::io::Result<()> {
        Ok(())
    }
    fn dispatch(&mut self, _rec: &DispatchRecord, _k: &KernelInfo<'_>) -> std::io::Result<()> {
        self.records.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.room.store(1 << 20, Ordering::SeqCst);
        Ok(())
    }
    fn finish(&mut self, _meta: &RunMetadata) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer thread over one [`RoomSink`] with `room` bytes left, once it
/// holds the sinks' state; with the sink's room, record and flush counts.
#[allow(clippy::type_complexity)]
fn spawn_room_writer(
    engine: &Arc<Engine<FakeSignal>>,
    room: u64,
) -> (
    std::thread::JoinHandle<WriterOutcome>,
    Arc<AtomicU64>,
    Arc<AtomicU64>,
    Arc<AtomicU64>,
) {
    let (room, records, flushes) = (
        Arc::new(AtomicU64::new(room)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let sink = RoomSink {
        room: room.clone(),
        records: records.clone(),
        flushes: flushes.clone(),
    };
    let writer = spawn_writer(engine.clone(), Box::new(sink));
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.writer_job().is_none() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    (writer, room, records, flushes)
}

/// A sink that never buffers for a lender (rocpd, split Perfetto: no room
/// from the start) leaves all writing to the writer thread, and lenders do
/// not ask it to flush: before, every lending attempt (each 200 µs of an
/// app's wait) made the writer thread flush, a database commit for rocpd.
#[test]
fn lenders_leave_a_sink_without_room_alone() {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions::default()));
    let (writer, _room, records, flushes) = spawn_room_writer(&engine, 0);
    for n in 1..=200u64 {
        let rec = Record::Dispatch(DispatchRecord {
            dispatch_id: n,
            kernel_object: 0x1000,
            ..Default::default()
        });
        assert!(engine.records.push(rec).is_ok());
        assert_eq!(engine.lend_writer(16), 0);
        std::thread::sleep(Duration::from_micros(100));
    }
    // The writer thread's own flushes only (one per 100 ms of records).
    assert!(
        flushes.load(Ordering::SeqCst) <= 2,
        "{} flushes for 200 lending attempts",
        flushes.load(Ordering::SeqCst)
    );
    engine.stop_writer();
    let outcome = writer.join().unwrap();
    assert_eq!(outcome.metadata.dispatches, 200);
    assert_eq!(records.load(Ordering::SeqCst), 200);
    assert_eq!(engine.counters().lent.load(Ordering::Relaxed), 0);
}

/// A lending thread never makes a sink write its file: while a sink has
/// less room in its buffers than a record could take, the lender writes
/// nothing and asks the writer thread, which flushes (the only thread that
/// writes files); then lending goes on.
#[test]
fn a_lender_leaves_the_files_to_the_writer_thread() {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        record_queue: 1024,
        ..EngineOptions::default()
    }));
    let (writer, _room, records, flushes) = spawn_room_writer(&engine, 100);
    let dispatch = |n: u64| {
        Record::Dispatch(DispatchRecord {
            dispatch_id: n,
            kernel_object: 0x1000,
            ..Default::default()
        })
    };
    assert!(engine.records.push(dispatch(1)).is_ok());
    // 100 bytes of room: the lender takes nothing and asks for a flush.
    assert_eq!(engine.lend_writer(16), 0);
    assert_eq!(records.load(Ordering::SeqCst), 0);
    // The writer thread flushes (it was woken for it) and writes the record
    // itself, or leaves it to the next lender, now that there is room.
    let deadline = Instant::now() + Duration::from_secs(10);
    while flushes.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        flushes.load(Ordering::SeqCst) > 0,
        "the writer did not flush"
    );
    assert!(engine.records.push(dispatch(2)).is_ok());
    let mut lent = 0;
    while records.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
        lent += engine.lend_writer(16);
    }
    engine.stop_writer();
    let outcome = writer.join().unwrap();
    assert_eq!(outcome.metadata.dispatches, 2);
    assert_eq!(records.load(Ordering::SeqCst), 2);
    assert!(lent <= 2);
}

/// An app thread waiting on the device retires the finished dispatches in
/// the completion thread's place (a pass between two slices of its wait):
/// what the completion thread would have spent takes no core from the app's
/// other threads or the device. Every dispatch is recorded once, and
/// nothing is left to the thread but the last stragglers.
#[test]
fn a_lending_app_thread_retires_the_finished_dispatches() {
    let _alone = timing_sensitive();
    const CALLS: u64 = 400;
    // The completion thread looks once a second (a thread kept off a busy
    // machine's cores); the lender every 100 µs.
    let h = Harness::with_options(
        EngineOptions {
            max_in_flight: 512,
            handoff_queue: 512,
            record_queue: 1024,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(1),
            ..EngineOptions::default()
        },
        Names::default(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let lender = {
        let (e, stop) = (h.engine.clone(), stop.clone());
        let b = FakeBackend {
            signals: h.signals.clone(),
        };
        std::thread::spawn(move || {
            let mut retired = 0;
            while !stop.load(Ordering::Acquire) {
                retired += e.lend_completion(&b, 16);
                e.lend_writer(16);
                std::thread::sleep(Duration::from_micros(100));
            }
            retired as u64
        })
    };
    // Kernels of 100 µs on one lane: the thread, woken by the first
    // launch, finds it running and sleeps; the list never empties (an empty
    // list parks the thread until the next launch wakes it).
    h.device.kernel_ns.store(100_000, Ordering::SeqCst);
    let q = Arc::new(QueueContext::new(100, 0, 0));
    for n in 0..CALLS {
        h.submit(&q, &[kernel_packet(0x1000 * (n % 5 + 1), 0)]);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.engine.in_flight() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    let retired = lender.join().unwrap();
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, CALLS);
    assert_eq!(outcome.metadata.records_lost, 0);
    let ids: HashSet<u64> = got.dispatches.iter().map(|(d, _)| d.dispatch_id).collect();
    assert_eq!(got.dispatches.len() as u64, CALLS);
    assert_eq!(ids, (1..=CALLS).collect::<HashSet<u64>>());
    assert!(
        retired * 10 >= CALLS * 9,
        "the app thread retired {retired} of {CALLS} dispatches while it lent"
    );
}

/// Options where the completion thread polls often, but sleeps far longer
/// than any of these tests waits while an app thread lends
/// (`lender_nap`).
fn lender_nap_options(pool: usize) -> EngineOptions {
    EngineOptions {
        max_in_flight: pool,
        handoff_queue: pool,
        record_queue: 1024,
        pool_wait: Duration::from_secs(20),
        min_backoff: Duration::from_micros(50),
        max_backoff: Duration::from_micros(500),
        lender_nap: Duration::from_secs(60),
        ..EngineOptions::default()
    }
}

/// While an app thread lends its wait, the completion thread makes no
/// passes of its own (on the emulated GPU they took the command
/// processor's core): finished dispatches wait for the lender. When the
/// last lender leaves, the thread is woken and retires them at once.
#[test]
fn the_completion_thread_leaves_its_passes_to_a_lender_until_it_leaves() {
    let h = Harness::with_options(lender_nap_options(64), Names::default());
    let q = Arc::new(QueueContext::new(100, 0, 0));
    let lending = h.engine.lending();
    // Kernels of 100 ms: the thread, woken by the first launch, finds
    // nothing finished, and sleeps while the lender is there.
    h.device.kernel_ns.store(100_000_000, Ordering::SeqCst);
    for n in 0..3u64 {
        h.submit(&q, &[kernel_packet(0x1000 * (n + 1), 0)]);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        h.engine.in_flight(),
        3,
        "the completion thread retired dispatches while an app thread lent"
    );
    let left = Instant::now();
    drop(lending);
    let deadline = left + Duration::from_secs(10);
    while h.engine.in_flight() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(h.engine.in_flight(), 0, "not woken when the lender left");
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 3);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(got.dispatches.len(), 3);
}

/// An interceptor's call for a pass at once (`poll_now`) is answered while
/// an app thread lends, and then the thread sleeps again: it does not keep
/// passing while the lender is there.
#[test]
fn after_an_urgent_pass_the_thread_sleeps_again_while_a_lender_stands_in() {
    let h = Harness::with_options(lender_nap_options(64), Names::default());
    let q = Arc::new(QueueContext::new(100, 0, 0));
    let lending = h.engine.lending();
    h.device.kernel_ns.store(10_000_000, Ordering::SeqCst);
    for n in 0..3u64 {
        h.submit(&q, &[kernel_packet(0x1000 * (n + 1), 0)]);
    }
    std::thread::sleep(Duration::from_millis(100));
    // A fourth still running after the urgent pass: the thread tracks it.
    h.device.kernel_ns.store(1_000_000_000, Ordering::SeqCst);
    h.submit(&q, &[kernel_packet(0x4000, 0)]);
    h.engine.poll_now();
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.engine.in_flight() > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(h.engine.in_flight(), 1, "the urgent pass did not come");
    let before = h.engine.completion_passes.load(Ordering::Acquire);
    std::thread::sleep(Duration::from_millis(200));
    let passes = h.engine.completion_passes.load(Ordering::Acquire) - before;
    assert!(
        passes < 10,
        "{passes} passes in 200 ms while a lender stood in"
    );
    drop(lending);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 4);
    assert_eq!(got.dispatches.len(), 4);
}

/// An interceptor that waits for a signal wakes the completion thread
/// even while an app thread lends (and lends nothing): 64 dispatches
/// through a pool of 8 signals, every one traced, long before the
/// thread's nap would end.
#[test]
fn an_interceptor_short_of_signals_wakes_the_thread_a_lender_stands_in_for() {
    let h = Harness::with_options(lender_nap_options(8), Names::default());
    let q = Arc::new(QueueContext::new(100, 0, 0));
    let lending = h.engine.lending();
    let t0 = Instant::now();
    for n in 0..64u64 {
        h.submit(&q, &[kernel_packet(0x1000 * (n % 5 + 1), 0)]);
    }
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the interceptors waited {:?} for signals",
        t0.elapsed()
    );
    drop(lending);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 64);
    assert_eq!(outcome.metadata.records_lost, 0);
    assert_eq!(got.dispatches.len(), 64);
}

/// A traced copy wakes the completion thread even while an app thread
/// lends: a lender polls copies only between the slices of its wait (and
/// this one never lends), so the thread gives the app its signal.
#[test]
fn a_copy_is_completed_while_a_lender_stands_in_for_the_thread() {
    let h = Harness::with_options(lender_nap_options(8), Names::default());
    let q = Arc::new(QueueContext::new(100, 0, 0));
    let lending = h.engine.lending();
    // A kernel still running: the thread tracks it and sleeps while the
    // lender is there.
    h.device.kernel_ns.store(500_000_000, Ordering::SeqCst);
    h.submit(&q, &[kernel_packet(0x1000, 0)]);
    std::thread::sleep(Duration::from_millis(50));
    let app = 2600u64;
    h.signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
    let signal = h.copy(app, h2d(64));
    h.finish_copy(signal, 10, 20);
    let t0 = Instant::now();
    h.wait_value(app, 0);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the copy's signal came after {:?}",
        t0.elapsed()
    );
    drop(lending);
    let (outcome, got, _) = h.finish();
    assert_eq!(outcome.metadata.memory_copies, 1);
    assert_eq!(outcome.metadata.dispatches, 1);
    assert_eq!(got.copies.len(), 1);
}

/// Under `--serialize-kernels` the grants are the completion thread's
/// alone: a waiting app thread retires nothing.
#[test]
fn a_lender_retires_nothing_under_serialization() {
    let h = Harness::with_options(serial_options(true), Names::default());
    let q = Arc::new(QueueContext::new(100, 0, 0));
    h.submit(&q, &[kernel_packet(0x1000, 0)]);
    let b = FakeBackend {
        signals: h.signals.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut retired = 0;
    while h.engine.in_flight() > 0 && Instant::now() < deadline {
        retired += h.engine.lend_completion(&b, 16);
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(retired, 0);
    let (outcome, _, _) = h.finish();
    assert_eq!(outcome.metadata.dispatches, 1);
}

/// The flush has the writer's outcome once the sinks are finished, not once
/// the writer thread has freed them and ended (the app's exit waited for
/// that: 0.2-0.35 ms of unmapping buffers and polling the thread's end on
/// the 20 µs mix).
#[test]
fn the_flush_has_the_outcome_before_the_writer_frees_its_sinks() {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions::default()));
    for n in 1..=10 {
        assert!(engine.records.push(numbered_dispatch(n)).is_ok());
    }
    let e = engine.clone();
    let writer = std::thread::spawn(move || {
        let mut sinks: Vec<Box<dyn RecordSink + Send>> = vec![Box::new(NullSink)];
        e.run_writer(
            &mut sinks,
            Box::new(Names::default()),
            &RunInfo::default(),
            &[],
        );
        // Freeing the sinks, slowly (large buffers unmapped, files closed
        // on a slow file system).
        std::thread::sleep(Duration::from_secs(2));
        drop(sinks);
    });
    engine.begin_shutdown(Duration::from_millis(10));
    engine.stop_writer();
    let t0 = Instant::now();
    let outcome = engine
        .join_writer(Duration::from_secs(5), Duration::from_secs(30))
        .expect("the writer finished");
    let took = t0.elapsed();
    assert_eq!(outcome.metadata.dispatches, 10);
    assert_eq!(outcome.sink_failures, vec![None]);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(!writer.is_finished(), "the sink is still being dropped");
    writer.join().unwrap();
}

/// When a lender finds a sink short of room, the writer thread makes room
/// in that sink alone (`make_room`): the others keep their buffers (the
/// Perfetto sink its open bundle, which a flush would close early and
/// deflate on the writer thread: on the 51,200-dispatch mix that was half
/// of the writer thread's CPU).
#[test]
fn a_lenders_request_makes_room_in_the_sink_short_of_it_alone() {
    let sink = |room: u64| {
        let (room, flushes) = (Arc::new(AtomicU64::new(room)), Arc::new(AtomicU64::new(0)));
        let s = RoomSink {
            room: room.clone(),
            records: Arc::new(AtomicU64::new(0)),
            flushes: flushes.clone(),
        };
        (s, room, flushes)
    };
    let (short, short_room, short_flushes) = sink(100);
    let (roomy, roomy_room, roomy_flushes) = sink(1 << 20);
    let mut sinks = writer::Sinks::new(vec![Box::new(short), Box::new(roomy)]);
    sinks.make_room_for_lenders();
    assert_eq!(short_flushes.load(Ordering::SeqCst), 1);
    assert_eq!(short_room.load(Ordering::SeqCst), 1 << 20, "room made");
    assert_eq!(roomy_flushes.load(Ordering::SeqCst), 0);
    assert_eq!(roomy_room.load(Ordering::SeqCst), 1 << 20);
}

/// An engine (a record queue of `record_queue`) with `n` dispatches
/// intercepted and finished, its completion job set up but no completion
/// thread running (tests that lend or flush alone), and the backend that
/// reads their signals.
fn finished_without_a_completion_thread(
    record_queue: usize,
    n: usize,
) -> (Engine<FakeSignal>, FakeBackend) {
    let engine = Engine::<FakeSignal>::new(EngineOptions {
        record_queue,
        ..EngineOptions::default()
    });
    let signals = Signals::new();
    let pool = FakePool::new(signals.clone(), n.max(64));
    let q = Arc::new(QueueContext::new(100, 0, 0));
    for _ in 0..n {
        engine.intercept(&q, &[kernel_packet(0x1000, 0)], &pool, |_| {});
    }
    for s in &signals.value[..n] {
        s.store(0, Ordering::SeqCst);
    }
    engine.set_up_completion_job();
    (engine, FakeBackend { signals })
}

/// A lender takes no more published dispatches and retires no more than
/// the record queue's free half holds (each may queue a record: the call's,
/// the dispatch's): it never waits for the writer. (It took everything
/// published, and each call's record went into the queue, waiting for the
/// writer thread once the queue was full: the app's wait held for as long.)
#[test]
fn a_lender_queues_no_more_records_than_half_the_queue_takes() {
    let (engine, backend) = finished_without_a_completion_thread(64, 40);
    for n in 1..=24 {
        assert!(engine.records.push(numbered_dispatch(n)).is_ok());
    }
    // Room: 32 - 24 = 8, so 4 entries taken (4 call records) and 4 retired.
    assert_eq!(engine.lend_completion(&backend, 16), 4);
    assert_eq!(engine.records.len(), 32);
    assert_eq!(
        engine.lend_completion(&backend, 16),
        0,
        "the free half is used"
    );
}

/// A lender retires finished copies too, and so completes the app's
/// signal of a copy the app waits for on its own thread. They were left to
/// the completion thread alone, which on a machine whose cores the app's
/// spinning wait and the device fill waits for a scheduler tick (4 ms here)
/// before it runs: on the 6.4 memcpy_mix, 15 of 40 kernels after a copy
/// started 3.5-7.9 ms after it. Copies count against the lender's budget.
#[test]
fn a_lender_retires_finished_copies_and_completes_the_apps_signals() {
    let (engine, backend) = finished_without_a_completion_thread(64, 0);
    let signals = backend.signals.clone();
    let pool = FakePool::new(signals.clone(), 8);
    let apps = [2500u64, 2501, 2502];
    let mut ours = Vec::new();
    for app in apps {
        signals.value[Signals::idx(app)].store(1, Ordering::SeqCst);
        engine.trace_copy(&pool, app, h2d(64), |s| ours.push(s), |_| true);
    }
    // The first two copies finished; the third still runs.
    for &s in &ours[..2] {
        signals.value[Signals::idx(s)].store(0, Ordering::SeqCst);
    }
    let app_value = |i: usize| signals.value[Signals::idx(apps[i])].load(Ordering::SeqCst);
    assert_eq!(
        engine.lend_completion(&backend, 1),
        1,
        "one copy: the budget"
    );
    assert_eq!(engine.lend_completion(&backend, 16), 1, "the other one");
    assert_eq!((app_value(0), app_value(1), app_value(2)), (0, 0, 1));
    assert_eq!(engine.lend_completion(&backend, 16), 0);
    assert_eq!(engine.counters().copies_lent.load(Ordering::SeqCst), 2);
    assert_eq!(engine.counters().completions_lent.load(Ordering::SeqCst), 0);
    assert_eq!(engine.copies_in_flight(), 1);
    let mut recorded = 0;
    while let Some(r) = engine.records.pop() {
        assert!(matches!(r, Record::MemoryCopy(_)));
        recorded += 1;
    }
    assert_eq!(recorded, 2);
    // The copy still running is the completion thread's (or a later
    // lender's) once it finishes.
    signals.value[Signals::idx(ours[2])].store(0, Ordering::SeqCst);
    assert_eq!(engine.lend_completion(&backend, 16), 1);
    assert_eq!(app_value(2), 0);
}

/// The flush retires and settles in the completion thread's place
/// (`begin_shutdown_here`): with no completion thread running at all (one
/// napping through the flush, or left without a core), nothing stays in
/// flight and the records are closed at once. `begin_shutdown` alone waits
/// for the thread and gives up with every dispatch still in flight.
#[test]
fn the_flush_settles_without_waiting_for_the_completion_thread() {
    let (engine, backend) = finished_without_a_completion_thread(256, 40);
    assert_eq!(
        engine.begin_shutdown_here(&backend, Duration::from_secs(5)),
        0
    );
    assert_eq!(engine.in_flight(), 0);
    assert!(engine.records_closed());
    // Each dispatch's call record and its dispatch record, nothing lost.
    assert_eq!(engine.records.len(), 80);
    assert_eq!(engine.counters().lost.load(Ordering::Relaxed), 0);

    let (engine, _backend) = finished_without_a_completion_thread(256, 40);
    assert_eq!(engine.begin_shutdown(Duration::from_millis(50)), 40);
    assert!(!engine.records_closed());
}

/// The flush's own turns are bounded by its deadline: with a recorded
/// dispatch that never finishes while app threads keep launching kernels
/// after the stop that finish at once, every turn retires something, and
/// `begin_shutdown_here` still gives up in time, counting the one left.
#[test]
fn the_flush_gives_up_in_time_while_other_threads_keep_finishing_kernels() {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        record_queue: 256,
        ..EngineOptions::default()
    }));
    let signals = Signals::new();
    let pool = FakePool::new(signals.clone(), 64);
    let queue = Arc::new(QueueContext::new(100, 0, 0));
    let mut stuck = 0;
    // Recorded; its signal is never set.
    engine.intercept(&queue, &[kernel_packet(0x1000, 0)], &pool, |out| {
        stuck = out[0].completion_signal();
    });
    engine.set_up_completion_job();
    engine.keep_guard_after_stop();
    // Each read of the stuck signal: another app thread launches one more
    // kernel (tracked for the ring guard only), which finishes at once.
    let launched = Arc::new(AtomicU64::new(0));
    let backend = {
        let (e, launched, inner_signals) = (engine.clone(), launched.clone(), signals.clone());
        Arc::new(ActingOnRead {
            inner: FakeBackend { signals },
            before_read: move |signal| {
                if signal != stuck {
                    return;
                }
                e.intercept(&queue, &[kernel_packet(0x2000, 0)], &pool, |out| {
                    for p in out {
                        let s = p.completion_signal();
                        if s != 0 {
                            inner_signals.value[Signals::idx(s)].store(0, Ordering::SeqCst);
                        }
                    }
                });
                launched.fetch_add(1, Ordering::Relaxed);
            },
        })
    };
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (e, b) = (engine.clone(), backend.clone());
        std::thread::spawn(move || {
            let _ = tx.send(e.begin_shutdown_here(&*b, Duration::from_millis(200)));
        });
    }
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)),
        Ok(1),
        "the flush did not give up in time"
    );
    assert!(launched.load(Ordering::Relaxed) > 1);
}

/// An interceptor that finds the hand-off queue full moves what is published
/// into the completion thread's list itself when that state is free, instead
/// of waiting for the thread to wake and get a core (on the 6.4 mix the
/// thread's pass that took ~4,000 entries at once took ~0.6 ms of the device's
/// core). With no completion thread running, 40 launches through a hand-off
/// queue of 8 are all tracked and none is lost; waiting for room instead, 32
/// would be given up after the wait.
#[test]
fn an_interceptor_finding_the_hand_off_queue_full_takes_the_entries_itself() {
    let engine = Engine::<FakeSignal>::new(EngineOptions {
        handoff_queue: 8,
        pool_wait: Duration::from_millis(50),
        ..EngineOptions::default()
    });
    engine.set_up_completion_job();
    let signals = Signals::new();
    let pool = FakePool::new(signals.clone(), 64);
    let q = Arc::new(QueueContext::new(100, 0, 0));
    for _ in 0..40 {
        engine.intercept(&q, &[kernel_packet(0x1000, 0)], &pool, |_| {});
    }
    assert_eq!(engine.counters.lost.load(Ordering::Relaxed), 0);
    assert_eq!(engine.in_flight(), 40);
    // The completion thread's list holds the rest.
    assert!(engine.pending.len() <= 8);
}

/// An interceptor that takes what is published also writes as many queued
/// records in the writer's place: the calls' records it just queued, which
/// the writer thread would otherwise write on a core of its own (~2 ms of
/// the device's core on the 6.4 mix). Every record still reaches the sink
/// once, in queue order.
#[test]
fn an_interceptor_that_takes_the_entries_writes_their_records_too() {
    let engine = Arc::new(Engine::<FakeSignal>::new(EngineOptions {
        handoff_queue: 8,
        pool_wait: Duration::from_millis(50),
        ..EngineOptions::default()
    }));
    let collected = Arc::new(Mutex::new(Collected::default()));
    let writer = spawn_writer(engine.clone(), Box::new(CollectSink(collected.clone())));
    engine.set_up_completion_job();
    let signals = Signals::new();
    let pool = FakePool::new(signals.clone(), 512);
    let q = Arc::new(QueueContext::new(100, 0, 0));
    // Once the writer has started (before, there is nothing to lend to).
    while engine.writer_job().is_none() {
        std::thread::yield_now();
    }
    for _ in 0..400 {
        engine.intercept(&q, &[kernel_packet(0x1000, 0)], &pool, |_| {});
    }
    let lent = engine.counters().lent.load(Ordering::Relaxed);
    assert!(lent >= 200, "{lent} records written by the interceptor");
    engine.stop_writer();
    writer.join().unwrap();
    let c = collected.lock().unwrap();
    // Each call's record (the dispatches never finished: no dispatch record).
    assert_eq!(c.intercepts.len(), 400 - engine.pending.len());
    assert_eq!(engine.counters().lost.load(Ordering::Relaxed), 0);
}

/// The completion thread's own pass takes at most OWN_TAKE (512) of what is
/// published (a pass that took ~4,000 at once took ~0.6 ms of a core on the
/// 6.4 mix; the rest waits for later passes, or for an interceptor that finds
/// the queue full), but everything (less the newest entry, as always) when an
/// interceptor waits for it.
#[test]
fn the_completion_threads_own_pass_takes_a_bounded_share_of_what_is_published() {
    let (engine, backend) = finished_without_a_completion_thread(1 << 13, 1_000);
    assert_eq!(engine.pending.len(), 1_000);
    assert!(engine.complete_here(&backend));
    assert_eq!(engine.pending.len(), 1_000 - 512);
    engine.urgent.store(true, Ordering::Release);
    engine.complete_here(&backend);
    assert_eq!(engine.pending.len(), 1);
}

/// The atomics every interceptor call writes or reads (`recording_calls`,
/// `in_flight`, `ids`, `state`; `completion_wake` when nothing is in
/// flight) and those the completion thread moves at every pass or
/// retirement (`completion_passes`, `counters`) each have their cache lines
/// to themselves: `recording_calls` shared a line with `counters.completed`
/// and `writer_progress`, and padding them cut the interceptor's CPU per
/// call by about a tenth (`bench_interceptor_cost_per_dispatch`, session
/// 24).
#[test]
fn the_hot_atomics_share_no_cache_line_with_other_fields() {
    let e = Engine::<FakeSignal>::new(EngineOptions::default());
    let base = &e as *const _ as usize;
    macro_rules! field {
        ($f:ident) => {
            (
                stringify!($f),
                &e.$f as *const _ as usize - base,
                std::mem::size_of_val(&e.$f),
            )
        };
    }
    // A field that starts on a line and fills whole lines shares none.
    for (name, offset, size) in [
        field!(recording_calls),
        field!(in_flight),
        field!(ids),
        field!(state),
        field!(completion_wake),
        field!(completion_passes),
        field!(counters),
    ] {
        assert!(
            offset % 64 == 0 && size % 64 == 0,
            "{name}: bytes {offset}..{} share a cache line with a neighbour",
            offset + size
        );
    }
}

/// Kernels handed over by the code-object hook wake the writer, so it
/// learns them while the app is still loading: its idle nap grows to
/// `WRITER_IDLE_MAX`, and a writer that slept through the load learned
/// 256 kernels and wrote the records queued since in one burst amid the
/// app's first kernels (25 ms into the 20 µs mix on 5.2), taking the
/// emulated device's core for up to 3 ms (session 24).
#[test]
fn loaded_kernels_wake_the_writer() {
    let e = Engine::<FakeSignal>::new(EngineOptions::default());
    let sleeper = e.writer_wake.sleeper();
    e.push_loaded_kernels(LoadedKernels::default());
    let t = Instant::now();
    sleeper.sleep(
        crate::wait::SleepKind::Parked,
        Duration::from_secs(10),
        || false,
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// How far each kind of pass reads, with 1,000 dispatches in flight on one
/// queue: the first 600 finished, then 20 unfinished, then 380 finished
/// (as a second queue's would be, behind the first's). An ordinary pass
/// reads the oldest SCAN_WINDOW (256); a pass while an interceptor waits
/// (urgent) reads on up to the run of unfinished ones, not past it (reading
/// everything each time was most of the completion thread's CPU on the
/// 6.4 mix at 51,200 dispatches), unless it has found nothing finished
/// before the run (what the interceptor waits for may be behind it);
/// every FULL_SCAN_EVERY-th pass reads everything.
#[test]
fn an_urgent_pass_reads_up_to_the_first_unfinished_run_and_a_full_pass_past_it() {
    // 1,000 finished dispatches published, those in `unfinished` not.
    let with_unfinished = |unfinished: std::ops::Range<usize>| {
        let (engine, backend) = finished_without_a_completion_thread(1 << 12, 1_000);
        for s in &backend.signals.value[unfinished] {
            s.store(1, Ordering::SeqCst);
        }
        (engine, backend)
    };
    let (engine, backend) = with_unfinished(600..620);
    assert!(engine.own_turn_here(&backend, 1));
    assert_eq!(
        engine.in_flight(),
        1_000 - 256,
        "an ordinary pass reads the window"
    );

    let (engine, backend) = with_unfinished(600..620);
    engine.urgent.store(true, Ordering::Release);
    assert!(engine.own_turn_here(&backend, 1));
    assert_eq!(
        engine.in_flight(),
        400,
        "an urgent pass stops at the unfinished run"
    );
    engine.urgent.store(false, Ordering::Release);
    assert!(engine.own_turn_here(&backend, 16));
    assert_eq!(
        engine.in_flight(),
        20,
        "a full pass finds the finished ones behind it"
    );

    // Nothing finished in front of the unfinished run: the urgent pass reads
    // past it (999 taken, the newest left published; 979 of them finished).
    let (engine, backend) = with_unfinished(0..20);
    engine.urgent.store(true, Ordering::Release);
    assert!(engine.own_turn_here(&backend, 1));
    assert_eq!(
        engine.in_flight(),
        21,
        "an urgent pass that found nothing reads on"
    );
}
