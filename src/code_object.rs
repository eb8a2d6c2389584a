//! Kernel resources read from an AMDGPU code object's metadata.
//!
//! Owns one job: given the bytes of a loaded AMDGPU ELF code object (code object
//! version 3 and later, whose metadata is a MessagePack map in an `AMDGPU` note of
//! type `NT_AMDGPU_METADATA`), list each kernel with the register counts and
//! segment sizes the compiler wrote for it. These are the exact figures
//! the compiler reports (`-Rpass-analysis=kernel-resource-usage`), not the
//! granulated allocation a kernel descriptor holds. Code object version 2, whose
//! metadata is YAML, is not read: its kernels get no resources.
//!
//! It must not touch the runtime: the tool finds the code object's bytes (through
//! ROCr's loader extension) and hands them here, so tests feed it compiled files.
//! Nothing here runs on the dispatch path; it runs once per loaded code object.
//!
//! It also keeps the process's register of loaded code objects
//! ([`register_loaded`], [`loaded`]): what the loader said about each (URI,
//! load base, size and delta, agent, storage), numbered from 1, so that the
//! rocpd output writes one `rocpd_info_code_object` row per loaded code object
//! and its kernel symbols point at theirs. The register is appended to when
//! an executable is frozen and read when a kernel is first written; never on
//! a dispatch path.

use object::elf;
use object::read::elf::{FileHeader, SectionHeader};
use object::Endianness;

/// Note type of the MessagePack metadata in an `AMDGPU` note (code object v3+).
const NT_AMDGPU_METADATA: elf::NoteType = elf::NoteType(32);

/// One code object loaded into an executable, as ROCr's loader extension
/// describes it (`hsa_ven_amd_loader_loaded_code_object_get_info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadedCodeObject {
    /// Per-process id, from 1 in load order ([`register_loaded`] sets it).
    pub id: u64,
    /// `hsa_agent_t` handle of the agent it was loaded for.
    pub agent_handle: u64,
    /// ROCr's URI (`file://PATH#offset=N&size=M` or
    /// `memory://PID#offset=0xADDR&size=N`); empty if the loader gives none.
    pub uri: String,
    /// Where its segments were loaded on the device.
    pub load_base: u64,
    /// Bytes loaded.
    pub load_size: u64,
    /// Load address minus the ELF's own base address.
    pub load_delta: i64,
    /// Stored in host memory the app gave (`MEMORY`) rather than a file.
    pub in_memory: bool,
    /// Bytes of the ELF image (the memory's size, or the file's).
    pub size: u64,
}

static LOADED: std::sync::Mutex<Vec<LoadedCodeObject>> = std::sync::Mutex::new(Vec::new());

/// Adds a loaded code object to the process's register; returns its id (1,
/// 2, ... in call order). `object.id` is ignored.
pub fn register_loaded(mut object: LoadedCodeObject) -> u64 {
    let mut all = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    object.id = all.len() as u64 + 1;
    let id = object.id;
    all.push(object);
    id
}

/// The registered code object `id`, if there is one.
pub fn loaded(id: u64) -> Option<LoadedCodeObject> {
    let all = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    id.checked_sub(1).and_then(|i| all.get(i as usize)).cloned()
}

/// How many code objects are registered (their ids are 1..=this).
pub fn loaded_count() -> u64 {
    LOADED.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
}

/// What the compiler recorded for one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KernelResources {
    /// The kernel's source-level (mangled) name, `.name` in the metadata.
    pub name: String,
    /// The kernel descriptor's symbol, `.symbol` (the name plus `.kd`).
    pub symbol: String,
    /// Scalar registers used, `.sgpr_count`.
    pub sgpr_count: u32,
    /// Architected vector registers used, `.vgpr_count`.
    pub vgpr_count: u32,
    /// Accumulation vector registers (AGPRs) used, `.agpr_count`; 0 where the
    /// target has none or the compiler did not write it.
    pub agpr_count: u32,
    /// Static LDS per work-group in bytes, `.group_segment_fixed_size`.
    pub group_segment_fixed_size: u32,
    /// Static scratch per work-item in bytes, `.private_segment_fixed_size`.
    pub private_segment_fixed_size: u32,
}

/// Why a code object's kernels could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeObjectError {
    /// Not a 64-bit little-endian ELF file, or its headers are cut short.
    NotElf(String),
    /// An ELF file for another machine than AMDGPU.
    NotAmdgpu(u16),
    /// An AMDGPU ELF without a MessagePack metadata note (code object v2 or stripped).
    NoMetadata,
    /// The metadata note is not the MessagePack map the format defines.
    BadMetadata(String),
}

