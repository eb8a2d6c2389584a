//! The kernel table: `kernel_object` → symbol, display name, kernel id and
//! filter decision.
//!
//! Filled on the writer thread from what the tool library's code-object hook
//! (`hsa_executable_freeze`) copies out of the runtime on the application's
//! thread ([`LoadedKernels`], handed over in the record stream ahead of any
//! dispatch of those kernels), and read by the writer for every record. The
//! hook only copies symbols and metadata notes; parsing the metadata,
//! demangling and filtering happen in [`KernelTable::learn`], off the
//! application's thread (an executable of 256 kernels cost the app 1.4 ms
//! when the hook did it all). Names are demangled (and truncated if asked)
//! once, when a kernel is first resolved (most kernels an app loads are never
//! launched), and the include/exclude decision is cached with them, so the
//! per-record cost is one concurrent hash-map lookup. It must not
//! touch the runtime (symbols reach it as names and addresses) nor format
//! outputs (the sinks do).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use regex::Regex;

use crate::config::TraceConfig;
use crate::sink::{KernelInfo, KernelResourceCounts};

/// One known kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelEntry {
    /// Stable per-process id, 1-based, in order of first sight.
    pub kernel_id: u64,
    /// The symbol name from the code object, without a `.kd` suffix.
    pub symbol_name: String,
    /// Registers and static memory from the code object's metadata.
    pub resources: Option<KernelResourceCounts>,
    /// Display name and filter verdict, worked out when the kernel is first
    /// resolved ([`KernelTable::resolve`]), not when it is loaded: an app
    /// loads whole libraries of kernels and launches a few, and demangling
    /// was the largest per-kernel cost left (2.5–7 µs each).
    named: OnceLock<Named>,
    /// The first dispatch id this entry names: dispatches with a lower id
    /// were submitted before its executable was frozen, so they ran
    /// whatever the object held before (0: every dispatch).
    valid_from: u64,
    /// The entry this one replaced at the same kernel object (its code
    /// object unloaded and the memory reused), for the dispatches before
    /// `valid_from`; `None` when `valid_from` is 0 or the object was new.
    replaced: Option<Arc<KernelEntry>>,
}

/// Gives up the chain of replaced entries one link at a time: a kernel object
/// reused by 100,000 module loads makes a chain that long, and dropping it
/// recursively would overflow the stack at exit.
impl Drop for KernelEntry {
    fn drop(&mut self) {
        let mut next = self.replaced.take();
        while let Some(entry) = next {
            next = match Arc::try_unwrap(entry) {
                Ok(mut older) => older.replaced.take(),
                // Still held elsewhere (a writer's cache): its last holder
                // drops the rest.
                Err(_) => None,
            };
        }
    }
}

/// What a kernel is shown as, and whether the filters keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    display_name: String,
    keep: bool,
}

impl KernelEntry {
    /// What outputs show: demangled, truncated if configured. (An entry is
    /// always named by the time the table hands it out.)
    pub fn display_name(&self) -> &str {
        self.named
            .get()
            .map_or(self.symbol_name.as_str(), |n| n.display_name.as_str())
    }

    /// Whether the include/exclude filters keep this kernel.
    pub fn keep(&self) -> bool {
        self.named.get().is_none_or(|n| n.keep)
    }

    /// The entry that names dispatch `dispatch_id` of this entry's kernel
    /// object: this one, or the one it replaced for a dispatch submitted
    /// before its executable was frozen.
    pub fn for_dispatch(self: &Arc<Self>, dispatch_id: u64) -> &Arc<KernelEntry> {
        let mut entry = self;
        while entry.valid_from > dispatch_id {
            match &entry.replaced {
                Some(older) => entry = older,
                None => break,
            }
        }
        entry
    }

