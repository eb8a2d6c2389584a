//! The code objects ROCr loaded into an executable, read through its loader
//! extension (`hsa_ven_amd_loader` 1.01) for their kernels' metadata.
//!
//! Owns the calls into the loader extension and the reading of each loaded code
//! object's metadata note (from the memory the app handed ROCr, or from the file
//! ROCr holds open); parsing the note is [`rprof_core::code_object`]'s, on the
//! writer thread. It runs once per frozen executable, on the app thread that
//! froze it, never on a dispatch path. It must not keep any pointer it was
//! given: the note is copied before the call returns.

use std::ffi::c_void;
use std::os::fd::BorrowedFd;

use hsa_sys::*;
use rprof_core::code_object::{metadata_note, register_loaded, LoadedCodeObject};

use crate::runtime::Runtime;

/// ROCr's loader extension, version 1.01 (iterate and query loaded code objects).
#[derive(Debug, Clone, Copy)]
pub struct Loader {
    iterate: unsafe extern "C" fn(
        hsa_executable_t,
        Option<
            unsafe extern "C" fn(
                hsa_executable_t,
                hsa_loaded_code_object_t,
                *mut c_void,
            ) -> hsa_status_t,
        >,
        *mut c_void,
    ) -> hsa_status_t,
    get_info: unsafe extern "C" fn(
        hsa_loaded_code_object_t,
        hsa_ven_amd_loader_loaded_code_object_info_t,
        *mut c_void,
    ) -> hsa_status_t,
}

/// A code object whose kernels could not be read, and why (said once per run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable(pub String);

impl Loader {
    /// Asks the runtime for its loader extension table; `None` if it has none.
    pub fn query(rt: &Runtime) -> Option<Loader> {
        let get = rt.core.hsa_system_get_major_extension_table_fn?;
        let mut table = hsa_ven_amd_loader_1_01_pfn_t::default();
        // SAFETY: the runtime writes at most `size` bytes of its 1.x loader table
        // into `table`, which is that many bytes of plain function pointers.
        let status = unsafe {
            get(
                HSA_EXTENSION_AMD_LOADER as u16,
                1,
                std::mem::size_of_val(&table),
                (&mut table as *mut hsa_ven_amd_loader_1_01_pfn_t).cast(),
            )
        };
        if status != HSA_STATUS_SUCCESS {
            return None;
        }
        Some(Loader {
            iterate: table.hsa_ven_amd_loader_executable_iterate_loaded_code_objects?,
            get_info: table.hsa_ven_amd_loader_loaded_code_object_get_info?,
        })
    }

