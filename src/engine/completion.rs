//! The completion thread: polls in-flight dispatches, reads their times and
//! hands finished records to the writer.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::Duration;

use super::{
    boottime_ns, clamp_times, CompletionBackend, DispatchSignal, Engine, GateState, InFlight,
    SerialGate, STOP_COMPLETION,
};
use crate::record::Record;
use crate::wait::{Doubling, Pace, SleepKind, Sleeper, Wait};

/// Longest a parked completion thread sleeps before looking again (it is
/// normally woken by the interceptor when work arrives).
const PARK_TIMEOUT: Duration = Duration::from_millis(50);

/// Idle passes spent yielding (not sleeping) while serialized dispatches
/// wait for a grant (or the app for a host-forwarded signal), before short
/// naps.
const SERIAL_YIELD_ROUNDS: u32 = 32;
/// Nap while serialized dispatches wait and nothing changes.
const SERIAL_NAP: Duration = Duration::from_micros(20);
/// The serialized / host-forwarded idle schedule.
const SERIAL_PACE: Pace = Pace::new(SERIAL_YIELD_ROUNDS, SERIAL_NAP);
/// How the completion thread waits for room in the record queue: 15
/// yields, then naps of 100 µs (bounded by [`super::WRITER_STALL`] without
/// writer progress).
const RECORD_PUSH_PACE: Pace = Pace::new(15, Duration::from_micros(100));
/// While completions flow and nobody waits for this thread, a pass should
/// retire about this many dispatches: after a pass that retired fewer, the
/// nap before the next doubles (up to `max_backoff`), after one that
/// retired four times as many it halves (down to `min_backoff`). Each pass
/// takes a core from the app or the device (on the 20 µs mix a pass every
/// 100 µs retired ~5 dispatches); timestamps do not depend on when they are
/// read.
const RETIRE_BATCH: usize = 64;
/// Most published entries the completion thread's own pass takes (unless
/// an interceptor waits for it, or at shutdown): ~60 µs of moving entries.
const OWN_TAKE: usize = 512;
/// How many of the oldest in-flight dispatches an ordinary pass reads.
const SCAN_WINDOW: usize = 256;
/// Every this many passes the completion thread reads every in-flight
/// signal, not only the oldest [`SCAN_WINDOW`].
const FULL_SCAN_EVERY: u64 = 16;
/// An ordinary pass stops after this many unfinished signals in a row:
/// dispatches finish roughly in submission order (in order within a
/// queue), so what follows a run of unfinished ones is unfinished too,
/// except on other queues, which full passes find.
const UNFINISHED_RUN: usize = 16;

/// The completion thread's view of `--serialize-kernels`: which agents'
/// tokens are held, and the readiness order.
#[derive(Debug, Default)]
struct Serializer {
    busy: Vec<bool>,
    next_seq: u64,
    best: Vec<Option<(u64, usize)>>,
}

impl Serializer {
    fn busy_mut(&mut self, agent: u32) -> &mut bool {
        let i = agent as usize;
        if self.busy.len() <= i {
            self.busy.resize(i + 1, false);
        }
        &mut self.busy[i]
    }

    /// Marks ready the dispatches whose queue reached them and opens the gate
    /// of the earliest ready dispatch of every agent whose token is free.
    /// Returns whether any state changed.
    fn advance<S: DispatchSignal>(
        &mut self,
        backend: &dyn CompletionBackend,
        tracked: &mut [InFlight<S>],
    ) -> bool {
        let mut changed = false;
        self.best.clear();
        for (i, e) in tracked.iter_mut().enumerate() {
            let agent = e.queue.agent_index as usize;
            let Some(g) = e.serial.as_mut() else { continue };
            if g.state == GateState::Waiting && backend.signal_value(g.ready.handle()) <= 0 {
                g.state = GateState::Ready;
                g.ready_seq = self.next_seq;
                self.next_seq += 1;
                changed = true;
            }
            if g.state == GateState::Ready {
                if self.best.len() <= agent {
                    self.best.resize(agent + 1, None);
                }
                if self.best[agent].is_none_or(|(seq, _)| g.ready_seq < seq) {
                    self.best[agent] = Some((g.ready_seq, i));
                }
            }
        }
        for agent in 0..self.best.len() {
            let Some((_, i)) = self.best[agent] else {
                continue;
            };
            let busy = self.busy_mut(agent as u32);
            if *busy {
                continue;
            }
            *busy = true;
            if let Some(g) = tracked[i].serial.as_mut() {
                g.state = GateState::Granted;
                backend.open_gate(g.gate.handle());
                changed = true;
            }
        }
        changed
    }

