//! The KFD event table: creation, firing and waiting, with KFD's semantics.
//!
//! * Signal events get ids `1..=4096` and an 8-byte mailbox slot each in the *event page* (the slot's address is
//!   `HWData2`, which ROCr stores as the signal's `event_mailbox_ptr`). At most [`MAX_SIGNAL_EVENTS`] exist at once:
//!   creating one more fails, as KFD does, so ROCr's fallback when events run out is reproduced.
//! * Other event types (memory, hardware exception, ...) get ids above the signal range and no mailbox.
//! * KFD's firing rule: firing an event wakes *every* thread waiting on it. An auto-reset event fired while
//!   threads wait on it does not stay signaled; fired while nobody waits, it stays signaled until the next wait
//!   consumes it (a wait consumes the signaled state of all events it lists when it starts). Manual-reset events
//!   stay signaled until reset. Several threads may wait on one event (ROCr shares one event among all queues'
//!   error signals), so "one wake-up consumed by the wrong waiter" must not happen.
//! * Event ages (KFD >= 1.14, used by ROCr >= 6.1): every event carries an age, 1 at creation and incremented by
//!   each fire (after `u64::MAX` it wraps to 2, never to 0 or 1). A waiter may pass, per event, the age it saw
//!   last ([`EventTable::wait_aged`]); a non-zero age that differs from the current one activates that waiter at
//!   once, so a fire that happened before the wait is never lost. When the wait completes, the current age is
//!   written back for every activated event whose age was passed. Age 0 means "not tracked" (pre-1.14 waits).
//! * One mutex guards the table; one condition variable wakes every waiter on every fire (waiters re-check their
//!   own events). That keeps wake-up latency at a futex wake.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// KFD's per-process limit of signal events.
pub const MAX_SIGNAL_EVENTS: u32 = 4096;
const FIRST_OTHER_ID: u32 = MAX_SIGNAL_EVENTS + 1;

/// Why an event operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventError {
    /// No more signal event ids.
    OutOfResources,
    /// The id is not a live event.
    UnknownEvent,
    /// The wait timed out.
    Timeout,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    signaled: bool,
    manual_reset: bool,
    /// Threads currently waiting on this event.
    waiters: u32,
    /// Incremented by every fire that found waiters: waiters that saw another value are activated.
    generation: u64,
    /// KFD's event age: 1 at creation, incremented by every fire (see the module docs).
    age: u64,
}

/// The age of a new event.
pub const FIRST_EVENT_AGE: u64 = 1;

fn next_age(age: u64) -> u64 {
    match age.wrapping_add(1) {
        0 | 1 => 2,
        a => a,
    }
}

/// The events by id: signal events (ids `1..=MAX_SIGNAL_EVENTS`, handed
/// out in order and reused) in a vector indexed by id, the others (rare)
/// in a map. A runtime's event thread looks up each event it waits on
/// several times per wait, tens of thousands of waits per run: with every
/// event in a SipHash map that was a third of the thread's CPU in ROCr
/// 6.4.3's storms (perf: `hash_one` 759 of 2,450 samples), where a real
/// KFD's wait costs the process one system call.
#[derive(Debug, Default)]
struct Slots {
    signal: Vec<Option<Slot>>,
    other: HashMap<u32, Slot>,
}

impl Slots {
    fn get(&self, id: &u32) -> Option<&Slot> {
        if *id <= MAX_SIGNAL_EVENTS {
            return self.signal.get(*id as usize).and_then(Option::as_ref);
        }
        self.other.get(id)
    }

    fn get_mut(&mut self, id: &u32) -> Option<&mut Slot> {
        if *id <= MAX_SIGNAL_EVENTS {
            return self.signal.get_mut(*id as usize).and_then(Option::as_mut);
        }
        self.other.get_mut(id)
    }