    /// The view that sinks receive.
    pub fn info(&self) -> KernelInfo<'_> {
        KernelInfo {
            kernel_id: self.kernel_id,
            display_name: self.display_name(),
            symbol_name: &self.symbol_name,
            resources: self.resources,
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

    /// The display name of `symbol` and the verdict on it.
    fn name(&self, symbol: &str) -> Named {
        let display_name = if self.truncate {
            base_name(symbol)
        } else {
            demangle(symbol)
        };
        let keep = self.keeps(&display_name);
        Named { display_name, keep }
    }
}

/// The kernels of one frozen executable, as the code-object hook copies them
/// out of the runtime for [`KernelTable::learn`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedKernels {
    /// Each kernel symbol: its kernel object and its name as the loader
    /// gives it (`.kd` suffix included or not).
    pub symbols: Vec<(u64, String)>,
    /// Each code object of the executable whose metadata could be read: its
    /// id in the code-object register ([`crate::code_object::register_loaded`])
    /// and its metadata note ([`crate::code_object::metadata_note`]).
    pub notes: Vec<(u64, Vec<u8>)>,
    /// Why a code object's metadata could not be read, if one could not
    /// (its kernels get no resources).
    pub unreadable: Option<String>,
    /// The first dispatch id that can run these kernels: the engine's next
    /// dispatch id when the executable was frozen (set by
    /// [`crate::engine::Engine::push_loaded_kernels`]). A kernel object an
    /// earlier executable held keeps its old name for the dispatches before
    /// it, whose records may reach the writer after these kernels do.
    pub first_dispatch_id: u64,
}

/// Concurrent map from kernel object to [`KernelEntry`].
#[derive(Debug, Default)]
pub struct KernelTable {
    policy: NamePolicy,
    /// Read for every record: hashed with foldhash (SipHash cost 5 % of
    /// the writer's instructions on the storm).
    by_object: DashMap<u64, Arc<KernelEntry>, foldhash::fast::RandomState>,
    /// Ids are per symbol name, so one kernel loaded on two agents (two
    /// kernel objects) shares one id.
    ids_by_symbol: DashMap<String, u64, foldhash::fast::RandomState>,
    next_id: AtomicU64,
    /// Bumped after every entry filed (new or replacing one): a reader that
    /// keeps entries of its own ([`crate::engine::CachedKernelNames`]) drops
    /// them when it moves.
    generation: AtomicU64,
    /// An unreadable code object has been reported (once per run).
    said_unreadable: AtomicBool,
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
    /// loader reports it; a trailing `.kd` is removed), for every dispatch.
    /// Re-inserting the same object replaces its entry (code objects can be
    /// unloaded and their memory reused; [`KernelTable::learn`] keeps the
    /// old entry for the dispatches before the new executable).
    pub fn insert(&self, kernel_object: u64, symbol_name: &str) -> Arc<KernelEntry> {
        let entry = self.enter(kernel_object, symbol_name, None, 0);
        self.named(&entry);
        entry
    }