    /// A dispatch left tracking: give back its agent's token if it held it.
    fn release(&mut self, agent: u32, serial: Option<&SerialGate<impl DispatchSignal>>) {
        if serial.is_some_and(|g| g.state == GateState::Granted) {
            *self.busy_mut(agent) = false;
        }
    }
}

/// What one pass found among the tracked dispatches.
struct Scan {
    /// Finished dispatches, moved to the front of the tracked list.
    done: usize,
    /// The pass read every tracked signal.
    full: bool,
    /// Someone waits for this thread: a serialized dispatch for its grant,
    /// or the app for a signal forwarded by the host.
    latency_bound: bool,
}

/// What one turn of the completion loop did.
struct Turn {
    scan: Scan,
    /// Something was retired, dropped, let through or completed.
    progress: bool,
    after_stop: AfterStop,
}

/// What shutdown asks of the completion loop after a pass.
enum AfterStop {
    /// Not stopping (or still recycling for the ring guard): go on.
    Run,
    /// Recorded dispatches just settled and the guard stays: next pass.
    Again,
    /// Everything forgotten: the thread returns.
    Return,
}

/// What the completion thread works on, held by it between its passes'
/// rests, and by a lending app thread for one pass
/// ([`Engine::lend_completion`]).
#[derive(Debug)]
pub(super) struct CompletionJob<S> {
    /// Dispatches published and not yet retired, in submission order.
    tracked: VecDeque<InFlight<S>>,
    /// `--serialize-kernels`' grants (the thread's alone).
    serializer: Serializer,
    /// Memory copies taken from the copy queue and not yet retired (the
    /// thread's alone).
    copies: Vec<super::copies::CopyInFlight<S>>,
}

impl<S> CompletionJob<S> {
    /// Nothing tracked yet, with room for `tracked` dispatches and `copies`
    /// copies.
    fn with_capacity(tracked: usize, copies: usize) -> Self {
        CompletionJob {
            // In submission order; finished entries are moved to the front
            // and popped, so a pass moves only what finished (a `Vec` would
            // shift every unfinished entry after each pass).
            tracked: VecDeque::with_capacity(tracked),
            serializer: Serializer::default(),
            copies: Vec::with_capacity(copies),
        }
    }
}

/// The completion thread's idle schedule between passes.
struct Idle {
    /// Sleep between polls while dispatches are in flight and none completes.
    backoff: Doubling,
    /// Sleep after a pass that retired something ([`flow_nap`]).
    flowing: Doubling,
    /// Idle passes while someone waits for this thread.
    serial_idle: u32,
}

/// The nap after a pass that retired `retired` dispatches, sized so that a
/// pass retires about [`RETIRE_BATCH`] of them.
fn flow_nap(nap: &mut Doubling, retired: usize) -> Duration {
    if retired < RETIRE_BATCH {
        nap.step();
    } else if retired >= 4 * RETIRE_BATCH {
        nap.halve();
    }
    nap.current()
}

impl<S: DispatchSignal> Engine<S> {
    /// The completion loop. Returns after [`Engine::begin_shutdown`], once
    /// everything still tracked has been processed or given up on (counted
    /// as lost).
    ///
    /// Each pass: take what interceptors published, find what finished
    /// (the oldest few, or everything on a full pass), retire it, drop what
    /// destroyed queues left, settle at shutdown, let serialized kernels
    /// through, then rest by the idle schedule.
    pub fn run_completion(&self, backend: &dyn CompletionBackend) {
        *self.completion_job() = Some(CompletionJob::with_capacity(
            self.options.max_in_flight.max(1),
            self.copies.capacity(),
        ));
        // This thread's own passes, for the full scan every
        // FULL_SCAN_EVERY-th (a lender's pass never reads everything).
        let mut pass: u64 = 0;
        let mut idle = Idle {
            backoff: Doubling::new(self.options.min_backoff, self.options.max_backoff),
            flowing: Doubling::new(self.options.min_backoff, self.options.max_backoff),
            serial_idle: 0,
        };
        let sleeper = self.completion_wake.sleeper();
        loop {
            // This thread runs while dispatches are in flight: it keeps the
            // interceptor's fast clock fitted (a few loads when not due).
            rprof_abi::clock::calibrate_fast_clock();
            // A lending app thread is in a pass (a short one): never wait
            // for it; look again after the shortest backoff.
            let Some(mut held) = self.try_completion_job() else {
                sleeper.sleep(SleepKind::Backoff, self.options.min_backoff, || {
                    self.urgent.load(Ordering::Acquire)
                });
                continue;
            };
            let job = held
                .as_mut()
                .expect("the completion job is held until this thread returns");
            let turn = self.turn(backend, job, Some(pass));
            pass += 1;
            match turn.after_stop {
                AfterStop::Run => {}
                AfterStop::Again => continue,
                AfterStop::Return => {
                    self.forget_copies(&mut job.copies);
                    *held = None;
                    return;
                }
            }
            // The app waits for each copy's signal, which this thread
            // completes (a lending app thread too, but only between its
            // wait's slices): copies in flight make the rest latency-bound.
            let scan = Scan {
                latency_bound: turn.scan.latency_bound || !job.copies.is_empty(),
                ..turn.scan
            };
            let nothing_tracked = job.tracked.is_empty() && job.copies.is_empty();
            drop(held);
            self.rest(&sleeper, &mut idle, turn.progress, &scan, nothing_tracked);
        }
    }