impl std::fmt::Display for CodeObjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotElf(why) => write!(f, "not a 64-bit ELF code object: {why}"),
            Self::NotAmdgpu(machine) => write!(f, "ELF machine {machine} is not AMDGPU (224)"),
            Self::NoMetadata => {
                f.write_str("no AMDGPU MessagePack metadata note (code object v2?)")
            }
            Self::BadMetadata(why) => write!(f, "malformed AMDGPU metadata: {why}"),
        }
    }
}

impl std::error::Error for CodeObjectError {}

/// Lists the kernels of the code object `elf` with their resources, in metadata order.
pub fn kernel_resources(elf: &[u8]) -> Result<Vec<KernelResources>, CodeObjectError> {
    note_kernel_resources(metadata_note(elf)?)
}

/// As [`kernel_resources`], from the metadata note alone ([`metadata_note`]).
pub fn note_kernel_resources(metadata: &[u8]) -> Result<Vec<KernelResources>, CodeObjectError> {
    let mut reader = metadata;
    let value = rmpv::decode::read_value(&mut reader)
        .map_err(|e| CodeObjectError::BadMetadata(e.to_string()))?;
    let kernels = map_get(&value, "amdhsa.kernels")
        .and_then(rmpv::Value::as_array)
        .ok_or_else(|| CodeObjectError::BadMetadata("no amdhsa.kernels array".into()))?;
    kernels.iter().map(kernel_entry).collect()
}

/// Returns the descriptor bytes of the first `AMDGPU` note of type
/// `NT_AMDGPU_METADATA`: the MessagePack metadata, a small part of the code
/// object, which is all [`note_kernel_resources`] needs.
pub fn metadata_note(data: &[u8]) -> Result<&[u8], CodeObjectError> {
    let header = elf::FileHeader64::<Endianness>::parse(data)
        .map_err(|e| CodeObjectError::NotElf(e.to_string()))?;
    let endian = header
        .endian()
        .map_err(|e| CodeObjectError::NotElf(e.to_string()))?;
    let machine = header.e_machine(endian);
    if machine != elf::EM_AMDGPU {
        return Err(CodeObjectError::NotAmdgpu(machine.0));
    }
    let sections = header
        .sections(endian, data)
        .map_err(|e| CodeObjectError::NotElf(e.to_string()))?;
    for section in sections.iter() {
        let Ok(Some(mut notes)) = section.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"AMDGPU" && note.n_type(endian) == NT_AMDGPU_METADATA {
                return Ok(note.desc());
            }
        }
    }
    Err(CodeObjectError::NoMetadata)
}

