//! csv output (placeholder).