    fn contains_key(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    fn insert(&mut self, id: u32, slot: Slot) {
        if id > MAX_SIGNAL_EVENTS {
            self.other.insert(id, slot);
            return;
        }
        let i = id as usize;
        if self.signal.len() <= i {
            self.signal.resize_with(i + 1, || None);
        }
        self.signal[i] = Some(slot);
    }

    fn remove(&mut self, id: &u32) -> Option<Slot> {
        if *id <= MAX_SIGNAL_EVENTS {
            return self.signal.get_mut(*id as usize).and_then(Option::take);
        }
        self.other.remove(id)
    }

    /// Events held (counted, for the diagnostics only).
    fn len(&self) -> usize {
        self.signal.iter().filter(|s| s.is_some()).count() + self.other.len()
    }
}

#[derive(Debug, Default)]
struct Table {
    slots: Slots,
    free_signal_ids: Vec<u32>,
    next_signal_id: u32,
    next_other_id: u32,
    fired: u64,
    /// Waits so far, and those that some listed event satisfied when they began (an event signaled before, or
    /// an age that differs from the event's).
    waits: u64,
    waits_at_once: u64,
}

/// The event table plus its mailbox page.
#[derive(Debug)]
pub struct EventTable {
    table: Mutex<Table>,
    wake: Condvar,
    mailboxes: Box<[std::sync::atomic::AtomicU64]>,
    /// `CLOCK_BOOTTIME` ns of the last [`INTERRUPT_HISTORY`] interrupts
    /// raised on each signal event's mailbox slot (0 = none), written round
    /// robin by `interrupt_count`: what the device knows of a ring and real
    /// hardware does not report.
    interrupts: Box<[[std::sync::atomic::AtomicU64; INTERRUPT_HISTORY]]>,
    interrupt_count: Box<[std::sync::atomic::AtomicU32]>,
}

/// Interrupt times remembered per signal event.
pub const INTERRUPT_HISTORY: usize = 8;

impl Default for EventTable {
    fn default() -> Self {
        Self::new()
    }
}

impl EventTable {
    /// An empty table.
    pub fn new() -> Self {
        let mailboxes = (0..=MAX_SIGNAL_EVENTS as usize)
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect();
        EventTable {
            table: Mutex::new(Table {
                next_signal_id: 1,
                next_other_id: FIRST_OTHER_ID,
                ..Table::default()
            }),
            wake: Condvar::new(),
            mailboxes,
            interrupts: (0..=MAX_SIGNAL_EVENTS as usize)
                .map(|_| std::array::from_fn(|_| std::sync::atomic::AtomicU64::new(0)))
                .collect(),
            interrupt_count: (0..=MAX_SIGNAL_EVENTS as usize)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates an event; `signal_type` events get a mailbox. Returns `(id, mailbox address or 0)`.
    pub fn create(
        &self,
        signal_type: bool,
        manual_reset: bool,
        signaled: bool,
    ) -> Result<(u32, u64), EventError> {
        let mut t = self.lock();
        let id = if signal_type {
            if let Some(id) = t.free_signal_ids.pop() {
                id
            } else if t.next_signal_id <= MAX_SIGNAL_EVENTS {
                t.next_signal_id += 1;
                t.next_signal_id - 1
            } else {
                return Err(EventError::OutOfResources);
            }
        } else {
            t.next_other_id = t
                .next_other_id
                .checked_add(1)
                .ok_or(EventError::OutOfResources)?;
            t.next_other_id - 1
        };
        t.slots.insert(
            id,
            Slot {
                signaled,
                manual_reset,
                waiters: 0,
                generation: 0,
                age: FIRST_EVENT_AGE,
            },
        );
        let mailbox = if signal_type {
            self.mailboxes[id as usize].store(0, std::sync::atomic::Ordering::Relaxed);
            &self.mailboxes[id as usize] as *const _ as u64
        } else {
            0
        };
        Ok((id, mailbox))
    }

    /// Destroys an event; its id may be handed out again.
    pub fn destroy(&self, id: u32) -> Result<(), EventError> {
        let mut t = self.lock();
        t.slots.remove(&id).ok_or(EventError::UnknownEvent)?;
        if id <= MAX_SIGNAL_EVENTS {
            t.free_signal_ids.push(id);
        }
        drop(t);
        // Wake waiters so that a wait on a destroyed event notices.
        self.wake.notify_all();
        Ok(())
    }

    /// Sets an event to signaled and wakes the waiters (`hsaKmtSetEvent`, or an interrupt from the emulated GPU).
    pub fn fire(&self, id: u32) -> Result<(), EventError> {
        let mut t = self.lock();
        let slot = t.slots.get_mut(&id).ok_or(EventError::UnknownEvent)?;
        slot.age = next_age(slot.age);
        if slot.waiters > 0 {
            slot.generation += 1;
            slot.signaled = slot.manual_reset;
        } else {
            slot.signaled = true;
        }
        t.fired += 1;
        drop(t);
        self.wake.notify_all();
        Ok(())
    }

    /// Clears a (manual-reset) event.
    pub fn reset(&self, id: u32) -> Result<(), EventError> {
        let mut t = self.lock();
        t.slots
            .get_mut(&id)
            .ok_or(EventError::UnknownEvent)?
            .signaled = false;
        Ok(())
    }

    /// Waits for any (or all) of `ids`; `timeout_ms == u32::MAX` waits forever. Consumes the signaled state of the
    /// auto-reset events it lists when it starts, as KFD does. No ages: [`EventTable::wait_aged`] with all zero.
    pub fn wait(&self, ids: &[u32], all: bool, timeout_ms: u32) -> Result<(), EventError> {
        self.wait_inner(ids, None, all, timeout_ms)
    }

    /// [`EventTable::wait`] with event ages (KFD >= 1.14): `ages[i]` is the age of `ids[i]` the caller saw last,
    /// or 0 to not track it. A non-zero age that differs from the event's current age activates the waiter at
    /// once. On success, `ages[i]` receives the current age of every activated event whose age was non-zero;
    /// other entries, and all entries on timeout or error, are left as they were (as KFD does).
    ///
    /// # Panics
    /// If `ages` and `ids` differ in length.
    pub fn wait_aged(
        &self,
        ids: &[u32],
        ages: &mut [u64],
        all: bool,
        timeout_ms: u32,
    ) -> Result<(), EventError> {
        assert_eq!(ids.len(), ages.len(), "one age per event");
        self.wait_inner(ids, Some(ages), all, timeout_ms)
    }

    /// Current age of an event.
    pub fn age(&self, id: u32) -> Result<u64, EventError> {
        self.lock()
            .slots
            .get(&id)
            .map(|s| s.age)
            .ok_or(EventError::UnknownEvent)
    }

    fn wait_inner(
        &self,
        ids: &[u32],
        ages: Option<&mut [u64]>,
        all: bool,
        timeout_ms: u32,
    ) -> Result<(), EventError> {
        let deadline = (timeout_ms != u32::MAX)
            .then(|| Instant::now() + Duration::from_millis(u64::from(timeout_ms)));
        let mut t = self.lock();
        // Register: (id, generation seen, activated already).
        let mut mine: Vec<(u32, u64, bool)> = Vec::with_capacity(ids.len());
        let mut consumed: Vec<bool> = Vec::with_capacity(ids.len());
        for id in ids {
            if !t.slots.contains_key(id) {
                return Err(EventError::UnknownEvent);
            }
        }
        for (i, id) in ids.iter().enumerate() {
            let slot = t.slots.get_mut(id).ok_or(EventError::UnknownEvent)?;
            let last_age = ages.as_deref().map_or(0, |a| a[i]);
            let activated = slot.signaled || (last_age != 0 && last_age != slot.age);
            consumed.push(slot.signaled && !slot.manual_reset);
            if !slot.manual_reset {
                slot.signaled = false;
            }
            slot.waiters += 1;
            mine.push((*id, slot.generation, activated));
        }
        t.waits += 1;
        if mine.iter().any(|&(_, _, activated)| activated) {
            t.waits_at_once += 1;
        }
        let result = loop {
            let mut any = false;
            let mut every = true;
            for (id, generation, activated) in mine.iter_mut() {
                match t.slots.get(id) {
                    Some(slot) => {
                        *activated |=
                            slot.generation != *generation || (slot.manual_reset && slot.signaled);
                    }
                    None => *activated = true, // destroyed while waiting: wake up
                }
                any |= *activated;
                every &= *activated;
            }
            if (all && every) || (!all && any) {
                break Ok(());
            }
            t = match deadline {
                None => self.wake.wait(t).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break Err(EventError::Timeout);
                    }
                    self.wake
                        .wait_timeout(t, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        };
        if let (Ok(()), Some(ages)) = (&result, ages) {
            for ((id, _, activated), age) in mine.iter().zip(ages.iter_mut()) {
                if *activated && *age != 0 {
                    if let Some(slot) = t.slots.get(id) {
                        *age = slot.age;
                    }
                }
            }
        }
        for ((id, _, _), was_signaled) in mine.iter().zip(&consumed) {
            if let Some(slot) = t.slots.get_mut(id) {
                slot.waiters -= 1;
                // A wait that times out gives back the signaled state it consumed when it started.
                if result.is_err() && *was_signaled {
                    slot.signaled = true;
                }
            }
        }
        result
    }

    /// Id of the signal event whose mailbox is at `addr`, if `addr` is one of ours.
    pub fn id_of_mailbox(&self, addr: u64) -> Option<u32> {
        let base = self.mailboxes.as_ptr() as u64;
        let off = addr.checked_sub(base)?;
        (off % 8 == 0 && off / 8 <= u64::from(MAX_SIGNAL_EVENTS)).then_some((off / 8) as u32)
    }

    /// Records that the device raised the interrupt of mailbox slot `slot`
    /// at `ns`.
    pub fn note_interrupt(&self, slot: u32, ns: u64) {
        let (Some(history), Some(count)) = (
            self.interrupts.get(slot as usize),
            self.interrupt_count.get(slot as usize),
        ) else {
            return;
        };
        let i =
            count.fetch_add(1, std::sync::atomic::Ordering::AcqRel) as usize % INTERRUPT_HISTORY;
        history[i].store(ns, std::sync::atomic::Ordering::Release);
    }

    /// The latest interrupt of mailbox slot `slot` at or before `t_ns`
    /// among the last [`INTERRUPT_HISTORY`] (0 = none or unknown slot).
    pub fn interrupt_before(&self, slot: u32, t_ns: u64) -> u64 {
        self.interrupts.get(slot as usize).map_or(0, |h| {
            h.iter()
                .map(|a| a.load(std::sync::atomic::Ordering::Acquire))
                .filter(|&ns| ns <= t_ns)
                .max()
                .unwrap_or(0)
        })
    }

    /// Number of live events and the number of fires so far.
    pub fn stats(&self) -> (usize, u64) {
        let t = self.lock();
        (t.slots.len(), t.fired)
    }

    /// Waits so far, and how many of them an event satisfied as they began (they return without sleeping).
    pub fn wait_stats(&self) -> (u64, u64) {
        let t = self.lock();
        (t.waits, t.waits_at_once)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn interrupt_history_answers_the_latest_before_a_time() {
        let t = EventTable::new();
        assert_eq!(t.interrupt_before(3, u64::MAX), 0);
        for ns in [100, 200, 300] {
            t.note_interrupt(3, ns);
        }
        assert_eq!(t.interrupt_before(3, 250), 200);
        assert_eq!(t.interrupt_before(3, u64::MAX), 300);
        assert_eq!(t.interrupt_before(3, 99), 0);
        for ns in 1..=INTERRUPT_HISTORY as u64 {
            t.note_interrupt(3, 1000 + ns);
        }
        // 100..300 fell out of the history.
        assert_eq!(t.interrupt_before(3, 999), 0);
        assert_eq!(t.interrupt_before(4, u64::MAX), 0);
        assert_eq!(t.interrupt_before(u32::MAX, u64::MAX), 0);
    }

    #[test]
    fn auto_reset_state_persists_until_a_wait_consumes_it() {
        let t = EventTable::new();
        let (id, mb) = t.create(true, false, false).unwrap();
        assert_ne!(id, 0);
        assert_eq!(t.id_of_mailbox(mb), Some(id));
        assert_eq!(t.wait(&[id], false, 0), Err(EventError::Timeout));
        t.fire(id).unwrap();
        assert_eq!(t.wait(&[id], false, 0), Ok(()));
        assert_eq!(t.wait(&[id], false, 1), Err(EventError::Timeout));
    }

    #[test]
    fn a_fire_wakes_every_waiter_of_an_event() {
        let t = Arc::new(EventTable::new());
        let id = t.create(true, false, false).unwrap().0;
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || t.wait(&[id], false, 5_000))
            })
            .collect();
        while t.lock().slots.get(&id).map_or(0, |s| s.waiters) < 3 {
            std::thread::yield_now();
        }
        t.fire(id).unwrap();
        for w in waiters {
            assert_eq!(w.join().unwrap(), Ok(()));
        }
        // The fire found waiters, so it did not leave the event signaled.
        assert_eq!(t.wait(&[id], false, 0), Err(EventError::Timeout));
    }

    /// KFD's rule, kept on purpose: a fire that finds a thread waiting on an auto-reset event wakes the threads
    /// already waiting and nobody else. A thread that checked its condition before the fire but begins its wait
    /// after it sleeps on; only an age it read before the fire (KFD >= 1.14) catches the fire. ROCr 5.2.3's
    /// queue destroy loses its wake-up this way when several threads destroy queues at once (their inactive
    /// signals share one event; docs/emulated-gpu.md).
    #[test]
    fn a_fire_that_finds_a_waiter_misses_a_later_wait_without_an_age() {
        let t = Arc::new(EventTable::new());
        let id = t.create(true, false, false).unwrap().0;
        let age_before_the_fire = t.age(id).unwrap();
        let t2 = t.clone();
        let waiting = std::thread::spawn(move || t2.wait(&[id], false, 5_000));
        while t.lock().slots.get(&id).map_or(0, |s| s.waiters) < 1 {
            std::thread::yield_now();
        }
        t.fire(id).unwrap();
        assert_eq!(waiting.join().unwrap(), Ok(()));
        assert_eq!(t.wait(&[id], false, 20), Err(EventError::Timeout));
        let mut ages = [age_before_the_fire];
        assert_eq!(t.wait_aged(&[id], &mut ages, false, 0), Ok(()));
    }

    #[test]
    fn manual_reset_stays_signaled() {
        let t = EventTable::new();
        let (id, mb) = t.create(false, true, true).unwrap();
        assert_eq!(mb, 0);
        assert!(id > MAX_SIGNAL_EVENTS);
        assert_eq!(t.wait(&[id], false, 0), Ok(()));
        assert_eq!(t.wait(&[id], false, 0), Ok(()));
        t.reset(id).unwrap();
        assert_eq!(t.wait(&[id], false, 0), Err(EventError::Timeout));
    }

    #[test]
    fn limit_of_4096_signal_events_and_reuse() {
        let t = EventTable::new();
        let ids: Vec<u32> = (0..MAX_SIGNAL_EVENTS)
            .map(|_| t.create(true, false, false).unwrap().0)
            .collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4096);
        assert_eq!(
            t.create(true, false, false),
            Err(EventError::OutOfResources)
        );
        assert!(t.create(false, false, false).is_ok());
        t.destroy(ids[7]).unwrap();
        assert_eq!(t.create(true, false, false).unwrap().0, ids[7]);
    }

