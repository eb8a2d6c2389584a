//! The runtime's API tables as rprof sees them: checked copies of the
//! original entries, and the installation of rprof's replacements.
//!
//! # Safety
//! The runtime hands `OnLoad` raw pointers to its tables. They are read here
//! only up to the size each table reports (`version.minor_id`), so a runtime
//! older than the headers rprof was built against never has memory read past
//! its tables, and entries it does not have stay `None`.

use hsa_sys::{AmdExtTable, ApiTableVersion, CoreApiTable, HsaApiTable};

/// Major versions of the root table that rprof reads: 1 = ROCm 5.x, 2 = ROCm
/// 6.0, 3 = ROCm 6.1 and later (entries appended; the core and AMD
/// extension pointers keep their places).
const ROOT_MAJORS: std::ops::RangeInclusive<u32> = 1..=3;
/// Major versions of the core table: 1 (ROCm 5.x) and 2 (ROCm 6+) have the
/// same layout for every entry rprof uses (checked against the ROCr headers
/// of rocm-5.2.3, 6.0.0, 6.1.0, 6.2.0, 6.2.4 and Oct 2024 master).
const CORE_MAJORS: std::ops::RangeInclusive<u32> = 1..=2;
/// Major versions of the AMD extension table: 2 (ROCm 6+) inserted entries
/// in the middle, so its entries are mapped by index ([`AMD_V2_INDEX`]).
const AMD_MAJORS: std::ops::RangeInclusive<u32> = 1..=2;

/// Entry indices (0 = first function after the version) in AMD extension
/// table major version 2, for the entries rprof uses; the same in the ROCr
/// headers of rocm-6.0.0 through Oct 2024 master.
mod amd_v2_index {
    pub const PROFILING_SET_PROFILER_ENABLED: usize = 2;
    pub const PROFILING_GET_DISPATCH_TIME: usize = 4;
    pub const SIGNAL_CREATE: usize = 33;
    pub const QUEUE_INTERCEPT_CREATE: usize = 37;
    pub const QUEUE_INTERCEPT_REGISTER: usize = 38;
}
use amd_v2_index as AMD_V2_INDEX;

/// Copies of the runtime's original entries, taken before any replacement.
#[derive(Debug, Clone, Copy)]
pub struct Runtime {
    /// The core table as it was (entries past the runtime's size are `None`).
    pub core: CoreApiTable,
    /// The AMD extension table as it was.
    pub amd: AmdExtTable,
}

/// Why tracing cannot run on this runtime; printed once, and the app runs
/// untraced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Copies the first `min(reported, size_of::<T>())` bytes of a table; the
/// rest stays zero (`None` entries).
///
/// # Safety
/// `src` must point to at least `reported` readable bytes, and `T` must be a
/// table of integers and optional function pointers (all-zero is valid).
unsafe fn copy_table<T: Copy>(src: *const T, reported: u32) -> T {
    // SAFETY: the caller guarantees all-zero is a valid `T` (null pointers,
    // `None` entries, zero integers).
    let mut out: T = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
    let n = (reported as usize).min(std::mem::size_of::<T>());
    // SAFETY: the caller guarantees `n <= reported` readable bytes at `src`;
    // `out` is a distinct local of at least `n` bytes; every byte pattern the
    // runtime wrote for these fields is valid for them.
    unsafe {
        std::ptr::copy_nonoverlapping(src.cast::<u8>(), (&mut out as *mut T).cast::<u8>(), n)
    };
    out
}

fn check_version(
    what: &str,
    v: &ApiTableVersion,
    known: std::ops::RangeInclusive<u32>,
) -> Result<(), Unsupported> {
    if !known.contains(&v.major_id) {
        return Err(Unsupported(format!(
            "the HSA runtime's {what} table has major version {} (rprof understands {}..={})",
            v.major_id,
            known.start(),
            known.end()
        )));
    }
    Ok(())
}

/// Reads entry `index` of a table laid out as a version followed by
/// pointer-sized entries, as the entry type `T`; `None`-like (all zero) if the
/// table is too short.
///
/// # Safety
/// `table` must point to at least `size` readable bytes; `T` must be an
/// `Option` of a function pointer whose signature matches the entry.
unsafe fn entry<T: Copy>(table: *const u8, size: u32, index: usize) -> T {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<usize>());
    let offset = std::mem::size_of::<ApiTableVersion>() + index * std::mem::size_of::<usize>();
    let raw: usize = if offset + std::mem::size_of::<usize>() <= size as usize {
        // SAFETY: inside the `size` bytes the caller vouches for.
        unsafe { std::ptr::read_unaligned(table.add(offset).cast::<usize>()) }
    } else {
        0
    };
    // SAFETY: `T` is a pointer-sized `Option<fn>`, for which 0 is `None` and
    // any other value is the runtime's function of that signature.
    unsafe { std::mem::transmute_copy::<usize, T>(&raw) }
}

