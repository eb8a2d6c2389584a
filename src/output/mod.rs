//! Output formats. Each is a [`crate::sink::RecordSink`].
//!
//! Owns the files of the run and their formats; it must not hold a record
//! longer than its format needs (sinks stream), reach back into the engine, or
//! run anywhere but where the writer's state is held (the writer thread, or an
//! app thread writing in its place, for which a sink says how much it takes
//! before it writes its file: [`crate::sink::RecordSink::spare_room`]). Output files are created through
//! [`files`], which never overwrites an earlier run's file.

pub mod csv;
pub mod files;
pub mod json;
pub mod perfetto;
pub mod rocpd;
pub mod rocpd_merge;
pub mod split;
pub mod stats;

/// Bytes `buffer` takes before it writes to what it wraps.
pub(crate) fn buffer_room<W: std::io::Write>(buffer: &std::io::BufWriter<W>) -> usize {
    buffer.capacity() - buffer.buffer().len()
}

/// The least of `main` and `others` (a sink's room is its fullest buffer's).
pub(crate) fn least_room(main: usize, others: impl IntoIterator<Item = usize>) -> usize {
    others.into_iter().fold(main, usize::min)
}
