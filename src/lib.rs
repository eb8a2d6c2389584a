//! rprof core engine.
//!
//! Owns what happens between an intercepted queue write and an output file:
//! the fixed-size [`record`]s, and the push-model [`sink`] interface that every
//! output format implements, the ROCTx marker state behind `--marker-trace`
//! and `--kernel-rename` ([`marker`]: per-thread ranges, interned messages,
//! the writer's pairing of start/stop ranges), and rprof's one way to wait ([`wait`]: bounded,
//! paced polls and a wake point, used by the engine and by the tool). It must not touch the HSA runtime directly:
//! everything runtime-facing (API tables, `extern "C"` entry points) lives in
//! the `tool` crate, so that this crate can be driven by test fixtures and by
//! the live interceptor through the same path.
#![deny(missing_docs)]

pub mod code_object;
pub mod config;
pub mod engine;
pub mod kernels;
pub mod marker;
pub mod output;
pub mod record;
pub mod rpc;
pub mod sink;
pub mod wait;