fn map_get<'v>(value: &'v rmpv::Value, key: &str) -> Option<&'v rmpv::Value> {
    value
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn kernel_entry(kernel: &rmpv::Value) -> Result<KernelResources, CodeObjectError> {
    let text = |key: &str| -> Result<String, CodeObjectError> {
        map_get(kernel, key)
            .and_then(rmpv::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| CodeObjectError::BadMetadata(format!("a kernel without {key}")))
    };
    let count = |key: &str| -> Result<u32, CodeObjectError> {
        match map_get(kernel, key) {
            None => Ok(0),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| CodeObjectError::BadMetadata(format!("{key} is not a u32"))),
        }
    };
    Ok(KernelResources {
        name: text(".name")?,
        symbol: text(".symbol")?,
        sgpr_count: count(".sgpr_count")?,
        vgpr_count: count(".vgpr_count")?,
        agpr_count: count(".agpr_count")?,
        group_segment_fixed_size: count(".group_segment_fixed_size")?,
        private_segment_fixed_size: count(".private_segment_fixed_size")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loaded_code_objects_are_numbered_from_one_and_found_again() {
        let a = register_loaded(LoadedCodeObject {
            id: 99,
            uri: "file:///x#offset=0&size=8".into(),
            load_size: 8,
            ..Default::default()
        });
        let b = register_loaded(LoadedCodeObject {
            uri: "memory://1#offset=0x10&size=4".into(),
            in_memory: true,
            ..Default::default()
        });
        assert!(a >= 1);
        assert!(b > a);
        let got = loaded(a).unwrap();
        assert_eq!(
            (got.id, got.uri.as_str(), got.load_size),
            (a, "file:///x#offset=0&size=8", 8)
        );
        assert!(loaded(b).unwrap().in_memory);
        assert_eq!(loaded(0), None);
        assert!(loaded_count() >= b);
        assert_eq!(loaded(u64::MAX), None);
    }
    use std::path::Path;
    use std::process::Command;

    /// Two kernels with different resources: one with static LDS and a loop, one with
    /// a stack array that lives in scratch.
    const SOURCE: &str = r#"
__kernel void uses_lds(__global float* out, int n) {
  __local float tile[256];
  int i = __builtin_amdgcn_workitem_id_x();
  tile[i] = out[i] * 2.0f;
  __builtin_amdgcn_s_barrier();
  float acc = 0;
  for (int k = 0; k < n; ++k) acc += tile[(i + k) & 255] * (float)k;
  out[i] = acc;
}
__kernel void uses_scratch(__global int* out, int n) {
  volatile int buf[64];
  for (int k = 0; k < 64; ++k) buf[k] = k * n;
  out[0] = buf[n & 63];
}
"#;

    /// Compiles `SOURCE` for `mcpu` with clang-15 (installed by scripts/setup.sh) and returns
    /// the code object and the compiler's own resource remarks, per kernel.
    fn compile(mcpu: &str) -> (Vec<u8>, Vec<KernelResources>) {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "rprof-code-object-{}-{call}-{mcpu}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("resources.cl");
        std::fs::write(&src, SOURCE).unwrap();
        let out = dir.join("resources.co");
        let output = Command::new("clang-15")
            .args(["-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa"])
            .arg(format!("-mcpu={mcpu}"))
            .args([
                "-nogpulib",
                "-O2",
                "-Rpass-analysis=kernel-resource-usage",
                "-o",
            ])
            .arg(&out)
            .arg(&src)
            .output()
            .expect("clang-15 (scripts/setup.sh installs it) must run");
        let remarks = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "clang-15 failed:\n{remarks}");
        let elf = std::fs::read(&out).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        (elf, parse_remarks(&remarks))
    }

    /// Reads clang's `kernel-resource-usage` remarks: a `Function Name:` line, then
    /// `SGPRs:`, `VGPRs:`, `AGPRs:`, `ScratchSize [bytes/lane]:` and `LDS Size [bytes/block]:`.
    fn parse_remarks(text: &str) -> Vec<KernelResources> {
        let mut kernels: Vec<KernelResources> = Vec::new();
        for line in text.lines() {
            let Some((_, rest)) = line.split_once("remark:") else {
                continue;
            };
            let rest = rest.split(" [-Rpass").next().unwrap().trim();
            let Some((key, value)) = rest.rsplit_once(':') else {
                continue;
            };
            let value = value.trim();
            if key == "Function Name" {
                kernels.push(KernelResources {
                    name: value.to_owned(),
                    symbol: format!("{value}.kd"),
                    ..Default::default()
                });
                continue;
            }
            let Some(kernel) = kernels.last_mut() else {
                continue;
            };
            let n = || value.parse::<u32>().unwrap();
            match key {
                "SGPRs" => kernel.sgpr_count = n(),
                "VGPRs" => kernel.vgpr_count = n(),
                "AGPRs" => kernel.agpr_count = n(),
                "ScratchSize [bytes/lane]" => kernel.private_segment_fixed_size = n(),
                "LDS Size [bytes/block]" => kernel.group_segment_fixed_size = n(),
                _ => {}
            }
        }
        kernels
    }

    #[test]
    fn resources_match_what_the_compiler_reports() {
        for mcpu in ["gfx900", "gfx90a", "gfx1030"] {
            let (elf, reported) = compile(mcpu);
            assert_eq!(reported.len(), 2, "{mcpu}: two kernels reported");
            let mut read = kernel_resources(&elf).unwrap();
            read.sort_by(|a, b| a.name.cmp(&b.name));
            let mut reported = reported;
            reported.sort_by(|a, b| a.name.cmp(&b.name));
            assert_eq!(read, reported, "{mcpu}");
            // The two kernels differ where the source makes them differ.
            let (lds, scratch) = (&read[0], &read[1]);
            assert_eq!(
                (lds.name.as_str(), scratch.name.as_str()),
                ("uses_lds", "uses_scratch")
            );
            assert_eq!(
                lds.group_segment_fixed_size, 1024,
                "{mcpu}: 256 floats of LDS"
            );
            assert_eq!(scratch.group_segment_fixed_size, 0);
            assert!(
                scratch.private_segment_fixed_size >= 256,
                "{mcpu}: 64 ints of scratch"
            );
            assert_eq!(lds.private_segment_fixed_size, 0);
        }
    }

    #[test]
    fn other_files_are_refused_with_a_reason() {
        assert!(matches!(
            kernel_resources(b"not an elf"),
            Err(CodeObjectError::NotElf(_))
        ));
        let host = std::fs::read(Path::new("/proc/self/exe")).unwrap();
        assert_eq!(
            kernel_resources(&host),
            Err(CodeObjectError::NotAmdgpu(elf::EM_X86_64.0))
        );
        // A cut-short code object is an error, never a panic.
        let (elf, _) = compile("gfx90a");
        for len in [16, 64, elf.len() / 2, elf.len() - 1] {
            assert!(kernel_resources(&elf[..len]).is_err(), "cut at {len}");
        }
    }
}
