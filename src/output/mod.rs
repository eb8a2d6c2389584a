//! Output formats. Each is a [`crate::sink::RecordSink`].
//!
//! Owns the files of the run and their formats; it must not hold a record
//! longer than its format needs (sinks stream), reach back into the engine, or
//! run anywhere but on the writer thread. Output files are created through
//! [`files`], which never overwrites an earlier run's file.

pub mod csv;
pub mod files;
pub mod json;
pub mod perfetto;
pub mod rocpd;
pub mod rocpd_merge;
pub mod split;
pub mod stats;
