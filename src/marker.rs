//! ROCTx marker trace (`--marker-trace`) and `--kernel-rename`: the records,
//! the per-thread state behind `roctxRangePushA` / `roctxRangePop`, message
//! interning, and the hand-off to the engine.
//!
//! The tool library's ROCTx entry points (`tool/src/roctx.rs`, the FFI edge)
//! call the functions here on the application's threads. Nothing here takes
//! a global lock, and in steady state nothing allocates:
//! - a message is interned once per thread ([`intern`]): a thread-local
//!   table maps the bytes to a leaked `&'static str`, so a record carries the
//!   text as a pointer and stays `Copy`; a message seen again costs a hash
//!   lookup. Distinct texts are capped ([`MESSAGE_BYTES_CAP`] bytes in all);
//!   past the cap a message is recorded as [`MESSAGE_TABLE_FULL`].
//! - push/pop ranges are paired on the calling thread (a thread-local stack
//!   whose storage is kept), and leave as one [`MarkerRecord`] at the pop.
//! - start/stop ranges may end on another thread: the start and the stop
//!   leave as two records ([`RangeStartRecord`], [`RangeStopRecord`]) and the
//!   writer thread pairs them by range id ([`ProcessRanges`]).
//!
//! Records go to the engine through a target set by the session
//! ([`set_target`]); records made before the session exists wait in a
//! bounded early queue that the session drains when it starts
//! ([`drain_early`]): ROCTx calls before `hsa_init` ([`emit`] before the
//! target is set), and calls made while the session still starts beside the
//! app (the target keeps them there with [`keep_early`] rather than make the
//! app's thread wait for the start).
//!
//! `--kernel-rename`: when on ([`set_kernel_rename`]), the engine's
//! interceptor asks [`current_region`] for the top of the dispatching
//! thread's rename stack and hands a [`KernelRegionRecord`] to the writer
//! with the batch; the writer names those dispatches after it in every
//! output. The rename stack follows rocprofv3's exactly (rocprofiler-sdk
//! 1.0.0, `kernel_rename_callback` in `rocprofiler-sdk-tool/tool.cpp`):
//! [`rename_mark`] pushes a mark's text (never popped by itself),
//! [`rename_push`] a push/pop range's text, [`rename_pop`] (a pop that
//! closed a range) drops the top, whatever it is; NULL texts are not pushed;
//! start/stop ranges take no part.
//!
//! Owns the marker records and their per-thread state; must not call the
//! runtime or know about ROCTx's ABI (the tool does).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crossbeam_queue::ArrayQueue;

use crate::record::Record;

/// What a [`MarkerRecord`] is. The names are rocprofv3's operation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    /// `roctxMarkA`: an instant (start = end).
    Mark,
    /// `roctxRangePushA` .. `roctxRangePop` on one thread.
    ThreadRange,
    /// `roctxRangeStartA` .. `roctxRangeStop`, possibly ended on another
    /// thread.
    ProcessRange,
}

impl MarkerKind {
    /// rocprofv3's operation name (`roctxMarkA`, `roctxThreadRangeA`,
    /// `roctxProcessRangeA`).
    pub fn operation(self) -> &'static str {
        match self {
            MarkerKind::Mark => "roctxMarkA",
            MarkerKind::ThreadRange => "roctxThreadRangeA",
            MarkerKind::ProcessRange => "roctxProcessRangeA",
        }
    }
}

/// rocprofv3's kind (domain) name of marker records.
pub const MARKER_DOMAIN: &str = "MARKER_CORE_RANGE_API";

/// One finished marker: a mark, or a range with both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerRecord {
    /// Mark, push/pop range or start/stop range.
    pub kind: MarkerKind,
    /// Per-process marker id, from 1 in call order of the mark, push or
    /// start (rocprofv3's internal correlation id of the record).
    pub correlation_id: u64,
    /// The thread that called `roctxMarkA`, `roctxRangePushA` or
    /// `roctxRangeStartA` (the record's thread, as rocprofv3 has it).
    pub thread_id: u32,
    /// The thread that ended the range (`thread_id` for marks and push/pop).
    pub end_thread_id: u32,
    /// Nesting level of a push/pop range on its thread (0 = outermost); 0
    /// otherwise.
    pub depth: u32,
    /// `CLOCK_BOOTTIME` ns of the call (mark) or the start.
    pub start_ns: u64,
    /// `CLOCK_BOOTTIME` ns of the end (= `start_ns` for a mark).
    pub end_ns: u64,
    /// The text given to ROCTx (interned for the rest of the process).
    pub message: &'static str,
}

