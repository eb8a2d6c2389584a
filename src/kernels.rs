//! The kernel table: `kernel_object` → symbol, display name, kernel id and
//! filter decision.
//!
//! Filled by the tool library's code-object hooks (`hsa_executable_freeze`)
//! on application threads, read by the writer thread for every record. Names
//! are demangled (and truncated if asked) once, at insertion, and the
//! include/exclude decision is cached with them, so the per-record cost is one
//! concurrent hash-map lookup.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use regex::Regex;

use crate::config::TraceConfig;
use crate::sink::KernelInfo;

/// One known kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelEntry {
    /// Stable per-process id, 1-based, in order of first sight.
    pub kernel_id: u64,
    /// The symbol name from the code object, without a `.kd` suffix.
    pub symbol_name: String,
    /// What outputs show: demangled, truncated if configured.
    pub display_name: String,
    /// Whether the include/exclude filters keep this kernel.
    pub keep: bool,
}

impl KernelEntry {
    /// The view that sinks receive.
    pub fn info(&self) -> KernelInfo<'_> {
        KernelInfo {
            kernel_id: self.kernel_id,
            display_name: &self.display_name,
            symbol_name: &self.symbol_name,
        }
    }
}

/// How names are turned into display names and filtered.
#[derive(Debug, Clone, Default)]
pub struct NamePolicy {
    /// Keep only the base name (see [`base_name`]).
    pub truncate: bool,
    /// Keep only kernels whose display name matches.
    pub include: Option<Regex>,
    /// Drop kernels whose display name matches.
    pub exclude: Option<Regex>,
}

impl NamePolicy {
    /// The policy a trace configuration asks for.
    pub fn from_config(cfg: &TraceConfig) -> Self {
        NamePolicy {
            truncate: cfg.truncate_kernels,
            include: cfg.kernel_include.clone(),
            exclude: cfg.kernel_exclude.clone(),
        }
    }

    fn keeps(&self, display: &str) -> bool {
        self.include.as_ref().is_none_or(|r| r.is_match(display))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(display))
    }
}

/// Concurrent map from kernel object to [`KernelEntry`].
#[derive(Debug, Default)]
pub struct KernelTable {
    policy: NamePolicy,
    by_object: DashMap<u64, Arc<KernelEntry>>,
    /// Ids are per symbol name, so one kernel loaded on two agents (two
    /// kernel objects) shares one id.
    ids_by_symbol: DashMap<String, u64>,
    next_id: AtomicU64,
}

impl KernelTable {
    /// An empty table applying `policy`.
    pub fn new(policy: NamePolicy) -> Self {
        KernelTable {
            policy,
            ..Default::default()
        }
    }

    /// Records that `kernel_object` is the kernel `symbol_name` (as the
    /// loader reports it; a trailing `.kd` is removed). Re-inserting the same
    /// object replaces its entry (code objects can be unloaded and their
    /// memory reused).
    pub fn insert(&self, kernel_object: u64, symbol_name: &str) -> Arc<KernelEntry> {
        let symbol = symbol_name.strip_suffix(".kd").unwrap_or(symbol_name);
        let kernel_id = *self
            .ids_by_symbol
            .entry(symbol.to_string())
            .or_insert_with(|| self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let demangled = demangle(symbol);
        let display_name = if self.policy.truncate {
            base_name(&demangled)
        } else {
            demangled
        };
        let keep = self.policy.keeps(&display_name);
        let entry = Arc::new(KernelEntry {
            kernel_id,
            symbol_name: symbol.to_string(),
            display_name,
            keep,
        });
        self.by_object.insert(kernel_object, Arc::clone(&entry));
        entry
    }

    /// The entry for `kernel_object`. Objects the loader never reported
    /// (raw code objects, runtime-internal kernels) get an entry named
    /// `unknown_kernel_0x<object>` on first sight.
    pub fn resolve(&self, kernel_object: u64) -> Arc<KernelEntry> {
        if let Some(e) = self.by_object.get(&kernel_object) {
            return Arc::clone(&e);
        }
        self.insert(kernel_object, &format!("unknown_kernel_{kernel_object:#x}"))
    }

    /// Number of kernel objects known.
    pub fn len(&self) -> usize {
        self.by_object.len()
    }

    /// Whether no kernel is known.
    pub fn is_empty(&self) -> bool {
        self.by_object.is_empty()
    }
}

/// Demangles an Itanium C++ symbol; other names come back unchanged.
pub fn demangle(symbol: &str) -> String {
    if !symbol.starts_with("_Z") {
        return symbol.to_string();
    }
    cpp_demangle::Symbol::new(symbol.as_bytes())
        .ok()
        .and_then(|sym| sym.demangle().ok())
        .unwrap_or_else(|| symbol.to_string())
}

/// The base name of a demangled kernel: no return type, no parameter list,
/// no template arguments, namespaces kept.
/// `void ns::kern<float, 4>(float*, int)` → `ns::kern`.
pub fn base_name(demangled: &str) -> String {
    // Cut the parameter list: the first '(' outside template brackets.
    let mut depth = 0i32;
    let mut end = demangled.len();
    for (i, c) in demangled.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &demangled[..end];
    // Drop template arguments (keep the text outside any <...>).
    let mut out = String::with_capacity(head.len());
    let mut depth = 0i32;
    for c in head.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    // Drop a return type: the last space outside templates separates it.
    let name = out.trim();
    let name = name.rsplit(' ').next().unwrap_or(name);
    if name.is_empty() {
        demangled.to_string()
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_and_truncates() {
        assert_eq!(demangle("_Z3addPfS_i"), "add(float*, float*, int)");
        assert_eq!(demangle("plain_kernel"), "plain_kernel");
        assert_eq!(base_name("add(float*, float*, int)"), "add");
        assert_eq!(
            base_name("void ns::kern<float, 4>(float*, int)"),
            "ns::kern"
        );
        assert_eq!(base_name("plain_kernel"), "plain_kernel");
        assert_eq!(base_name("ns::k<(anonymous namespace)::T>(int)"), "ns::k");
    }

    #[test]
    fn ids_are_per_symbol_and_kd_is_stripped() {
        let t = KernelTable::new(NamePolicy::default());
        let a = t.insert(0x1000, "_Z3addPfS_i.kd");
        let b = t.insert(0x2000, "_Z3addPfS_i");
        let c = t.insert(0x3000, "other");
        assert_eq!(a.kernel_id, 1);
        assert_eq!(b.kernel_id, 1);
        assert_eq!(c.kernel_id, 2);
        assert_eq!(a.symbol_name, "_Z3addPfS_i");
        assert_eq!(t.resolve(0x1000).display_name, "add(float*, float*, int)");
        let u = t.resolve(0xdead);
        assert_eq!(u.display_name, "unknown_kernel_0xdead");
        assert_eq!(u.kernel_id, 3);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn filters_are_cached_per_entry() {
        let t = KernelTable::new(NamePolicy {
            truncate: true,
            include: Some(Regex::new("^add$").unwrap()),
            exclude: None,
        });
        assert!(t.insert(1, "_Z3addPfS_i").keep);
        assert!(!t.insert(2, "_Z3mulPfS_i").keep);
    }
}