    /// Files `kernel_object` under its symbol, not yet named, for the
    /// dispatches from `valid_from` on (0: all); the entry it replaces names
    /// those before.
    fn enter(
        &self,
        kernel_object: u64,
        symbol_name: &str,
        resources: Option<KernelResourceCounts>,
        valid_from: u64,
    ) -> Arc<KernelEntry> {
        let symbol = symbol_name.strip_suffix(".kd").unwrap_or(symbol_name);
        let kernel_id = *self
            .ids_by_symbol
            .entry(symbol.to_string())
            .or_insert_with(|| self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let replaced = if valid_from == 0 {
            None
        } else {
            self.by_object.get(&kernel_object).map(|e| Arc::clone(&e))
        };
        let entry = Arc::new(KernelEntry {
            kernel_id,
            symbol_name: symbol.to_string(),
            resources,
            named: OnceLock::new(),
            valid_from,
            replaced,
        });
        self.by_object.insert(kernel_object, Arc::clone(&entry));
        self.generation.fetch_add(1, Ordering::Release);
        entry
    }

    /// How many entries have been filed so far (see `generation`).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// `entry`, named (on its first use).
    fn named(&self, entry: &KernelEntry) {
        entry
            .named
            .get_or_init(|| self.policy.name(&entry.symbol_name));
    }

    /// Enters the kernels of a frozen executable, each with its resources
    /// from its code object's metadata (none where the metadata is missing
    /// or unreadable). Returns why some kernels have no resources, the first
    /// time in the table's life that happens (to be said once per run).
    pub fn learn(&self, kernels: &LoadedKernels) -> Option<String> {
        let mut problem = kernels.unreadable.clone();
        let mut resources: HashMap<&str, KernelResourceCounts> = HashMap::new();
        let parsed: Vec<_> = kernels
            .notes
            .iter()
            .map(|(id, note)| (*id, crate::code_object::note_kernel_resources(note)))
            .collect();
        for (code_object_id, found) in &parsed {
            match found {
                Ok(list) => {
                    for k in list {
                        let name = k.symbol.strip_suffix(".kd").unwrap_or(&k.name);
                        resources.insert(
                            name,
                            KernelResourceCounts {
                                code_object_id: *code_object_id,
                                sgpr_count: k.sgpr_count,
                                arch_vgpr_count: k.vgpr_count,
                                accum_vgpr_count: k.agpr_count,
                                group_segment_fixed_size: k.group_segment_fixed_size,
                                private_segment_fixed_size: k.private_segment_fixed_size,
                            },
                        );
                    }
                }
                Err(e) => {
                    problem.get_or_insert_with(|| e.to_string());
                }
            }
        }
        for (object, name) in &kernels.symbols {
            let name = name.trim_end_matches('\0');
            let bare = name.strip_suffix(".kd").unwrap_or(name);
            self.enter(
                *object,
                name,
                resources.get(bare).copied(),
                kernels.first_dispatch_id,
            );
        }
        problem.filter(|_| !self.said_unreadable.swap(true, Ordering::Relaxed))
    }

    /// The newest entry for `kernel_object` (its dispatches' entries are
    /// [`KernelTable::for_dispatch`]'s). Objects the loader never reported
    /// (raw code objects, runtime-internal kernels) get an entry named
    /// `unknown_kernel_0x<object>` on first sight.
    pub fn resolve(&self, kernel_object: u64) -> Arc<KernelEntry> {
        if let Some(e) = self.by_object.get(&kernel_object) {
            let e = Arc::clone(&e);
            self.named(&e);
            return e;
        }
        self.insert(kernel_object, &format!("unknown_kernel_{kernel_object:#x}"))
    }

    /// The entry that names dispatch `dispatch_id` among those of `newest`
    /// (an entry [`KernelTable::resolve`] gave), named.
    pub fn for_dispatch<'a>(
        &self,
        newest: &'a Arc<KernelEntry>,
        dispatch_id: u64,
    ) -> &'a Arc<KernelEntry> {
        let entry = newest.for_dispatch(dispatch_id);
        self.named(entry);
        entry
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
    let plain = |s: &str| {
        cpp_demangle::Symbol::new(s.as_bytes())
            .ok()?
            .demangle()
            .ok()
    };
    read_symbol(symbol, plain).unwrap_or_else(|| symbol.to_string())
}

/// What `read` makes of `symbol`, or, if it refuses it, of the symbol
/// without clang's template parameter declarations of a built-in type
/// ([`without_builtin_param_decls`]).
fn read_symbol<T>(symbol: &str, read: impl Fn(&str) -> Option<T>) -> Option<T> {
    read(symbol).or_else(|| read(&without_builtin_param_decls(symbol)?))
}