/// `roctxRangeStartA`: the open half of a start/stop range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeStartRecord {
    /// The id `roctxRangeStartA` returned (the key of the stop).
    pub range_id: u64,
    /// Marker id (see [`MarkerRecord::correlation_id`]).
    pub correlation_id: u64,
    /// The starting thread.
    pub thread_id: u32,
    /// When it started.
    pub start_ns: u64,
    /// The text.
    pub message: &'static str,
}

/// `roctxRangeStop`, on any thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeStopRecord {
    /// The id given to `roctxRangeStop`.
    pub range_id: u64,
    /// The stopping thread.
    pub thread_id: u32,
    /// When it stopped.
    pub end_ns: u64,
}

/// `--kernel-rename`: the dispatches with correlation ids
/// `first_correlation_id .. first_correlation_id + count` were enqueued
/// inside the push/pop range `region` of their thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRegionRecord {
    /// Correlation id of the batch's first dispatch.
    pub first_correlation_id: u64,
    /// Dispatches of the batch.
    pub count: u32,
    /// The innermost open range's text.
    pub region: &'static str,
}

/// `roctxNameOsThread`: a name for a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadNameRecord {
    /// The named thread (the caller).
    pub thread_id: u32,
    /// The name.
    pub name: &'static str,
}

/// Most bytes of distinct message text kept for the process.
pub const MESSAGE_BYTES_CAP: usize = 64 << 20;
/// The text recorded for messages past [`MESSAGE_BYTES_CAP`].
pub const MESSAGE_TABLE_FULL: &str = "<rprof: ROCTx message table full>";

static MESSAGE_BYTES: AtomicUsize = AtomicUsize::new(0);
static NEXT_MARKER: AtomicU64 = AtomicU64::new(1);
static KERNEL_RENAME: AtomicBool = AtomicBool::new(false);
/// Push/pop ranges pushed and not popped, on every thread (one atomic add per
/// push and pop; no lock).
static OPEN_PUSH_RANGES: AtomicU64 = AtomicU64::new(0);

/// An open push/pop range on its thread.
#[derive(Debug, Clone, Copy)]
struct Open {
    message: &'static str,
    correlation_id: u64,
    start_ns: u64,
}

thread_local! {
    static MESSAGES: RefCell<HashMap<&'static str, ()>> = RefCell::new(HashMap::new());
    static STACK: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
    static RENAME: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// The text as a `&'static str`: the same pointer for the same text on one
/// thread (allocated and leaked the first time only), lossily decoded from
/// UTF-8.
pub fn intern(bytes: &[u8]) -> &'static str {
    let text = String::from_utf8_lossy(bytes);
    let found = MESSAGES
        .try_with(|m| m.borrow().get_key_value(text.as_ref()).map(|(k, _)| *k))
        .ok()
        .flatten();
    if let Some(k) = found {
        return k;
    }
    if MESSAGE_BYTES.fetch_add(text.len(), Ordering::Relaxed) + text.len() > MESSAGE_BYTES_CAP {
        return MESSAGE_TABLE_FULL;
    }
    let leaked: &'static str = Box::leak(text.into_owned().into_boxed_str());
    let _ = MESSAGES.try_with(|m| m.borrow_mut().insert(leaked, ()));
    leaked
}

/// A new marker id (1, 2, ...).
pub fn next_marker_id() -> u64 {
    NEXT_MARKER.fetch_add(1, Ordering::Relaxed)
}

/// `roctxRangePushA` on this thread: returns the nesting level before the
/// push (0 for an outermost range).
pub fn range_push(message: &'static str, correlation_id: u64, start_ns: u64) -> usize {
    STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            s.push(Open {
                message,
                correlation_id,
                start_ns,
            });
            OPEN_PUSH_RANGES.fetch_add(1, Ordering::Relaxed);
            s.len() - 1
        })
        .unwrap_or(0)
}

