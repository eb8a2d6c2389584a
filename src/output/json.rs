//! json output (placeholder).