    /// The metadata note of every code object loaded into `executable`, each
    /// with the id of its code object in the process's register (every loaded
    /// code object is registered, [`register_loaded`]), with what could not be
    /// read.
    pub fn metadata_notes(
        &self,
        executable: hsa_executable_t,
    ) -> (Vec<(u64, Vec<u8>)>, Vec<Unreadable>) {
        struct Visit {
            loader: Loader,
            notes: Vec<(u64, Vec<u8>)>,
            unreadable: Vec<Unreadable>,
        }
        unsafe extern "C" fn visit(
            _executable: hsa_executable_t,
            object: hsa_loaded_code_object_t,
            data: *mut c_void,
        ) -> hsa_status_t {
            // SAFETY: `data` is the `Visit` below, alive and not otherwise borrowed
            // for the whole iteration.
            let v = unsafe { &mut *data.cast::<Visit>() };
            let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let (described, note) = v.loader.read(object);
                let id = register_loaded(described);
                note.map(|n| (id, n))
            }));
            match found {
                Ok(Ok(note)) => v.notes.push(note),
                Ok(Err(why)) => v.unreadable.push(why),
                Err(_) => v.unreadable.push(Unreadable("reading it panicked".into())),
            }
            HSA_STATUS_SUCCESS
        }
        let mut v = Visit {
            loader: *self,
            notes: Vec::new(),
            unreadable: Vec::new(),
        };
        // SAFETY: a frozen executable; the callback only reads the code objects it
        // is handed and writes `v`, which outlives the call.
        let status =
            unsafe { (self.iterate)(executable, Some(visit), (&mut v as *mut Visit).cast()) };
        if status != HSA_STATUS_SUCCESS {
            v.unreadable.push(Unreadable(format!(
                "iterating code objects failed ({status})"
            )));
        }
        (v.notes, v.unreadable)
    }

    /// One fixed-size attribute of a loaded code object.
    ///
    /// # Safety
    /// `T` must be the attribute's type (the runtime writes `size_of::<T>()` bytes).
    unsafe fn info<T: Default>(
        &self,
        object: hsa_loaded_code_object_t,
        attribute: u32,
    ) -> Option<T> {
        let mut value = T::default();
        // SAFETY: the caller guarantees `T` is the attribute's type.
        let status = unsafe { (self.get_info)(object, attribute, (&mut value as *mut T).cast()) };
        (status == HSA_STATUS_SUCCESS).then_some(value)
    }

    /// What the loader says about a loaded code object (for the rocpd
    /// output), and a copy of its metadata note.
    fn read(
        &self,
        object: hsa_loaded_code_object_t,
    ) -> (LoadedCodeObject, Result<Vec<u8>, Unreadable>) {
        let mut described = self.describe(object);
        // SAFETY: STORAGE_TYPE is a 32-bit enum.
        let storage = unsafe {
            self.info::<u32>(
                object,
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_TYPE,
            )
        };
        described.in_memory = storage == Some(HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY);
        let note = match storage {
            None => Err(Unreadable(
                "the loader does not say where it is stored".into(),
            )),
            Some(HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_MEMORY) => {
                self.memory_note(object, &mut described.size)
            }
            Some(HSA_VEN_AMD_LOADER_CODE_OBJECT_STORAGE_TYPE_FILE) => {
                self.file_bytes(object).and_then(|bytes| {
                    described.size = bytes.len() as u64;
                    note_of(&bytes)
                })
            }
            Some(other) => Err(Unreadable(format!("storage type {other} has no bytes"))),
        };
        (described, note)
    }

    /// The loader's URI, load base, size and delta, and agent of `object`
    /// (what it does not answer stays empty or 0).
    fn describe(&self, object: hsa_loaded_code_object_t) -> LoadedCodeObject {
        // SAFETY: each attribute with its type: AGENT an hsa_agent_t (one u64
        // handle), LOAD_BASE and LOAD_SIZE u64, LOAD_DELTA i64, URI_LENGTH u32.
        let (agent, load_base, load_size, load_delta, uri_len) = unsafe {
            (
                self.info::<u64>(object, HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_AGENT),
                self.info::<u64>(object, HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_BASE),
                self.info::<u64>(object, HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_SIZE),
                self.info::<i64>(
                    object,
                    HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_LOAD_DELTA,
                ),
                self.info::<u32>(
                    object,
                    HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI_LENGTH,
                ),
            )
        };
        let uri = uri_len
            .filter(|&n| n > 0 && n < 1 << 20)
            .and_then(|n| {
                // URI writes `n` bytes, without a terminator; leave room anyway.
                let mut buf = vec![0u8; n as usize + 1];
                // SAFETY: the runtime writes URI_LENGTH bytes into a buffer one longer.
                let status = unsafe {
                    (self.get_info)(
                        object,
                        HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_URI,
                        buf.as_mut_ptr().cast(),
                    )
                };
                (status == HSA_STATUS_SUCCESS).then(|| {
                    buf.truncate(n as usize);
                    String::from_utf8_lossy(&buf)
                        .trim_end_matches('\0')
                        .to_string()
                })
            })
            .unwrap_or_default();
        LoadedCodeObject {
            id: 0,
            agent_handle: agent.unwrap_or(0),
            uri,
            load_base: load_base.unwrap_or(0),
            load_size: load_size.unwrap_or(0),
            load_delta: load_delta.unwrap_or(0),
            in_memory: false,
            size: 0,
        }
    }

    /// The metadata note of a code object stored in memory, read in place
    /// (only the note is copied); `size` gets the image's size.
    fn memory_note(
        &self,
        object: hsa_loaded_code_object_t,
        size_out: &mut u64,
    ) -> Result<Vec<u8>, Unreadable> {
        // SAFETY: MEMORY_BASE is a 64-bit address, MEMORY_SIZE a 64-bit size.
        let (base, size) = unsafe {
            (
                self.info::<u64>(
                    object,
                    HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_BASE,
                ),
                self.info::<u64>(
                    object,
                    HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_MEMORY_SIZE,
                ),
            )
        };
        let (Some(base), Some(size)) = (base, size) else {
            return Err(Unreadable("the loader does not give its memory".into()));
        };
        if base == 0 || size == 0 || size > isize::MAX as u64 {
            return Err(Unreadable(format!(
                "memory {base:#x}+{size} is not readable"
            )));
        }
        *size_out = size;
        // SAFETY: the runtime reports `size` bytes at `base`: the host memory the app
        // passed to hsa_code_object_reader_create_from_memory, which the app must keep
        // valid while the executable is loaded. The note is copied before returning.
        let image = unsafe { std::slice::from_raw_parts(base as *const u8, size as usize) };
        note_of(image)
    }

    fn file_bytes(&self, object: hsa_loaded_code_object_t) -> Result<Vec<u8>, Unreadable> {
        // SAFETY: STORAGE_FILE is a 32-bit file descriptor.
        let fd = unsafe {
            self.info::<i32>(
                object,
                HSA_VEN_AMD_LOADER_LOADED_CODE_OBJECT_INFO_CODE_OBJECT_STORAGE_FILE,
            )
        }
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| Unreadable("the loader does not give its file".into()))?;
        // SAFETY: the runtime holds `fd` open for the loaded code object; it is only
        // borrowed for the reads below and never closed here.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        read_whole(fd).map_err(|e| Unreadable(format!("reading its file: {e}")))
    }
}

/// A copy of the metadata note of the code object `image`.
fn note_of(image: &[u8]) -> Result<Vec<u8>, Unreadable> {
    metadata_note(image)
        .map(<[u8]>::to_vec)
        .map_err(|e| Unreadable(e.to_string()))
}

/// Reads the file behind `fd` from offset 0 with `pread`, leaving its offset alone.
fn read_whole(fd: BorrowedFd<'_>) -> std::io::Result<Vec<u8>> {
    let owned = fd.try_clone_to_owned()?;
    let file = std::fs::File::from(owned);
    let len = file.metadata()?.len();
    let mut bytes = vec![0u8; usize::try_from(len).map_err(std::io::Error::other)?];
    let mut done = 0;
    while done < bytes.len() {
        let n = std::os::unix::fs::FileExt::read_at(&file, &mut bytes[done..], done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    bytes.truncate(done);
    Ok(bytes)
}