    /// One turn of the completion loop on `job`: take what interceptors
    /// published, retire what finished (every tracked signal read when
    /// `own_pass` calls for a full scan), drop what destroyed queues left,
    /// settle copies and, once shutdown asks, the recorded dispatches; then
    /// let serialized kernels through.
    fn turn(
        &self,
        backend: &dyn CompletionBackend,
        job: &mut CompletionJob<S>,
        own_pass: Option<u64>,
    ) -> Turn {
        let copies_done = self.poll_copies(backend, &mut job.copies, usize::MAX);
        // While the app launches faster than this thread passes, a pass
        // took thousands of entries at once (~0.6 ms on the 6.4 mix, a
        // core taken from the app or the device): take a bounded share,
        // and let an interceptor that finds the hand-off queue full move
        // the rest on its own thread (`take_published_here`). All of it
        // when an interceptor waits for this thread, or at shutdown.
        let take = if self.urgent.load(Ordering::Acquire)
            || self.state.load(Ordering::Acquire) >= STOP_COMPLETION
        {
            usize::MAX
        } else {
            OWN_TAKE
        };
        let scan = self.pass(backend, job, own_pass, take, usize::MAX);
        let dropped = if scan.full {
            self.drop_destroyed(&mut job.tracked, &mut job.serializer)
        } else {
            0
        };
        self.settle_copies(&mut job.copies);
        let after_stop = self.settle_at_stop(&mut job.tracked);
        let serial_changed = matches!(after_stop, AfterStop::Run)
            && self.options.serialize
            && job
                .serializer
                .advance(backend, job.tracked.make_contiguous());
        Turn {
            progress: scan.done > 0 || dropped > 0 || serial_changed || copies_done > 0,
            scan,
            after_stop,
        }
    }

    /// One turn of the completion loop on the calling thread, if the
    /// completion thread's state is free (never waits for it): what the
    /// flush does while it waits for the device to drain and once it has
    /// asked the thread to stop, instead of waiting for the thread to wake
    /// (it may be napping, or have no core). A full scan, as the thread's
    /// every [`FULL_SCAN_EVERY`]-th pass. Not under `--serialize-kernels`,
    /// whose grants are the thread's alone. Returns whether the turn made
    /// progress.
    pub(super) fn complete_here(&self, backend: &dyn CompletionBackend) -> bool {
        self.own_turn_here(backend, 0)
    }

    /// The completion thread's `pass`-th own turn, on the calling thread, as
    /// [`Engine::complete_here`] (which takes pass 0, a full one); tests
    /// take others, to see how far each kind of pass reads.
    pub(super) fn own_turn_here(&self, backend: &dyn CompletionBackend, pass: u64) -> bool {
        // What the thread would do after this turn (return, or pass again)
        // it does at its own next turn, which finds the same state.
        self.with_job_here(|job| self.turn(backend, job, Some(pass)).progress)
            .unwrap_or(false)
    }

    /// Runs `work` on the completion thread's state on the calling thread,
    /// if that state is free and the thread's alone to use: not under
    /// `--serialize-kernels` (its grants are the thread's), not once the
    /// thread is gone or has not set its state up. `None`: not run (never
    /// waits for the thread).
    fn with_job_here<R>(&self, work: impl FnOnce(&mut CompletionJob<S>) -> R) -> Option<R> {
        if self.options.serialize || self.completion_gone.load(Ordering::Acquire) {
            return None;
        }
        let mut held = self.try_completion_job()?;
        held.as_mut().map(work)
    }

    /// One pass over the tracked dispatches, by the completion thread
    /// (`own_pass`: its count of its own passes) or a lender (`None`: never
    /// a full scan): takes up to `take` of what interceptors published and
    /// retires up to `max` of what finished (each may queue a record: a
    /// call's record, a dispatch's). What is left stays for the next pass.
    fn pass(
        &self,
        backend: &dyn CompletionBackend,
        job: &mut CompletionJob<S>,
        own_pass: Option<u64>,
        take: usize,
        max: usize,
    ) -> Scan {
        self.take_published(&mut job.tracked, take);
        let scan = self.scan(backend, &mut job.tracked, own_pass);
        self.completion_passes.fetch_add(1, Ordering::Release);
        let retire = scan.done.min(max);
        self.retire_finished(backend, &mut job.tracked, &mut job.serializer, retire);
        Scan {
            done: retire,
            ..scan
        }
    }