/// `symbol` without the template parameter declarations of a built-in type
/// that clang (17 and later) writes in front of some template arguments,
/// `Tn` and the type: `TnDa` for an `auto` non-type parameter, as in
/// rocRAND's kernels on ROCm 6.4 (`kernel_wrapper<auto Kernel, ...>`).
/// The demangler (cpp_demangle 0.5) refuses the whole symbol over them;
/// LLVM's prints nothing for them, so the symbol without them demangles to
/// LLVM's text. Only built-in types are taken out: they never enter the
/// substitution table, so the `S_` references after them keep their
/// meaning. `None` when there is none. Used only on a symbol the demangler
/// refused as it is (a `Tn` inside an identifier is then left alone).
fn without_builtin_param_decls(symbol: &str) -> Option<String> {
    let bytes = symbol.as_bytes();
    let mut kept = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"Tn") {
            if let Some(len) = builtin_type_len(&bytes[i + 2..]) {
                i += 2 + len;
                continue;
            }
        }
        kept.push(bytes[i]);
        i += 1;
    }
    if kept.len() == bytes.len() {
        return None;
    }
    String::from_utf8(kept).ok()
}

/// The length of the Itanium `<builtin-type>` code `rest` starts with (one
/// letter, or `D` and a letter), if it starts with one.
fn builtin_type_len(rest: &[u8]) -> Option<usize> {
    match rest {
        [b'v' | b'w' | b'b' | b'c' | b'a' | b'h' | b's' | b't' | b'i' | b'j' | b'l' | b'm'
        | b'x' | b'y' | b'n' | b'o' | b'f' | b'd' | b'e' | b'g' | b'z', ..] => Some(1),
        [b'D', b'd' | b'e' | b'f' | b'h' | b'i' | b's' | b'u' | b'a' | b'c' | b'n', ..] => Some(2),
        _ => None,
    }
}

/// The base name of a kernel symbol, read from the demangler's parse: the
/// function's qualified name (namespaces and classes kept) without return
/// type, parameter list or template arguments.
/// `_ZN2ns4kernIfLi4EEEvPT_i` (`void ns::kern<float, 4>(float*, int)`) →
/// `ns::kern`; `operator<`, `operator()`, lambdas (`{lambda(int)#1}`) and
/// `(anonymous namespace)` stay whole, since they are single unqualified
/// names in the parse. Names that are not Itanium-mangled (OpenCL kernels,
/// plain C) and symbols the demangler refuses come back unchanged.
pub fn base_name(symbol: &str) -> String {
    if !symbol.starts_with("_Z") {
        return symbol.to_string();
    }
    let name_of = |s: &str| {
        let sym = cpp_demangle::Symbol::new(s.as_bytes()).ok()?;
        let options = cpp_demangle::DemangleOptions::new()
            .no_params()
            .no_return_type();
        let mut name = OutsideTemplateArgs::default();
        match sym.structured_demangle(&mut name, &options) {
            Ok(()) if !name.name().is_empty() => Some(name.name().to_string()),
            _ => None,
        }
    };
    read_symbol(symbol, name_of).unwrap_or_else(|| symbol.to_string())
}

/// A [`cpp_demangle::DemangleWrite`] that keeps the text written outside
/// every `<template-args>` node of the parse. The demangler writes a node's
/// `<` just before entering it and its `>` just after leaving it: both are
/// dropped with the node.
#[derive(Default)]
struct OutsideTemplateArgs {
    /// Open nodes, innermost last.
    nodes: Vec<cpp_demangle::DemangleNodeType>,
    /// `<template-args>` among `nodes`.
    in_template_args: usize,
    /// The outermost `<template-args>` just closed: its `>` comes next.
    closing: bool,
    text: String,
    /// The length of `text` when the last `<unqualified-name>` outside
    /// template arguments ended.
    name_end: Option<usize>,
}

impl OutsideTemplateArgs {
    /// The name written, without what follows the function's own name.
    fn name(&self) -> &str {
        self.text[..self.name_end.unwrap_or(self.text.len())].trim()
    }
}

impl cpp_demangle::DemangleWrite for OutsideTemplateArgs {
    fn push_demangle_node(&mut self, node: cpp_demangle::DemangleNodeType) {
        if node == cpp_demangle::DemangleNodeType::TemplateArgs {
            if self.in_template_args == 0 && self.text.ends_with('<') {
                self.text.pop();
            }
            self.in_template_args += 1;
        }
        self.nodes.push(node);
    }

