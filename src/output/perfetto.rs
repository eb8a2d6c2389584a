//! perfetto output (placeholder).