/// The AMD extension entries rprof uses, from a table of major version 2,
/// placed into the version-1 layout rprof was built with (other entries
/// stay `None`).
///
/// # Safety
/// `table` must point to a major-2 AMD extension table of `size` bytes.
unsafe fn amd_from_v2(table: *const AmdExtTable, version: ApiTableVersion) -> AmdExtTable {
    let base = table.cast::<u8>();
    let size = version.minor_id;
    let mut t = AmdExtTable {
        version,
        ..AmdExtTable::default()
    };
    // SAFETY: (all five) indices from the major-2 headers, each read within
    // `size`, into fields of the same C signature.
    unsafe {
        t.hsa_amd_profiling_set_profiler_enabled_fn =
            entry(base, size, AMD_V2_INDEX::PROFILING_SET_PROFILER_ENABLED);
        t.hsa_amd_profiling_get_dispatch_time_fn =
            entry(base, size, AMD_V2_INDEX::PROFILING_GET_DISPATCH_TIME);
        t.hsa_amd_signal_create_fn = entry(base, size, AMD_V2_INDEX::SIGNAL_CREATE);
        t.hsa_amd_queue_intercept_create_fn =
            entry(base, size, AMD_V2_INDEX::QUEUE_INTERCEPT_CREATE);
        t.hsa_amd_queue_intercept_register_fn =
            entry(base, size, AMD_V2_INDEX::QUEUE_INTERCEPT_REGISTER);
    }
    t
}

macro_rules! require {
    ($missing:ident, $table:expr, $($field:ident),+ $(,)?) => {
        $( if $table.$field.is_none() { $missing.push(stringify!($field)); } )+
    };
}

impl Runtime {
    /// Checks the tables `OnLoad` received and copies the original entries.
    ///
    /// # Safety
    /// `table` must be the pointer the runtime passed to `OnLoad`.
    pub unsafe fn from_tables(table: *const HsaApiTable) -> Result<Runtime, Unsupported> {
        if table.is_null() {
            return Err(Unsupported("the HSA runtime passed no API table".into()));
        }
        // SAFETY: the runtime's table starts with its version (all versions).
        let root_version = unsafe { (*table).version };
        check_version("API", &root_version, ROOT_MAJORS)?;
        // SAFETY: reads at most the size the root table reports.
        let root: HsaApiTable = unsafe { copy_table(table, root_version.minor_id) };
        if root.core_.is_null() || root.amd_ext_.is_null() {
            return Err(Unsupported(
                "the HSA runtime's API table has no core or AMD extension table".into(),
            ));
        }
        // SAFETY: non-null table pointers from the runtime, each starting with its version.
        let (core_version, amd_version) =
            unsafe { ((*root.core_).version, (*root.amd_ext_).version) };
        check_version("core", &core_version, CORE_MAJORS)?;
        check_version("AMD extension", &amd_version, AMD_MAJORS)?;
        // SAFETY: each copy reads at most the size its table reports.
        let core: CoreApiTable = unsafe { copy_table(root.core_, core_version.minor_id) };
        let amd: AmdExtTable = if amd_version.major_id == 1 {
            // SAFETY: as above.
            unsafe { copy_table(root.amd_ext_, amd_version.minor_id) }
        } else {
            // SAFETY: a major-2 table of the size it reports.
            unsafe { amd_from_v2(root.amd_ext_, amd_version) }
        };
        let rt = Runtime { core, amd };
        let mut missing = Vec::new();
        require!(
            missing,
            rt.core,
            hsa_init_fn,
            hsa_shut_down_fn,
            hsa_iterate_agents_fn,
            hsa_agent_get_info_fn,
            hsa_queue_create_fn,
            hsa_queue_destroy_fn,
            hsa_signal_destroy_fn,
            hsa_signal_load_relaxed_fn,
            hsa_signal_store_screlease_fn,
            hsa_executable_freeze_fn,
            hsa_executable_iterate_symbols_fn,
            hsa_executable_symbol_get_info_fn,
        );
        require!(
            missing,
            rt.amd,
            hsa_amd_profiling_set_profiler_enabled_fn,
            hsa_amd_profiling_get_dispatch_time_fn,
            hsa_amd_signal_create_fn,
            hsa_amd_queue_intercept_create_fn,
            hsa_amd_queue_intercept_register_fn,
        );
        if !missing.is_empty() {
            return Err(Unsupported(format!(
                "the HSA runtime is too old for rprof: its API tables lack {}",
                missing.join(", ")
            )));
        }
        Ok(rt)
    }
}