    fn write_string(&mut self, s: &str) -> std::fmt::Result {
        let s = match std::mem::take(&mut self.closing) {
            true => s.strip_prefix('>').unwrap_or(s),
            false => s,
        };
        if self.in_template_args == 0 {
            self.text.push_str(s);
        }
        Ok(())
    }

    fn pop_demangle_node(&mut self) {
        match self.nodes.pop() {
            Some(cpp_demangle::DemangleNodeType::TemplateArgs) => {
                self.in_template_args -= 1;
                self.closing = self.in_template_args == 0;
            }
            Some(cpp_demangle::DemangleNodeType::UnqualifiedName) if self.in_template_args == 0 => {
                self.name_end = Some(self.text.len());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_and_truncates() {
        assert_eq!(demangle("_Z3addPfS_i"), "add(float*, float*, int)");
        assert_eq!(demangle("plain_kernel"), "plain_kernel");
        // base_name reads the symbol (the demangled form in the comment).
        // add(float*, float*, int)
        assert_eq!(base_name("_Z3addPfS_i"), "add");
        // void ns::kern<float, 4>(float*, int)
        assert_eq!(base_name("_ZN2ns4kernIfLi4EEEvPT_i"), "ns::kern");
        assert_eq!(base_name("plain_kernel"), "plain_kernel");
        // void ns::k<(anonymous namespace)::T>(int)
        assert_eq!(base_name("_ZN2ns1kIN12_GLOBAL__N_11TEEEvi"), "ns::k");
    }

    /// Each case: symbol, its full demangling (checked too, so the case is
    /// what it claims), base name.
    fn check(cases: &[(&str, &str, &str)]) {
        for &(symbol, demangled, base) in cases {
            assert_eq!(demangle(symbol), demangled, "{symbol}");
            assert_eq!(base_name(symbol), base, "{symbol}");
        }
    }

    /// rocRAND's Philox kernel as Debian sid's rocRAND (ROCm 6.4) names it:
    /// an `auto` template parameter declared as `TnDa`. The expected text
    /// is `llvm-cxxfilt-21`'s, with the space the demangler writes between
    /// two closing `>` (as in every name rprof demangles).
    const ROCRAND_PHILOX: &str = "_ZN12rocrand_impl6system6detail14kernel_wrapperITnDaXadL_ZNS_4host15generate_philoxIfNS3_20uniform_distributionIfjEEEEv4dim3S7_S7_S7_NS3_27philox4x32_10_device_engineEPT_mT0_EENS3_23default_config_providerIL16rocrand_rng_type404EEEfLb0EJS8_PfmS6_EEEvDpT3_";

    #[test]
    fn clangs_template_parameter_declarations_of_built_in_types_are_demangled() {
        check(&[
            (
                ROCRAND_PHILOX,
                "void rocrand_impl::system::detail::kernel_wrapper<&void rocrand_impl::host::generate_philox<float, rocrand_impl::host::uniform_distribution<float, unsigned int> >(dim3, dim3, dim3, dim3, rocrand_impl::host::philox4x32_10_device_engine, float*, unsigned long, rocrand_impl::host::uniform_distribution<float, unsigned int>), rocrand_impl::host::default_config_provider<(rocrand_rng_type)404>, float, false, rocrand_impl::host::philox4x32_10_device_engine, float*, unsigned long, rocrand_impl::host::uniform_distribution<float, unsigned int> >(rocrand_impl::host::philox4x32_10_device_engine, float*, unsigned long, rocrand_impl::host::uniform_distribution<float, unsigned int>)",
                "rocrand_impl::system::detail::kernel_wrapper",
            ),
            // template <int N> void k(); k<3>() declared with its type: `Tni`.
            ("_Z1kITniLi3EEvv", "void k<3>()", "k"),
        ]);
    }

    #[test]
    fn only_built_in_template_parameter_declarations_are_taken_out() {
        assert_eq!(
            without_builtin_param_decls("_Z1kITnDaLi3ETniLi4EEvv").as_deref(),
            Some("_Z1kILi3ELi4EEvv")
        );
        // A declared class type would enter the substitution table: such a
        // symbol stays as it is.
        assert_eq!(without_builtin_param_decls("_Z1kITn1SLi3EEvv"), None);
        assert_eq!(demangle("_Z1kITn1SLi3EEvv"), "_Z1kITn1SLi3EEvv");
        // "Tn" inside a name the demangler reads as it is: never touched.
        assert_eq!(demangle("_Z4xTnav"), "xTna()");
        assert_eq!(base_name("_Z4xTnav"), "xTna");
    }

    #[test]
    fn base_names_of_templates() {
        check(&[
            ("_Z1kILb1EEvi", "void k<true>(int)", "k"),
            // A template argument holding '>': the text heuristic gave "1".
            ("_Z1kIXgtLi2ELi1EEEvv", "void k<((2)>(1))>()", "k"),
            (
                "_ZN2ns6kernelIXgtLi2ELi1EEEEvPf",
                "void ns::kernel<((2)>(1))>(float*)",
                "ns::kernel",
            ),
        ]);
    }

    #[test]
    fn base_names_of_operators() {
        check(&[
            (
                "_ZNK2ns5inner1SltERKS1_",
                "ns::inner::S::operator<(ns::inner::S const&) const",
                "ns::inner::S::operator<",
            ),
            (
                "_ZN2nsltERKNS_1AES2_",
                "ns::operator<(ns::A const&, ns::A const&)",
                "ns::operator<",
            ),
            ("_ZN2ns1AclEv", "ns::A::operator()()", "ns::A::operator()"),
            (
                "_ZNK2ns5inner1SclIfEEvT_",
                "void ns::inner::S::operator()<float>(float) const",
                "ns::inner::S::operator()",
            ),
            (
                "_ZN2ns5inner1SlsEi",
                "ns::inner::S::operator<<(int)",
                "ns::inner::S::operator<<",
            ),
        ]);
    }

    #[test]
    fn base_names_of_lambdas_and_anonymous_namespaces() {
        check(&[
            (
                "_Z6launchIZ4uservEUliE_EvT_",
                "void launch<user()::{lambda(int)#1}>(user()::{lambda(int)#1})",
                "launch",
            ),
            (
                "_ZZ4uservENKUliE_clEi",
                "user()::{lambda(int)#1}::operator()(int) const",
                "user()::{lambda(int)#1}::operator()",
            ),
            (
                "_ZN12_GLOBAL__N_111anon_kernelEi",
                "(anonymous namespace)::anon_kernel(int)",
                "(anonymous namespace)::anon_kernel",
            ),
            (
                "_ZN2ns2k2IN12_GLOBAL__N_11TEEEvi",
                "void ns::k2<(anonymous namespace)::T>(int)",
                "ns::k2",
            ),
        ]);
    }

    #[test]
    fn base_names_of_nested_namespaces_and_plain_names() {
        check(&[
            (
                "_ZN1a1b1c6kernelEPf",
                "a::b::c::kernel(float*)",
                "a::b::c::kernel",
            ),
            // OpenCL / C kernels are not mangled: kept as they are, even
            // with characters a C++ parse would cut.
            ("vector_add", "vector_add", "vector_add"),
            ("copy<float>(x)", "copy<float>(x)", "copy<float>(x)"),
            // A symbol the demangler refuses is kept whole.
            ("_Z_not_mangled", "_Z_not_mangled", "_Z_not_mangled"),
        ]);
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
        assert_eq!(t.resolve(0x1000).display_name(), "add(float*, float*, int)");
        let u = t.resolve(0xdead);
        assert_eq!(u.display_name(), "unknown_kernel_0xdead");
        assert_eq!(u.kernel_id, 3);
        assert_eq!(t.len(), 4);
    }

    /// A kernel object reused by a later executable: each dispatch gets the
    /// entry of the executable it was submitted under, however late its
    /// record comes; a plain insert names every dispatch.
    #[test]
    fn a_reused_kernel_object_names_each_dispatch_after_the_executable_it_ran() {
        let t = KernelTable::new(NamePolicy::default());
        let executable = |symbol: &str, first_dispatch_id| LoadedKernels {
            symbols: vec![(0x10, symbol.into())],
            first_dispatch_id,
            ..LoadedKernels::default()
        };
        let name = |newest: &Arc<KernelEntry>, dispatch_id| {
            t.for_dispatch(newest, dispatch_id)
                .display_name()
                .to_string()
        };
        t.learn(&executable("_Z5alphav.kd", 1));
        t.learn(&executable("_Z5gammav.kd", 5));
        t.learn(&executable("_Z4betav.kd", 9));
        let newest = t.resolve(0x10);
        let names: Vec<String> = [1, 4, 5, 8, 9, 100].map(|d| name(&newest, d)).into();
        assert_eq!(
            names,
            ["alpha()", "alpha()", "gamma()", "gamma()", "beta()", "beta()"]
        );
        t.insert(0x10, "delta.kd");
        let newest = t.resolve(0x10);
        assert_eq!(
            (name(&newest, 1), name(&newest, 100)),
            ("delta".into(), "delta".into())
        );
    }

    /// A kernel object reloaded 200,000 times: its chain of entries is given
    /// up without recursing once per link (which overflowed a test thread's
    /// stack).
    #[test]
    fn a_long_chain_of_replaced_entries_drops_without_recursion() {
        let t = KernelTable::new(NamePolicy::default());
        for first in 1..=200_000u64 {
            t.learn(&LoadedKernels {
                symbols: vec![(0x10, "k.kd".into())],
                first_dispatch_id: first,
                ..LoadedKernels::default()
            });
        }
        let newest = t.resolve(0x10);
        assert_eq!(t.for_dispatch(&newest, 1).valid_from, 1);
        drop(newest);
        drop(t);
    }

    #[test]
    fn learned_kernels_are_named_when_first_resolved() {
        let t = KernelTable::new(NamePolicy {
            truncate: false,
            include: Some(Regex::new("^add").unwrap()),
            exclude: None,
        });
        let problem = t.learn(&LoadedKernels {
            symbols: vec![
                (0x10, "_Z3addPfS_i.kd".into()),
                (0x20, "_Z3mulPfS_i.kd\0".into()),
            ],
            notes: vec![(4, b"not msgpack".to_vec())],
            unreadable: None,
            first_dispatch_id: 1,
        });
        assert!(
            problem.is_some_and(|p| p.contains("malformed")),
            "said once"
        );
        assert_eq!(t.len(), 2);
        assert!(t.by_object.iter().all(|e| e.named.get().is_none()));
        let add = t.resolve(0x10);
        assert_eq!(
            (add.display_name(), add.keep()),
            ("add(float*, float*, int)", true)
        );
        let mul = t.resolve(0x20);
        assert_eq!(
            (mul.display_name(), mul.keep()),
            ("mul(float*, float*, int)", false)
        );
        assert_eq!((add.kernel_id, mul.kernel_id), (1, 2));
        assert_eq!(mul.symbol_name, "_Z3mulPfS_i");
        // A second unreadable note is not said again.
        let again = t.learn(&LoadedKernels {
            unreadable: Some("gone".into()),
            ..Default::default()
        });
        assert_eq!(again, None);
    }

    #[test]
    fn filters_are_cached_per_entry() {
        let t = KernelTable::new(NamePolicy {
            truncate: true,
            include: Some(Regex::new("^add$").unwrap()),
            exclude: None,
        });
        assert!(t.insert(1, "_Z3addPfS_i").keep());
        assert!(!t.insert(2, "_Z3mulPfS_i").keep());
    }
}