    #[test]
    fn wait_any_and_all_wake_from_another_thread() {
        let t = Arc::new(EventTable::new());
        let a = t.create(true, false, false).unwrap().0;
        let b = t.create(true, false, false).unwrap().0;
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            t2.fire(b).unwrap();
        });
        assert_eq!(t.wait(&[a, b], false, 5_000), Ok(()));
        h.join().unwrap();
        t.fire(a).unwrap();
        assert_eq!(t.wait(&[a, b], true, 1), Err(EventError::Timeout));
        t.fire(b).unwrap();
        assert_eq!(t.wait(&[a, b], true, 0), Ok(()));
        assert_eq!(t.wait(&[99], false, 0), Err(EventError::UnknownEvent));
    }

    #[test]
    fn ages_start_at_one_and_grow_with_each_fire() {
        let t = EventTable::new();
        let id = t.create(true, false, false).unwrap().0;
        assert_eq!(t.age(id), Ok(FIRST_EVENT_AGE));
        t.fire(id).unwrap();
        t.fire(id).unwrap();
        assert_eq!(t.age(id), Ok(3));
        assert_eq!(next_age(u64::MAX), 2);
        assert_eq!(next_age(0), 2);
        assert_eq!(t.age(99), Err(EventError::UnknownEvent));
    }

    #[test]
    fn a_stale_age_returns_at_once_and_then_sleeps() {
        let t = EventTable::new();
        let id = t.create(true, false, false).unwrap().0;
        // A fire nobody waited for, consumed by an age-less wait: the signaled state is gone...
        t.fire(id).unwrap();
        assert_eq!(t.wait(&[id], false, 0), Ok(()));
        assert_eq!(t.wait(&[id], false, 0), Err(EventError::Timeout));
        // ...but a waiter that last saw age 1 learns of it, and gets the current age back.
        let mut ages = [1];
        assert_eq!(t.wait_aged(&[id], &mut ages, false, 0), Ok(()));
        assert_eq!(ages, [2]);
        // With the current age it sleeps (times out), and the age is left as it was.
        assert_eq!(
            t.wait_aged(&[id], &mut ages, false, 1),
            Err(EventError::Timeout)
        );
        assert_eq!(ages, [2]);
        // Age 0 is not tracked: neither activates nor is written back.
        let mut untracked = [0];
        t.fire(id).unwrap();
        assert_eq!(t.wait_aged(&[id], &mut untracked, false, 0), Ok(()));
        assert_eq!(untracked, [0]);
    }

    /// Signal event ids index a vector, the others a map: both kinds are
    /// found, replaced, removed and counted, and ids never seen are absent.
    #[test]
    fn slots_hold_signal_and_other_events_apart() {
        let mut slots = Slots::default();
        let slot = |age| Slot {
            signaled: false,
            manual_reset: false,
            waiters: 0,
            generation: 0,
            age,
        };
        for (id, age) in [
            (1, 10),
            (MAX_SIGNAL_EVENTS, 11),
            (FIRST_OTHER_ID, 12),
            (FIRST_OTHER_ID + 7, 13),
        ] {
            slots.insert(id, slot(age));
        }
        assert_eq!(slots.len(), 4);
        assert_eq!(slots.get(&MAX_SIGNAL_EVENTS).map(|s| s.age), Some(11));
        assert_eq!(slots.get(&(FIRST_OTHER_ID + 7)).map(|s| s.age), Some(13));
        assert!(
            !slots.contains_key(&2)
                && !slots.contains_key(&0)
                && !slots.contains_key(&(FIRST_OTHER_ID + 1))
        );
        slots.insert(1, slot(20));
        assert_eq!((slots.len(), slots.get(&1).map(|s| s.age)), (4, Some(20)));
        slots.get_mut(&FIRST_OTHER_ID).unwrap().age = 30;
        assert_eq!(slots.remove(&FIRST_OTHER_ID).map(|s| s.age), Some(30));
        assert_eq!(slots.remove(&1).map(|s| s.age), Some(20));
        assert!(slots.remove(&1).is_none());
        assert_eq!(slots.len(), 2);
        assert!(slots.get(&1).is_none() && slots.get(&FIRST_OTHER_ID).is_none());
    }

    #[test]
    fn wait_stats_count_every_wait_and_those_that_return_at_once() {
        let t = EventTable::new();
        let id = t.create(true, false, false).unwrap().0;
        assert_eq!(t.wait_stats(), (0, 0));
        // Sleeps until its timeout: a wait, not at once.
        assert_eq!(t.wait(&[id], false, 1), Err(EventError::Timeout));
        assert_eq!(t.wait_stats(), (1, 0));
        // A fire before the wait: at once.
        t.fire(id).unwrap();
        assert_eq!(t.wait(&[id], false, 0), Ok(()));
        assert_eq!(t.wait_stats(), (2, 1));
        // A stale age: at once; the current age: sleeps.
        let mut ages = [1];
        assert_eq!(t.wait_aged(&[id], &mut ages, false, 0), Ok(()));
        assert_eq!(
            t.wait_aged(&[id], &mut ages, false, 1),
            Err(EventError::Timeout)
        );
        assert_eq!(t.wait_stats(), (4, 2));
    }

    #[test]
    fn aged_waiters_woken_by_a_fire_get_the_new_age() {
        let t = Arc::new(EventTable::new());
        let a = t.create(true, false, false).unwrap().0;
        let b = t.create(true, false, false).unwrap().0;
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            let mut ages = [FIRST_EVENT_AGE, FIRST_EVENT_AGE];
            let r = t2.wait_aged(&[a, b], &mut ages, false, 5_000);
            (r, ages)
        });
        while t.lock().slots.get(&b).map_or(0, |s| s.waiters) < 1 {
            std::thread::yield_now();
        }
        t.fire(b).unwrap();
        let (r, ages) = h.join().unwrap();
        assert_eq!(r, Ok(()));
        // Only the activated event's age is written back.
        assert_eq!(ages, [FIRST_EVENT_AGE, 2]);
    }

    #[test]
    fn wait_all_that_times_out_keeps_unfired_state() {
        let t = EventTable::new();
        let a = t.create(true, false, false).unwrap().0;
        let b = t.create(true, false, false).unwrap().0;
        t.fire(a).unwrap();
        // `a` is stale by age and signaled, `b` is neither: wait-all times out and leaves `a` signaled.
        let mut ages = [1, 1];
        assert_eq!(
            t.wait_aged(&[a, b], &mut ages, true, 1),
            Err(EventError::Timeout)
        );
        assert_eq!(ages, [1, 1]);
        assert_eq!(t.wait(&[a], false, 0), Ok(()));
    }
}