/// Lets `edit` replace entries of the runtime's live core table.
///
/// # Safety
/// `table` must be the pointer passed to `OnLoad`, already validated by
/// [`Runtime::from_tables`] (`edit` may only write entries that the copy
/// has as `Some`, which proves they lie inside the runtime's table), and no
/// other thread may be using the table yet (true during `OnLoad`, which runs
/// inside `hsa_init`).
pub unsafe fn edit_core_table(table: *mut HsaApiTable, edit: impl FnOnce(&mut CoreApiTable)) {
    // SAFETY: validated by `from_tables`; the core table is writable runtime
    // memory that nobody else touches during `OnLoad`.
    let core = unsafe { &mut *(*table).core_ };
    edit(core);
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    #[test]
    fn short_tables_are_copied_only_as_far_as_reported() {
        let mut full = CoreApiTable::default();
        full.version = ApiTableVersion {
            major_id: 1,
            minor_id: 24,
            step_id: 0,
            reserved: 0,
        };
        unsafe extern "C" fn fake() -> hsa_sys::hsa_status_t {
            0
        }
        full.hsa_init_fn = Some(fake);
        full.hsa_shut_down_fn = Some(fake);
        // SAFETY: `full` is a whole table; 24 bytes = version + 2 entries.
        let copy: CoreApiTable = unsafe { copy_table(&full, 24) };
        assert!(copy.hsa_init_fn.is_some());
        assert!(
            copy.hsa_shut_down_fn.is_none(),
            "entry past the reported size must stay None"
        );
    }

    #[test]
    fn old_or_new_major_versions_are_refused() {
        let v = ApiTableVersion {
            major_id: 3,
            minor_id: 0,
            step_id: 0,
            reserved: 0,
        };
        assert!(check_version("core", &v, CORE_MAJORS).is_err());
        let v = ApiTableVersion {
            major_id: 1,
            minor_id: 0,
            step_id: 0,
            reserved: 0,
        };
        assert!(check_version("core", &v, CORE_MAJORS).is_ok());
    }

    #[test]
    fn a_table_without_the_intercept_api_is_refused() {
        let mut core = CoreApiTable::default();
        core.version = ApiTableVersion {
            major_id: 1,
            minor_id: std::mem::size_of::<CoreApiTable>() as u32,
            step_id: 0,
            reserved: 0,
        };
        let mut amd = AmdExtTable::default();
        // An AMD table that ends before the intercept entries.
        amd.version = ApiTableVersion {
            major_id: 1,
            minor_id: 64,
            step_id: 0,
            reserved: 0,
        };
        // SAFETY: an all-zero root table is valid (null pointers, zero version).
        let mut root: HsaApiTable = unsafe { std::mem::zeroed() };
        root.version = ApiTableVersion {
            major_id: 1,
            minor_id: std::mem::size_of::<HsaApiTable>() as u32,
            step_id: 0,
            reserved: 0,
        };
        root.core_ = &mut core;
        root.amd_ext_ = &mut amd;
        // SAFETY: all three tables are live locals.
        let err = unsafe { Runtime::from_tables(&root) }.unwrap_err();
        assert!(err.0.contains("hsa_amd_queue_intercept_create_fn"), "{err}");
        assert!(err.0.contains("too old"), "{err}");
    }

    #[test]
    fn amd_table_major_2_is_mapped_by_index() {
        // A fake major-2 table: version + 71 entries, entry i holding a
        // distinct marker (never called, only compared).
        #[repr(C)]
        struct V2 {
            version: ApiTableVersion,
            entries: [usize; 71],
        }
        let mut v2 = V2 {
            version: ApiTableVersion {
                major_id: 2,
                minor_id: std::mem::size_of::<V2>() as u32,
                step_id: 0,
                reserved: 0,
            },
            entries: [0; 71],
        };
        for (i, e) in v2.entries.iter_mut().enumerate() {
            *e = 0x1000 + i;
        }
        let version = v2.version;
        // SAFETY: a table of the reported size.
        let t = unsafe { amd_from_v2((&v2 as *const V2).cast(), version) };
        let as_usize = |p: *const ()| p as usize;
        assert_eq!(
            as_usize(t.hsa_amd_signal_create_fn.unwrap() as *const ()),
            0x1000 + 33
        );
        assert_eq!(
            as_usize(t.hsa_amd_queue_intercept_create_fn.unwrap() as *const ()),
            0x1000 + 37
        );
        assert_eq!(
            as_usize(t.hsa_amd_queue_intercept_register_fn.unwrap() as *const ()),
            0x1000 + 38
        );
        assert_eq!(
            as_usize(t.hsa_amd_profiling_set_profiler_enabled_fn.unwrap() as *const ()),
            0x1000 + 2
        );
        assert_eq!(
            as_usize(t.hsa_amd_profiling_get_dispatch_time_fn.unwrap() as *const ()),
            0x1000 + 4
        );
        assert!(
            t.hsa_amd_coherency_get_type_fn.is_none(),
            "unmapped entries stay None"
        );
        // A short major-2 table: entries past its size read as None.
        let mut short = V2 {
            version: v2.version,
            entries: v2.entries,
        };
        short.version.minor_id = (std::mem::size_of::<ApiTableVersion>() + 8 * 34) as u32;
        let version = short.version;
        // SAFETY: as above (the reported size is smaller than the memory).
        let t = unsafe { amd_from_v2((&short as *const V2).cast(), version) };
        assert!(t.hsa_amd_signal_create_fn.is_some());
        assert!(t.hsa_amd_queue_intercept_create_fn.is_none());
    }
}
