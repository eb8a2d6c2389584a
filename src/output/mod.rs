//! Output formats. Each is a [`crate::sink::RecordSink`].

pub mod csv;
pub mod files;
pub mod json;
pub mod perfetto;
pub mod rocpd;
pub mod rocpd_merge;
pub mod stats;
