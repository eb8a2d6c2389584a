//! stats output (placeholder).