/// `roctxRangePop` on this thread: the finished range, and the nesting level
/// after the pop; `None` if no range was open.
pub fn range_pop(thread_id: u32, end_ns: u64) -> Option<(MarkerRecord, usize)> {
    STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let open = s.pop()?;
            OPEN_PUSH_RANGES.fetch_sub(1, Ordering::Relaxed);
            let depth = s.len();
            Some((
                MarkerRecord {
                    kind: MarkerKind::ThreadRange,
                    correlation_id: open.correlation_id,
                    thread_id,
                    end_thread_id: thread_id,
                    depth: depth as u32,
                    start_ns: open.start_ns,
                    end_ns,
                    message: open.message,
                },
                depth,
            ))
        })
        .ok()
        .flatten()
}

/// Push/pop ranges pushed and not popped so far, on every thread (also
/// threads that ended with ranges open). At exit these are the ranges that
/// are not written: as in rocprofv3, a push/pop range is recorded at its
/// pop.
pub fn unpopped_ranges() -> u64 {
    OPEN_PUSH_RANGES.load(Ordering::Relaxed)
}

/// The warning for ranges still open at exit (`None` when there are none):
/// `unpopped` push/pop ranges ([`unpopped_ranges`]) and `unstopped`
/// start/stop ranges (the writer's [`ProcessRanges::unfinished`]).
pub fn unclosed_ranges_warning(unpopped: u64, unstopped: u64) -> Option<String> {
    if unpopped == 0 && unstopped == 0 {
        return None;
    }
    let plural = |n: u64| if n == 1 { "" } else { "s" };
    Some(format!(
        "rprof: warning: {unpopped} ROCTx push/pop range{} never popped and {unstopped} start/stop range{} \
         never stopped by the end of the process are not in the outputs (a range is recorded when it \
         ends, as rocprofv3 does; marks and closed ranges are all there)",
        plural(unpopped),
        plural(unstopped),
    ))
}

/// Push/pop ranges open on this thread.
pub fn open_ranges() -> usize {
    STACK.try_with(|s| s.borrow().len()).unwrap_or(0)
}

/// Turns `--kernel-rename` on or off for the process.
pub fn set_kernel_rename(on: bool) {
    KERNEL_RENAME.store(on, Ordering::Release);
}

/// `--kernel-rename`, `roctxMarkA` on this thread (after the call, as
/// rocprofv3 at the mark's exit): the text is pushed on the rename stack and
/// names the thread's next kernels until a push covers it or a pop drops it
/// (rocprofv3 never pops a mark by itself). `None` (a NULL text) pushes
/// nothing.
pub fn rename_mark(text: Option<&'static str>) {
    rename_push(text);
}

/// `--kernel-rename`, `roctxRangePushA` on this thread: the range's text goes
/// on the rename stack; `None` (NULL) pushes nothing, as in rocprofv3 (whose
/// matching pop then drops whatever is on top).
pub fn rename_push(text: Option<&'static str>) {
    if let Some(t) = text {
        let _ = RENAME.try_with(|s| s.borrow_mut().push(t));
    }
}

/// `--kernel-rename`, a `roctxRangePop` that closed a push/pop range on this
/// thread: the top of the rename stack goes, be it the range's text or a mark
/// made inside it (as in rocprofv3). A pop with no range open does not come
/// here (rocprofv3 sees no range end then).
pub fn rename_pop() {
    let _ = RENAME.try_with(|s| s.borrow_mut().pop());
}

/// With `--kernel-rename` on: the top of the calling thread's rename stack
/// (what its kernels are named after: the innermost push/pop range, or a
/// mark made since). `None` when off or empty.
#[inline]
pub fn current_region() -> Option<&'static str> {
    if !KERNEL_RENAME.load(Ordering::Relaxed) {
        return None;
    }
    RENAME
        .try_with(|s| s.borrow().last().copied())
        .ok()
        .flatten()
}

/// Where records go once the session runs.
pub type Target = fn(Record);

