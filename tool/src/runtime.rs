//! The runtime's API tables as rprof sees them: checked copies of the
//! original entries, and the installation of rprof's replacements.
//!
//! # Safety
//! The runtime hands `OnLoad` raw pointers to its tables. They are read here
//! only up to the size each table reports (`version.minor_id`), so a runtime
//! older than the headers rprof was built against never has memory read past
//! its tables, and entries it does not have stay `None`.

use hsa_sys::{AmdExtTable, ApiTableVersion, CoreApiTable, HsaApiTable};

/// Major version of each table this build understands (a new major means an
/// incompatible layout).
const KNOWN_MAJOR: u32 = 1;

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

fn check_version(what: &str, v: &ApiTableVersion) -> Result<(), Unsupported> {
    if v.major_id != KNOWN_MAJOR {
        return Err(Unsupported(format!(
            "the HSA runtime's {what} table has major version {} (rprof understands {KNOWN_MAJOR})",
            v.major_id
        )));
    }
    Ok(())
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
        check_version("API", &root_version)?;
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
        check_version("core", &core_version)?;
        check_version("AMD extension", &amd_version)?;
        // SAFETY: each copy reads at most the size its table reports.
        let core: CoreApiTable = unsafe { copy_table(root.core_, core_version.minor_id) };
        // SAFETY: as above.
        let amd: AmdExtTable = unsafe { copy_table(root.amd_ext_, amd_version.minor_id) };
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
            major_id: 2,
            minor_id: 0,
            step_id: 0,
            reserved: 0,
        };
        assert!(check_version("core", &v).is_err());
        let v = ApiTableVersion {
            major_id: 1,
            minor_id: 0,
            step_id: 0,
            reserved: 0,
        };
        assert!(check_version("core", &v).is_ok());
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
}