    /// Counts the calling app thread as lending its wait until the returned
    /// guard drops: it calls [`Engine::lend_completion`] between slices of
    /// the wait, so the completion thread leaves its passes to it (see
    /// [`EngineOptions::lender_nap`](super::EngineOptions::lender_nap)).
    pub fn lending(&self) -> Lending<'_, S> {
        self.lenders.fetch_add(1, Ordering::SeqCst);
        Lending(self)
    }

    /// Retires finished copies and dispatches on the calling thread, in the
    /// completion thread's place, if its state is free (never waits for
    /// it): an application thread that spins on the device lends its time,
    /// so the completion thread takes none from the app's other threads
    /// (nor, on the emulated GPU, from the command processor), and a copy
    /// the app waits for completes the app's signal here, without waiting
    /// for that thread to get a core. At most `max` copies and dispatches,
    /// and no more than the record queue's free half takes (a lender never
    /// waits for room in it). Returns how many it retired
    /// (0: none finished, the completion thread busy or not running). Not
    /// under `--serialize-kernels`, whose grants are the thread's alone,
    /// nor once shutdown began (the thread settles what is left).
    pub fn lend_completion(&self, backend: &dyn CompletionBackend, max: usize) -> usize {
        if self.lend_retire_room() == 0 {
            return 0;
        }
        // The completion thread may sleep while this thread lends: keep the
        // interceptor's fast clock fitted in its place (a few loads when not
        // due; a concurrent fit returns at once).
        rprof_abi::clock::calibrate_fast_clock();
        let done = self.with_job_here(|job| {
            // Shutdown may have begun while the state was taken.
            let max = max.min(self.lend_retire_room());
            if max == 0 {
                return (0, 0);
            }
            // Copies first: the app is likely waiting for one (HIP's
            // synchronisation after a copy). Each retired copy queues one
            // record; each dispatch entry taken or retired, one.
            let copies = self.poll_copies(backend, &mut job.copies, max);
            let left = max - copies;
            let dispatches = if left == 0 {
                0
            } else {
                self.pass(backend, job, None, left, left).done
            };
            (copies, dispatches)
        });
        let (copies, dispatches) = done.unwrap_or((0, 0));
        if dispatches > 0 {
            self.counters
                .completions_lent
                .fetch_add(dispatches as u64, Ordering::Relaxed);
        }
        if copies > 0 {
            self.counters
                .copies_lent
                .fetch_add(copies as u64, Ordering::Relaxed);
        }
        copies + dispatches
    }

    /// Moves published dispatches into the completion thread's list on the
    /// calling thread, if that state is free: what an interceptor does when
    /// it finds the hand-off queue full, instead of waiting for the thread
    /// to wake and be given a core (on a machine whose cores are busy, that
    /// took a core from the app's other threads or, on the emulated GPU,
    /// from the command processor, for the time it took to move thousands
    /// of entries). Takes no more than the record queue has room for (each
    /// entry taken may queue its call's record), so it never waits for the
    /// writer. Then it writes as many queued records as it took, in the
    /// writer's place where the sinks have room ([`Engine::lend_writer`]):
    /// the calls' records it just queued, which the writer thread would
    /// otherwise write on a core of its own before the app's wait began
    /// (~2 ms on the 6.4 mix). An app thread that outruns rprof's threads
    /// thus does their work, while the device still has what it launched.
    /// Not under `--serialize-kernels` (the thread's alone), nor once
    /// shutdown began. Returns how many it took.
    pub(super) fn take_published_here(&self) -> usize {
        if self.state.load(Ordering::Acquire) >= STOP_COMPLETION {
            return 0;
        }
        let taken = self
            .with_job_here(|job| {
                let before = job.tracked.len();
                self.take_published(&mut job.tracked, self.lend_room());
                job.tracked.len() - before
            })
            .unwrap_or(0);
        if taken > 0 {
            self.lend_writer(taken);
        }
        taken
    }

    /// How many finished dispatches a lender may retire now: none under
    /// `--serialize-kernels` (the grants are the completion thread's) or
    /// once shutdown began (the thread settles what is left), else what the
    /// record queue's free half takes, each entry taken and each dispatch
    /// retired queuing up to one record, so a lender never waits for the
    /// writer. The completion thread defers to lenders only while this is
    /// not 0 ([`Engine::lenders_cover`]).
    fn lend_retire_room(&self) -> usize {
        if self.options.serialize || self.state.load(Ordering::Acquire) >= STOP_COMPLETION {
            return 0;
        }
        self.lend_room() / 2
    }

    /// Records a thread other than the completion thread may queue without
    /// ever waiting for the writer: what the record queue's free half holds.
    fn lend_room(&self) -> usize {
        (self.records.capacity() / 2).saturating_sub(self.records.len())
    }

    /// The completion thread's state as it sets it up, without the thread
    /// (tests that lend alone).
    #[cfg(test)]
    pub(super) fn set_up_completion_job(&self) {
        *self.completion_job() = Some(CompletionJob::with_capacity(0, 0));
    }

    /// The completion thread's state if nobody holds it (a poisoned lock is
    /// taken back: a lender that panicked mid-pass left the list whole).
    fn try_completion_job(&self) -> Option<MutexGuard<'_, Option<CompletionJob<S>>>> {
        super::try_lock_taking_back(&self.completion_job)
    }

    /// The completion thread's state, locked.
    fn completion_job(&self) -> MutexGuard<'_, Option<CompletionJob<S>>> {
        super::lock_taking_back(&self.completion_job)
    }

    /// Takes what is published, but leaves the newest entry to the next
    /// pass: `ArrayQueue::pop` spins on a slot whose push has been claimed
    /// and not yet written, and an app thread preempted in that window (a
    /// core shared with the device and the app) made this thread spin for
    /// its time slice. A lone entry is taken.
    fn take_published(&self, tracked: &mut VecDeque<InFlight<S>>, max: usize) {
        let available = self.pending.len();
        let take = if available > 1 {
            available - 1
        } else {
            available
        }
        .min(max);
        for _ in 0..take {
            match self.pending.pop() {
                Some(e) => self.track(tracked, e),
                None => break,
            }
        }
    }

    /// Tracks a published entry; the interceptor call's record it carries
    /// (on a call's first traced dispatch) goes to the writer now, before
    /// any dispatch record of the call.
    ///
    /// The entry is moved once, into the list, and its call record taken
    /// there: each move of an entry (~170 bytes) is a `memcpy` call, and
    /// passing it through by value cost three more per dispatch.
    #[inline(always)]
    fn track(&self, tracked: &mut VecDeque<InFlight<S>>, entry: InFlight<S>) {
        tracked.push_back(entry);
        let call = tracked
            .back_mut()
            .and_then(|entry| entry.take_call_record(&self.ids));
        if let Some(call) = call {
            self.push_record(Record::Intercept(call));
        }
    }

    /// Finds the finished dispatches and moves them to the front.
    ///
    /// Dispatches finish roughly in submission order, so an ordinary pass
    /// reads only the oldest SCAN_WINDOW signals (reading all of several
    /// thousand in-flight signals every pass was this thread's main cost),
    /// and stops after UNFINISHED_RUN unfinished ones in a row;
    /// later ones are found by a later pass, which moves no timestamp. Every
    /// FULL_SCAN_EVERY-th pass reads everything; so do serialized and
    /// host-forwarded runs, where someone waits for each dispatch. While an
    /// interceptor waits for signals or ring space, a pass reads past the
    /// window, up to the first run of unfinished ones after a finished one
    /// (all of them, if none has finished): a full read each time (back to
    /// back while the wait lasts) was most of this thread's CPU on the 20 µs
    /// mix at 51,200 dispatches, where ~12,000 dispatches are in flight and
    /// the ring guard waits for them.
    fn scan(
        &self,
        backend: &dyn CompletionBackend,
        tracked: &mut VecDeque<InFlight<S>>,
        own_pass: Option<u64>,
    ) -> Scan {
        let waited_for = self.options.serialize || self.options.host_forwarding;
        let full = own_pass.is_some_and(|pass| waited_for || pass % FULL_SCAN_EVERY == 0);
        // An interceptor waits for this thread (its own passes only; a
        // lender's pass stays in the window).
        let urgent = !full && own_pass.is_some() && self.urgent.load(Ordering::Acquire);
        let limit = if full || urgent {
            tracked.len()
        } else {
            tracked.len().min(SCAN_WINDOW)
        };
        let mut done = 0;
        let mut latency_bound = false;
        let mut unfinished_run = 0;
        for i in 0..limit {
            if backend.signal_value(tracked[i].signal.handle()) <= 0 {
                // In submission order, the finished ones are mostly at the
                // front already; a swap in place still copies the entry
                // three times through a temporary.
                if i != done {
                    tracked.swap(i, done);
                }
                done += 1;
                unfinished_run = 0;
                continue;
            }
            if tracked[i].host_forward() != 0 || tracked[i].serial.is_some() {
                latency_bound = true;
            }
            unfinished_run += 1;
            // An urgent pass that has found nothing finished yet reads on:
            // what the interceptor waits for may be behind another queue's
            // unfinished run.
            if !full && unfinished_run >= UNFINISHED_RUN && !(urgent && done == 0) {
                break;
            }
        }
        Scan {
            done,
            full,
            latency_bound,
        }
    }

    /// Retires the `done` finished dispatches at the front. The clock is
    /// read after finding them: every one of them ended before `observed`.
    fn retire_finished(
        &self,
        backend: &dyn CompletionBackend,
        tracked: &mut VecDeque<InFlight<S>>,
        serializer: &mut Serializer,
        done: usize,
    ) {
        if done == 0 {
            return;
        }
        let observed = boottime_ns();
        let mut ring_target_reached = false;
        for entry in tracked.drain(..done) {
            serializer.release(entry.queue.agent_index, entry.serial.as_ref());
            ring_target_reached |= self.complete(backend, entry, observed);
        }
        if ring_target_reached {
            self.ring_space.notify_all();
        }
    }

    /// Drops the dispatches of destroyed queues (they never finish).
    /// Destroyed queues are rare: full passes only (the destroy hook waits
    /// for them with a timeout). Returns how many were dropped.
    fn drop_destroyed(
        &self,
        tracked: &mut VecDeque<InFlight<S>>,
        serializer: &mut Serializer,
    ) -> usize {
        let mut dropped = 0;
        let mut i = 0;
        while i < tracked.len() {
            if tracked[i].queue.destroyed.load(Ordering::Acquire) {
                let Some(entry) = tracked.swap_remove_back(i) else {
                    break;
                };
                serializer.release(entry.queue.agent_index, entry.serial.as_ref());
                self.abandon(entry);
                dropped += 1;
            } else {
                i += 1;
            }
        }
        dropped
    }

    /// Shutdown's part of a pass: once stopping, settle the recorded
    /// dispatches (counted lost if still running) and close the records;
    /// forget everything when the guard is not kept (or no longer).
    fn settle_at_stop(&self, tracked: &mut VecDeque<InFlight<S>>) -> AfterStop {
        if self.state.load(Ordering::Acquire) < STOP_COMPLETION {
            return AfterStop::Run;
        }
        if self.records_closed.load(Ordering::Acquire) {
            if self.keep_guard.load(Ordering::Acquire) {
                return AfterStop::Run;
            }
            // The guard after the stop ended (the runtime shuts down):
            // forget what is still tracked (unrecorded) and return.
            tracked.drain(..).for_each(InFlight::abandon);
            return AfterStop::Return;
        }
        // Everything published so far, including the newest entry.
        while let Some(e) = self.pending.pop() {
            self.track(tracked, e);
        }
        // Recorded dispatches still running will not be waited for: counted
        // lost. With the guard kept after the stop they stay tracked
        // (unrecorded) until they finish, so their slots and signals come
        // back; otherwise they are forgotten.
        let keep = self.keep_guard.load(Ordering::Acquire);
        let mut left = 0u64;
        let mut i = 0;
        while i < tracked.len() {
            if !tracked[i].recorded {
                i += 1;
                continue;
            }
            left += 1;
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            if keep {
                tracked[i].recorded = false;
                i += 1;
                continue;
            }
            let Some(entry) = tracked.swap_remove_back(i) else {
                break;
            };
            entry.abandon();
        }
        self.count_lost(left);
        self.records_closed.store(true, Ordering::Release);
        self.writer_wake.notify();
        if keep {
            return AfterStop::Again;
        }
        // Unrecorded leftovers: forgotten as well.
        tracked.drain(..).for_each(InFlight::abandon);
        AfterStop::Return
    }

    /// Rests between passes. After progress: at once when someone waits
    /// for this thread or an interceptor asked, else the shortest backoff.
    /// Idle: park when nothing is tracked; yield, then nap, while someone
    /// waits; else a backoff that doubles up to `max_backoff`.
    fn rest(
        &self,
        sleeper: &Sleeper<'_>,
        idle: &mut Idle,
        progress: bool,
        scan: &Scan,
        nothing_tracked: bool,
    ) {
        if progress {
            idle.backoff.reset();
            idle.serial_idle = 0;
            if scan.latency_bound {
                return;
            }
            // An interceptor waits for ring space or signals: look again at
            // once. Otherwise, while an app thread lends, leave the passes
            // to it; else let completions accumulate (RETIRE_BATCH):
            // timestamps do not depend on when they are read, and nobody but
            // rprof waits on these signals.
            if self.urgent.swap(false, Ordering::AcqRel) {
                return;
            }
            if self.lenders_cover() {
                self.sleep_while_lent(sleeper);
                return;
            }
            let nap = flow_nap(&mut idle.flowing, scan.done);
            sleeper.sleep(SleepKind::Backoff, nap, || {
                self.urgent.load(Ordering::Acquire)
            });
        } else if nothing_tracked {
            sleeper.sleep(SleepKind::Parked, PARK_TIMEOUT, || {
                !self.pending.is_empty()
                    || !self.copies.is_empty()
                    || (self.state.load(Ordering::Acquire) >= STOP_COMPLETION
                        && (!self.records_closed.load(Ordering::Acquire)
                            || !self.keep_guard.load(Ordering::Acquire)))
            });
            idle.backoff.reset();
        } else if scan.latency_bound {
            // Gaps between serialized kernels, and the app's view of a
            // host-forwarded signal, are this thread's latency.
            idle.serial_idle += 1;
            sleeper.pause(SERIAL_PACE, idle.serial_idle, SleepKind::Backoff, || {
                !self.pending.is_empty() || !self.copies.is_empty()
            });
        } else if self.lenders_cover() {
            self.sleep_while_lent(sleeper);
        } else {
            sleeper.sleep(SleepKind::Backoff, idle.backoff.step(), || {
                self.urgent.load(Ordering::Acquire)
            });
        }
    }

    /// Whether an app thread in a lending wait makes this thread's passes
    /// (what [`Engine::lend_completion`] does while it may): then this
    /// thread's own passes, on a timer, would only take a core from the
    /// app's other threads or, on the emulated GPU, from the command
    /// processor (on the 6.4 mix they delayed it 28 times a run, ~50 µs
    /// each).
    fn lenders_cover(&self) -> bool {
        self.lenders.load(Ordering::SeqCst) > 0 && self.lend_retire_room() > 0
    }

    /// Sleeps while lenders make the passes: up to `lender_nap`, woken by an
    /// interceptor that waits for this thread, a traced copy (lenders poll
    /// copies only between the slices of their waits), shutdown, or the
    /// last lender leaving ([`Lending`]'s drop).
    fn sleep_while_lent(&self, sleeper: &Sleeper<'_>) {
        sleeper.sleep(SleepKind::Backoff, self.options.lender_nap, || {
            self.urgent.load(Ordering::Acquire) || !self.lenders_cover()
        });
    }

    /// Drops a dispatch whose queue was destroyed before it finished: its
    /// packets will never run, so its signals can go back to the pool.
    fn abandon(&self, entry: InFlight<S>) {
        if entry.queue.release_slots(entry.slots()) {
            self.ring_space.notify_all();
        }
        if entry.recorded {
            self.count_lost(1);
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        drop(entry);
    }

    /// Retires one finished dispatch: forwards the app's signal (host
    /// forwarding), reads and clamps its times, gives its signals and ring
    /// slots back, and hands its record to the writer. Returns whether a ring
    /// waiter's target was reached (the caller wakes the waiters once).
    fn complete(&self, backend: &dyn CompletionBackend, entry: InFlight<S>, observed: u64) -> bool {
        let slots = entry.slots();
        if entry.host_forward() != 0 {
            backend.forward(entry.host_forward(), Some(entry.signal.handle()));
        }
        let forwarded_to = entry.forwarded_signal();
        if !entry.recorded {
            // Tracked only for the ring guard: recycle, record nothing (but
            // the app may still ask for its kernel's times).
            if forwarded_to != 0 {
                let times = backend.dispatch_time(entry.queue.agent_handle, entry.signal.handle());
                self.keep_forwarded_times(forwarded_to, entry.launch.dispatch_id, times);
            }
            let reached = entry.queue.release_slots(slots);
            drop(entry);
            return reached;
        }
        let InFlight {
            launch,
            queue,
            signal,
            serial,
            ..
        } = entry;
        let times = backend.dispatch_time(queue.agent_handle, signal.handle());
        self.keep_forwarded_times(forwarded_to, launch.dispatch_id, times);
        // Back to the pool before anything that may wait (the kernel ran, so
        // its gate barriers have retired).
        drop(signal);
        drop(serial);
        let (start_ns, end_ns) = self.clamp_counted(launch.enqueue_ns, observed, times);
        let reached = queue.release_slots(slots);
        let correlation_id = self.ids.correlation_id(launch.dispatch_id);
        let record = launch.record(&queue, correlation_id, start_ns, end_ns);
        drop(queue);
        self.push_record(Record::Dispatch(record));
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.writer_wake.is_sleeping() && self.writer_wake_due() {
            self.writer_wake.notify();
        }
        reached
    }

    /// Keeps a retired kernel's times for the app signal its forwarding
    /// barrier completes (`signal`, 0 for none): what the app reads from its
    /// own signal, had the kernel completed it.
    fn keep_forwarded_times(&self, signal: u64, dispatch_id: u64, times: Option<(u64, u64)>) {
        if let (Some((start, end)), true) = (times, signal != 0) {
            self.forwarded_times.record(signal, dispatch_id, start, end);
        }
    }

    /// [`clamp_times`], counting the timestamps it moved.
    pub(super) fn clamp_counted(
        &self,
        enqueue_ns: u64,
        observed: u64,
        times: Option<(u64, u64)>,
    ) -> (u64, u64) {
        let (times, start_moved, end_moved) = clamp_times(enqueue_ns, observed, times);
        if start_moved {
            self.counters.start_clamped.fetch_add(1, Ordering::Relaxed);
        }
        if end_moved {
            self.counters.end_clamped.fetch_add(1, Ordering::Relaxed);
        }
        times
    }

    /// Pushes a record for the writer, waiting for room while the writer
    /// makes progress (back-pressure, never loss); a writer that takes
    /// nothing for WRITER_STALL is stuck, and a gone or stuck writer's
    /// records are dropped (counted lost) instead of waited for.
    pub(super) fn push_record(&self, mut rec: Record) {
        let mut seen = self.writer_progress.load(Ordering::Acquire);
        let mut wait = None::<Wait>;
        loop {
            // A queue one slot short of full counts as full. The last free
            // slot may be the one the writer is taking a record out of
            // (its head moved on, the slot not yet marked free), and a push
            // into it spins, without yielding, until the writer is back
            // on a core: on 2 busy cores, an app thread or the completion
            // thread spinning for a starved writer's whole time off the
            // core (perf, traced 204,800-dispatch storm on ROCr 6.4.3:
            // 546 of the completion thread's 690 samples and 288 of the
            // app thread's were in that spin; 21 and 99 after). Waiting
            // below yields instead.
            let pushed = if self.records.len() + 1 < self.records.capacity() {
                self.records.push(rec)
            } else {
                Err(rec)
            };
            match pushed {
                Ok(()) => return,
                Err(_)
                    if self.writer_gone.load(Ordering::Acquire)
                        || self.writer_stalled.load(Ordering::Acquire) =>
                {
                    self.count_lost(1);
                    return;
                }
                Err(back) => rec = back,
            }
            self.writer_wake.notify();
            let wait = wait
                .get_or_insert_with(|| Wait::with_timeout(super::WRITER_STALL, RECORD_PUSH_PACE));
            let now_seen = self.writer_progress.load(Ordering::Acquire);
            if now_seen != seen {
                seen = now_seen;
                wait.renew(std::time::Instant::now() + super::WRITER_STALL);
            }
            if !wait.pause() {
                self.writer_stalled.store(true, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nap_after_a_pass_grows_while_passes_retire_few_and_shrinks_while_they_retire_many() {
        let us = Duration::from_micros;
        let mut nap = Doubling::new(us(100), us(1_000));
        // The 20 µs mix: ~5 dispatches a pass at first; the nap doubles
        // until it reaches the longest.
        let naps: Vec<Duration> = (0..6).map(|_| flow_nap(&mut nap, 5)).collect();
        assert_eq!(naps, [200, 400, 800, 1_000, 1_000, 1_000].map(us));
        // A pass retiring a batch keeps it.
        assert_eq!(flow_nap(&mut nap, RETIRE_BATCH), us(1_000));
        assert_eq!(flow_nap(&mut nap, 4 * RETIRE_BATCH - 1), us(1_000));
        // Passes retiring four batches or more halve it, down to the
        // shortest.
        let naps: Vec<Duration> = (0..5)
            .map(|_| flow_nap(&mut nap, 4 * RETIRE_BATCH))
            .collect();
        assert_eq!(naps, [500, 250, 125, 100, 100].map(us));
    }
}

/// An app thread in a lending wait ([`Engine::lending`]). The last one to
/// leave wakes the completion thread if it sleeps: its passes are its own
/// again.
#[derive(Debug)]
pub struct Lending<'a, S>(&'a Engine<S>);

impl<S> Drop for Lending<'_, S> {
    fn drop(&mut self) {
        // SeqCst against the sleeper's announce-then-check: either it sees
        // no lender left, or this sees it asleep.
        if self.0.lenders.fetch_sub(1, Ordering::SeqCst) == 1
            && self.0.completion_wake.is_sleeping()
        {
            self.0.completion_wake.notify();
        }
    }
}