static TARGET: OnceLock<Target> = OnceLock::new();
static EARLY: OnceLock<ArrayQueue<Record>> = OnceLock::new();
static EARLY_LOST: AtomicU64 = AtomicU64::new(0);
/// A drain running now ([`drain_early`]): a record it has taken but not
/// yet handed on is in neither the queue nor the engine, so [`has_early`]
/// counts it as early still.
static EARLY_DRAINS: AtomicUsize = AtomicUsize::new(0);
/// Drains run one at a time, so the records of the early queue are handed on
/// in the order they were kept. Taken only when records are early: never in
/// steady state.
static DRAIN_LOCK: Mutex<()> = Mutex::new(());

thread_local! {
    /// The calling thread runs a drain: a record it hands on that comes
    /// back here (the target pushing it) must not start another.
    static DRAINING_HERE: Cell<bool> = const { Cell::new(false) };
}
/// Records kept before the session starts.
pub const EARLY_CAPACITY: usize = 4096;

/// Sets where records go from now on (once per process).
pub fn set_target(target: Target) {
    let _ = TARGET.set(target);
}

/// Hands a record to the target, or to the early queue while there is none.
pub fn emit(rec: Record) {
    if let Some(t) = TARGET.get() {
        t(rec);
        return;
    }
    keep_early(rec);
}

/// Puts a record in the early queue, behind those already there (counted
/// as lost if the queue is full): for records made before the target is
/// set, and for a target whose destination is not ready yet.
pub fn keep_early(rec: Record) {
    if early_queue().push(rec).is_err() {
        EARLY_LOST.fetch_add(1, Ordering::Relaxed);
    }
}

/// Creates the early queue now (~0.5 MB, touched page by page as it is
/// made: ~0.25 ms), off the app's threads: the session's start does this
/// first, so that a marker made while it runs finds the queue ready.
pub fn prepare_early() {
    early_queue();
}

/// The early queue, made at the first use.
fn early_queue() -> &'static ArrayQueue<Record> {
    EARLY.get_or_init(|| ArrayQueue::new(EARLY_CAPACITY))
}

/// Whether records are early still: in the queue, or taken by a drain that
/// has not handed them on yet (a few loads; false before any record was
/// kept). A caller that must not overtake them drains first
/// ([`drain_early`], which waits for a drain running elsewhere).
pub fn has_early() -> bool {
    EARLY.get().is_some_and(|q| !q.is_empty()) || EARLY_DRAINS.load(Ordering::SeqCst) > 0
}

