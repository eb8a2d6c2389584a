//! The signal provider: how the pool creates, resets and destroys signals.

use std::fmt;

/// A signal handle as the runtime knows it: the `handle` field of an `hsa_signal_t`.
///
/// It is `Copy` because it is a plain number; holding one proves nothing about the signal's
/// lifetime. The pool only ever gives it out through a live [`crate::SignalHandle`], so safe
/// code cannot read a signal after it went back to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawSignal(pub u64);

/// Why a provider could not create a signal (for ROCr: the `hsa_status_t` it returned, e.g.
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES` once the process's driver events are exhausted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProviderError {
    /// The runtime's status code.
    pub status: u32,
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "signal creation failed with status {:#x}", self.status)
    }
}

impl std::error::Error for ProviderError {}

/// Creates, resets and destroys signals for a [`crate::SignalPool`].
///
/// The tool implements it with ROCr's API table (`hsa_amd_signal_create`, with or without
/// interrupt as it chooses; `hsa_signal_store_screlease`; `hsa_signal_destroy`); tests use a fake
/// that counts calls. The pool calls:
/// - [`create`](Self::create) only while growing by one batch (under the pool's growth lock),
///   at most `capacity` times over the pool's whole life;
/// - [`reset`](Self::reset) once each time a signal's last handle or share is dropped, before the
///   signal goes back on the free list — possibly from several threads at once, for different
///   signals;
/// - [`destroy`](Self::destroy) once per created signal, at [`crate::SignalPool::shutdown`] or when
///   the pool is dropped, when no handle or share is outstanding.
pub trait SignalProvider: Send + Sync {
    /// Creates a signal holding `initial`.
    fn create(&self, initial: i64) -> Result<RawSignal, ProviderError>;
    /// Sets `signal` back to `value` (the pool's initial value) so it can be reused.
    fn reset(&self, signal: RawSignal, value: i64);
    /// Destroys `signal`; it is never used again.
    fn destroy(&self, signal: RawSignal);
}