/// Takes the records in the early queue, in call order, and the number
/// that did not fit. Drains run one at a time (a drain running on another
/// thread is waited for, so every record it took has been handed on when
/// this returns); on a thread that is draining already (`f` came back here)
/// it returns at once, the outer drain handing the records on in order.
/// Takes at most as many as the queue held, so `f` may put a record back
/// ([`keep_early`]: it goes behind the rest, and stays for a later drain)
/// without the drain running on.
pub fn drain_early(mut f: impl FnMut(Record)) -> u64 {
    let Some(q) = EARLY.get() else {
        return EARLY_LOST.swap(0, Ordering::Relaxed);
    };
    if DRAINING_HERE.with(Cell::get) {
        return 0;
    }
    struct Draining;
    impl Drop for Draining {
        fn drop(&mut self) {
            DRAINING_HERE.with(|d| d.set(false));
            EARLY_DRAINS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _one_at_a_time = DRAIN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // Counted before the first pop (both SeqCst, as the queue's own
    // indices): whoever finds the queue emptied by it sees the drain.
    EARLY_DRAINS.fetch_add(1, Ordering::SeqCst);
    DRAINING_HERE.with(|d| d.set(true));
    let _draining = Draining;
    for _ in 0..q.len() {
        match q.pop() {
            Some(r) => f(r),
            None => break,
        }
    }
    EARLY_LOST.swap(0, Ordering::Relaxed)
}

/// Pairs start/stop ranges on the writer thread.
#[derive(Debug, Default)]
pub struct ProcessRanges {
    open: HashMap<u64, RangeStartRecord>,
}

impl ProcessRanges {
    /// Remembers a start.
    pub fn start(&mut self, r: RangeStartRecord) {
        self.open.insert(r.range_id, r);
    }

    /// The finished range of a stop, if its start was seen.
    pub fn stop(&mut self, r: &RangeStopRecord) -> Option<MarkerRecord> {
        let s = self.open.remove(&r.range_id)?;
        Some(MarkerRecord {
            kind: MarkerKind::ProcessRange,
            correlation_id: s.correlation_id,
            thread_id: s.thread_id,
            end_thread_id: r.thread_id,
            depth: 0,
            start_ns: s.start_ns,
            end_ns: r.end_ns.max(s.start_ns),
            message: s.message,
        })
    }

    /// Ranges started and never stopped.
    pub fn unfinished(&self) -> usize {
        self.open.len()
    }
}

/// Kernel regions by correlation id, on the writer thread.
#[derive(Debug, Default)]
pub struct KernelRegions {
    by_correlation: HashMap<u64, &'static str>,
}

impl KernelRegions {
    /// Remembers the region of a batch.
    pub fn add(&mut self, r: &KernelRegionRecord) {
        for i in 0..u64::from(r.count) {
            self.by_correlation
                .insert(r.first_correlation_id.wrapping_add(i), r.region);
        }
    }

    /// The region of a dispatch (forgotten once asked).
    pub fn take(&mut self, correlation_id: u64) -> Option<&'static str> {
        if self.by_correlation.is_empty() {
            return None;
        }
        self.by_correlation.remove(&correlation_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(correlation_id: u64) -> Record {
        Record::Marker(MarkerRecord {
            kind: MarkerKind::Mark,
            correlation_id,
            thread_id: 1,
            end_thread_id: 1,
            depth: 0,
            start_ns: correlation_id,
            end_ns: correlation_id,
            message: "m",
        })
    }

    fn id(r: &Record) -> u64 {
        match r {
            Record::Marker(m) => m.correlation_id,
            other => panic!("not a marker: {other:?}"),
        }
    }

    /// A target that is not ready yet puts records back (the session's
    /// target while it still starts): the drain takes only what the queue
    /// held, so it ends, and what went back stays in order for the next
    /// drain. (The only test of this binary that uses the early queue.)
    #[test]
    fn a_drain_whose_target_puts_records_back_ends_and_keeps_their_order() {
        assert!(!has_early());
        for i in 1..=3 {
            keep_early(mark(i));
        }
        assert!(has_early());
        let mut took = Vec::new();
        let lost = drain_early(|r| {
            if id(&r) == 3 {
                took.push(id(&r));
            } else {
                keep_early(r);
            }
        });
        assert_eq!((took.as_slice(), lost), (&[3][..], 0));
        assert!(has_early());
        // While a drain holds a record it has taken, the record counts as
        // early (nobody may push past it), and a record that comes back to
        // the drain on its thread does not start another (which would hand
        // the later records on before it).
        let mut rest = Vec::new();
        drain_early(|r| {
            assert!(has_early(), "record {} taken, not yet handed on", id(&r));
            assert_eq!(drain_early(|r| panic!("nested drain took {}", id(&r))), 0);
            rest.push(id(&r));
        });
        assert_eq!(rest, [1, 2]);
        assert!(!has_early());
        // Two threads draining at once hand the records on in order: one
        // drain at a time, each record handed on before the next is taken.
        for i in 1..=2000 {
            keep_early(mark(i));
        }
        let out = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|t| {
            for _ in 0..2 {
                t.spawn(|| {
                    drain_early(|r| {
                        std::thread::yield_now();
                        out.lock().unwrap().push(id(&r));
                    })
                });
            }
        });
        let out = out.into_inner().unwrap();
        assert_eq!(out, (1..=2000).collect::<Vec<_>>());
        assert!(!has_early());
    }

    #[test]
    fn interning_returns_one_pointer_per_text() {
        let a = intern(b"phase one");
        let b = intern(b"phase one");
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!(intern(b"x\xffy"), "x\u{fffd}y");
    }

    /// rocprofv3's rename stack (run inside the test above: the switch is
    /// process-wide): a mark names the next kernels until a push covers it
    /// or a pop drops it; a pop drops the top whatever it is (so a mark made
    /// inside a range is dropped by the range's pop, and the range stays on
    /// top); a NULL text pushes nothing.
    fn the_rename_stack_is_rocprofv3s() {
        assert_eq!(current_region(), None);
        rename_mark(Some("m1"));
        assert_eq!(current_region(), Some("m1"));
        rename_push(Some("r"));
        assert_eq!(current_region(), Some("r"));
        rename_mark(Some("in-r"));
        assert_eq!(current_region(), Some("in-r"));
        rename_pop();
        assert_eq!(current_region(), Some("r"));
        rename_push(None);
        rename_mark(None);
        assert_eq!(current_region(), Some("r"));
        rename_pop();
        assert_eq!(current_region(), Some("m1"));
        rename_pop();
        assert_eq!(current_region(), None);
        rename_pop();
        assert_eq!(current_region(), None);
    }

    #[test]
    fn push_pop_nest_and_report_levels() {
        std::thread::spawn(|| {
            assert_eq!(range_push("outer", 1, 10), 0);
            rename_push(Some("outer"));
            assert_eq!(range_push("inner", 2, 20), 1);
            rename_push(Some("inner"));
            set_kernel_rename(true);
            assert_eq!(current_region(), Some("inner"));
            let (inner, level) = range_pop(7, 30).unwrap();
            rename_pop();
            assert_eq!(level, 1);
            assert_eq!(
                (inner.message, inner.depth, inner.start_ns, inner.end_ns),
                ("inner", 1, 20, 30)
            );
            assert_eq!(current_region(), Some("outer"));
            let (outer, level) = range_pop(7, 40).unwrap();
            rename_pop();
            assert_eq!((outer.message, outer.depth, level), ("outer", 0, 0));
            assert!(range_pop(7, 50).is_none());
            assert_eq!(current_region(), None);
            the_rename_stack_is_rocprofv3s();
            set_kernel_rename(false);
            rename_mark(Some("off"));
            assert_eq!(current_region(), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn unclosed_ranges_are_counted_and_said() {
        let before = unpopped_ranges();
        std::thread::spawn(|| {
            range_push("left-open", 1, 10);
            range_push("closed", 2, 20);
            range_pop(1, 30).unwrap();
        })
        .join()
        .unwrap();
        // Other tests push and pop concurrently: at least ours is still open.
        assert!(unpopped_ranges() > before);
        assert_eq!(unclosed_ranges_warning(0, 0), None);
        assert_eq!(
            unclosed_ranges_warning(1, 2).unwrap(),
            "rprof: warning: 1 ROCTx push/pop range never popped and 2 start/stop ranges never \
             stopped by the end of the process are not in the outputs (a range is recorded when it \
             ends, as rocprofv3 does; marks and closed ranges are all there)"
        );
    }

    #[test]
    fn process_ranges_pair_across_threads() {
        let mut p = ProcessRanges::default();
        p.start(RangeStartRecord {
            range_id: 5,
            correlation_id: 9,
            thread_id: 1,
            start_ns: 100,
            message: "load",
        });
        assert!(p
            .stop(&RangeStopRecord {
                range_id: 6,
                thread_id: 2,
                end_ns: 150
            })
            .is_none());
        let r = p
            .stop(&RangeStopRecord {
                range_id: 5,
                thread_id: 2,
                end_ns: 200,
            })
            .unwrap();
        assert_eq!(
            (r.thread_id, r.end_thread_id, r.start_ns, r.end_ns),
            (1, 2, 100, 200)
        );
        assert_eq!(r.kind.operation(), "roctxProcessRangeA");
        assert_eq!(p.unfinished(), 0);
    }

    #[test]
    fn kernel_regions_cover_the_batch() {
        let mut k = KernelRegions::default();
        k.add(&KernelRegionRecord {
            first_correlation_id: 10,
            count: 3,
            region: "r",
        });
        assert_eq!(k.take(12), Some("r"));
        assert_eq!(k.take(12), None);
        assert_eq!(k.take(13), None);
        assert_eq!(k.take(10), Some("r"));
    }
}
