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
///
/// Reads the MessagePack in one pass without building a tree: only the
/// `amdhsa.kernels` entries' names and counts are kept, everything else is
/// skipped (a tree of every kernel's argument list cost 35 k instructions
/// per kernel). For duplicated keys the first one counts.
pub fn note_kernel_resources(metadata: &[u8]) -> Result<Vec<KernelResources>, CodeObjectError> {
    let mut r = Reader(metadata);
    let Some(pairs) = r.map_len()? else {
        return Err(bad("the metadata is not a map"));
    };
    let mut kernels = None;
    for _ in 0..pairs {
        let key = r.str()?;
        if kernels.is_none() && key == Some("amdhsa.kernels") {
            let Some(n) = r.array_len()? else {
                return Err(bad("no amdhsa.kernels array"));
            };
            let mut list = Vec::with_capacity(n.min(1 << 16) as usize);
            for _ in 0..n {
                list.push(r.kernel()?);
            }
            kernels = Some(list);
        } else {
            r.skip()?;
        }
    }
    kernels.ok_or_else(|| bad("no amdhsa.kernels array"))
}

fn bad(why: impl Into<String>) -> CodeObjectError {
    CodeObjectError::BadMetadata(why.into())
}

/// A MessagePack reader over a byte slice: each call takes one value off the
/// front (a string or length it reads, anything else it skips).
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodeObjectError> {
        if self.0.len() < n {
            return Err(bad("the metadata is cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn be(&mut self, n: usize) -> Result<u64, CodeObjectError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| v << 8 | u64::from(b)))
    }

    fn marker(&mut self) -> Result<rmp::Marker, CodeObjectError> {
        Ok(rmp::Marker::from_u8(self.take(1)?[0]))
    }

    /// The next value if it is a map: its number of pairs (the pairs follow).
    /// Anything else is skipped.
    fn map_len(&mut self) -> Result<Option<u64>, CodeObjectError> {
        let m = self.marker()?;
        Ok(match m {
            rmp::Marker::FixMap(n) => Some(u64::from(n)),
            rmp::Marker::Map16 => Some(self.be(2)?),
            rmp::Marker::Map32 => Some(self.be(4)?),
            other => {
                self.skip_after(other)?;
                None
            }
        })
    }

    /// The next value if it is an array: its length (the items follow).
    fn array_len(&mut self) -> Result<Option<u64>, CodeObjectError> {
        let m = self.marker()?;
        Ok(match m {
            rmp::Marker::FixArray(n) => Some(u64::from(n)),
            rmp::Marker::Array16 => Some(self.be(2)?),
            rmp::Marker::Array32 => Some(self.be(4)?),
            other => {
                self.skip_after(other)?;
                None
            }
        })
    }

    /// The next value if it is a UTF-8 string.
    fn str(&mut self) -> Result<Option<&'a str>, CodeObjectError> {
        let m = self.marker()?;
        let len = match m {
            rmp::Marker::FixStr(n) => usize::from(n),
            rmp::Marker::Str8 => self.be(1)? as usize,
            rmp::Marker::Str16 => self.be(2)? as usize,
            rmp::Marker::Str32 => self.be(4)? as usize,
            other => {
                self.skip_after(other)?;
                return Ok(None);
            }
        };
        Ok(std::str::from_utf8(self.take(len)?).ok())
    }

    /// The next value if it is a non-negative integer.
    fn uint(&mut self) -> Result<Option<u64>, CodeObjectError> {
        let m = self.marker()?;
        let signed = |v: u64, bits: u32| -> Option<u64> {
            // Sign-extend, then keep it only if it is not negative.
            let shift = 64 - bits;
            let v = ((v << shift) as i64) >> shift;
            u64::try_from(v).ok()
        };
        Ok(match m {
            rmp::Marker::FixPos(n) => Some(u64::from(n)),
            rmp::Marker::U8 => Some(self.be(1)?),
            rmp::Marker::U16 => Some(self.be(2)?),
            rmp::Marker::U32 => Some(self.be(4)?),
            rmp::Marker::U64 => Some(self.be(8)?),
            rmp::Marker::I8 => signed(self.be(1)?, 8),
            rmp::Marker::I16 => signed(self.be(2)?, 16),
            rmp::Marker::I32 => signed(self.be(4)?, 32),
            rmp::Marker::I64 => signed(self.be(8)?, 64),
            other => {
                self.skip_after(other)?;
                None
            }
        })
    }

    /// Skips the next value, however deeply nested.
    fn skip(&mut self) -> Result<(), CodeObjectError> {
        let m = self.marker()?;
        self.skip_after(m)
    }

    /// Skips the rest of a value whose marker `m` was just read: its
    /// payload, and for arrays and maps their items too (counted, not
    /// recursed into).
    fn skip_after(&mut self, m: rmp::Marker) -> Result<(), CodeObjectError> {
        use rmp::Marker as M;
        let mut values: u64 = 0;
        let mut m = m;
        loop {
            let payload = match m {
                M::FixPos(_) | M::FixNeg(_) | M::Null | M::True | M::False => 0,
                M::Reserved => return Err(bad("a reserved MessagePack marker")),
                M::U8 | M::I8 => 1,
                M::U16 | M::I16 => 2,
                M::U32 | M::I32 | M::F32 => 4,
                M::U64 | M::I64 | M::F64 => 8,
                M::FixStr(n) => usize::from(n),
                M::Str8 | M::Bin8 => self.be(1)? as usize,
                M::Str16 | M::Bin16 => self.be(2)? as usize,
                M::Str32 | M::Bin32 => self.be(4)? as usize,
                M::FixExt1 => 2,
                M::FixExt2 => 3,
                M::FixExt4 => 5,
                M::FixExt8 => 9,
                M::FixExt16 => 17,
                M::Ext8 => self.be(1)? as usize + 1,
                M::Ext16 => self.be(2)? as usize + 1,
                M::Ext32 => self.be(4)? as usize + 1,
                M::FixArray(n) => {
                    values += u64::from(n);
                    0
                }
                M::Array16 => {
                    values += self.be(2)?;
                    0
                }
                M::Array32 => {
                    values += self.be(4)?;
                    0
                }
                M::FixMap(n) => {
                    values += 2 * u64::from(n);
                    0
                }
                M::Map16 => {
                    values += 2 * self.be(2)?;
                    0
                }
                M::Map32 => {
                    values += 2 * self.be(4)?;
                    0
                }
            };
            self.take(payload)?;
            if values == 0 {
                return Ok(());
            }
            // Every value takes at least one byte: a count beyond what is
            // left is a malformed note, found before looping over it.
            if values > self.0.len() as u64 {
                return Err(bad("the metadata is cut short"));
            }
            values -= 1;
            m = self.marker()?;
        }
    }

    /// One `amdhsa.kernels` entry.
    fn kernel(&mut self) -> Result<KernelResources, CodeObjectError> {
        let pairs = self.map_len()?.unwrap_or(0);
        let (mut name, mut symbol) = (None, None);
        let mut counts: [Option<u32>; 5] = [None; 5];
        const COUNTS: [&str; 5] = [
            ".sgpr_count",
            ".vgpr_count",
            ".agpr_count",
            ".group_segment_fixed_size",
            ".private_segment_fixed_size",
        ];
        for _ in 0..pairs {
            match self.str()? {
                Some(".name") if name.is_none() => {
                    name = Some(self.str()?.ok_or_else(|| bad("a kernel without .name"))?);
                }
                Some(".symbol") if symbol.is_none() => {
                    symbol = Some(self.str()?.ok_or_else(|| bad("a kernel without .symbol"))?);
                }
                Some(key) => match COUNTS.iter().position(|k| *k == key) {
                    Some(i) if counts[i].is_none() => {
                        let n = self.uint()?.and_then(|n| u32::try_from(n).ok());
                        counts[i] = Some(n.ok_or_else(|| bad(format!("{key} is not a u32")))?);
                    }
                    _ => self.skip()?,
                },
                None => self.skip()?,
            }
        }
        let [sgpr, vgpr, agpr, group, private] = counts.map(|c| c.unwrap_or(0));
        Ok(KernelResources {
            name: name
                .ok_or_else(|| bad("a kernel without .name"))?
                .to_owned(),
            symbol: symbol
                .ok_or_else(|| bad("a kernel without .symbol"))?
                .to_owned(),
            sgpr_count: sgpr,
            vgpr_count: vgpr,
            agpr_count: agpr,
            group_segment_fixed_size: group,
            private_segment_fixed_size: private,
        })
    }
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

    /// The tree-building reading the streaming reader replaced, kept as its
    /// oracle: the whole note as an `rmpv::Value`, then the fields looked up.
    fn tree_oracle(note: &[u8]) -> Option<Vec<KernelResources>> {
        let value = rmpv::decode::read_value(&mut &note[..]).ok()?;
        let get = |v: &'_ rmpv::Value, key: &str| -> Option<rmpv::Value> {
            v.as_map()?
                .iter()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v.clone())
        };
        let kernels = get(&value, "amdhsa.kernels")?;
        kernels
            .as_array()?
            .iter()
            .map(|k| {
                let text = |key| get(k, key)?.as_str().map(str::to_owned);
                let count = |key| match get(k, key) {
                    None => Some(0),
                    Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
                };
                Some(KernelResources {
                    name: text(".name")?,
                    symbol: text(".symbol")?,
                    sgpr_count: count(".sgpr_count")?,
                    vgpr_count: count(".vgpr_count")?,
                    agpr_count: count(".agpr_count")?,
                    group_segment_fixed_size: count(".group_segment_fixed_size")?,
                    private_segment_fixed_size: count(".private_segment_fixed_size")?,
                })
            })
            .collect()
    }

    fn encode(v: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn s(text: &str) -> rmpv::Value {
        rmpv::Value::from(text)
    }

    /// A kernel map with every kind of value the format has around the fields
    /// read: wide integers, signed ones, floats, binary, extension types,
    /// nested argument lists, long strings and maps past 15 entries.
    fn kernel_value(i: i64) -> rmpv::Value {
        use rmpv::Value as V;
        let args: Vec<V> = (0..(i % 20))
            .map(|a| {
                V::Map(vec![
                    (s(".name"), s(&format!("arg{a}"))),
                    (s(".size"), V::from(8)),
                    (s(".offset"), V::from(a * 8)),
                    (s(".value_kind"), s("global_buffer")),
                    (s(".is_const"), V::Boolean(a % 2 == 0)),
                ])
            })
            .collect();
        let mut pairs = vec![
            (s(".args"), V::Array(args)),
            (s(".kernarg_segment_size"), V::from(1u64 << 40)),
            (s(".wavefront_size"), V::from(64)),
            (s(".max_flat_workgroup_size"), V::from(1024)),
            (s(".uses_dynamic_stack"), V::Boolean(false)),
            (s(".float"), V::F64(1.5)),
            (s(".bin"), V::Binary(vec![7; (i as usize * 37) % 300])),
            (s(".ext"), V::Ext(5, vec![1; (i as usize) % 18])),
            (s(".nil"), V::Nil),
            (s(".negative"), V::from(-i - 1)),
            (s(".long"), s(&"x".repeat((i as usize * 97) % 70_000))),
            (s(".name"), s(&format!("_Z6kernel{i}Pfi"))),
            (s(".symbol"), s(&format!("_Z6kernel{i}Pfi.kd"))),
            (s(".sgpr_count"), V::from(i * 3 % 106)),
            (s(".vgpr_count"), V::from(i * 1000)),
            // A signed encoding of a non-negative count is still a count.
            (s(".agpr_count"), V::Integer(rmpv::Integer::from(i % 5))),
            (s(".group_segment_fixed_size"), V::from(i * 70_000)),
            (s(".private_segment_fixed_size"), V::from(i % 300)),
            (V::from(17), s("a key that is not a string")),
        ];
        let n = pairs.len();
        pairs.rotate_left((i as usize) % n);
        V::Map(pairs)
    }

    fn document(kernels: Vec<rmpv::Value>) -> rmpv::Value {
        use rmpv::Value as V;
        V::Map(vec![
            (s("amdhsa.version"), V::Array(vec![V::from(1), V::from(2)])),
            (s("amdhsa.target"), s("amdgcn-amd-amdhsa--gfx90a")),
            (s("amdhsa.kernels"), V::Array(kernels)),
            (s("amdhsa.printf"), V::Array(vec![])),
        ])
    }

    #[test]
    fn the_streaming_reader_reads_what_the_tree_does() {
        let note = encode(&document((0..300).map(kernel_value).collect()));
        let read = note_kernel_resources(&note).unwrap();
        assert_eq!(read.len(), 300);
        assert_eq!(Some(read.clone()), tree_oracle(&note));
        assert_eq!(read[7].name, "_Z6kernel7Pfi");
        assert_eq!(read[7].symbol, "_Z6kernel7Pfi.kd");
        assert_eq!(
            (
                read[7].sgpr_count,
                read[7].vgpr_count,
                read[7].agpr_count,
                read[7].group_segment_fixed_size,
                read[7].private_segment_fixed_size
            ),
            (21, 7000, 2, 490_000, 7)
        );
    }

    #[test]
    fn every_malformed_note_is_an_error_as_it_is_for_the_tree() {
        use rmpv::Value as V;
        let kernel = |pairs: Vec<(V, V)>| encode(&document(vec![V::Map(pairs)]));
        let named =
            |extra: (V, V)| kernel(vec![(s(".name"), s("k")), (s(".symbol"), s("k.kd")), extra]);
        let cases = [
            ("missing .symbol", kernel(vec![(s(".name"), s("k"))])),
            ("missing .name", kernel(vec![(s(".symbol"), s("k.kd"))])),
            (
                "count too wide",
                named((s(".sgpr_count"), V::from(1u64 << 32))),
            ),
            ("negative count", named((s(".vgpr_count"), V::from(-1)))),
            ("float count", named((s(".agpr_count"), V::F32(2.0)))),
            (
                "name not text",
                kernel(vec![(s(".name"), V::from(3)), (s(".symbol"), s("k"))]),
            ),
            ("kernel not a map", encode(&document(vec![V::from(1)]))),
            (
                "kernels not an array",
                encode(&V::Map(vec![(s("amdhsa.kernels"), V::from(1))])),
            ),
            (
                "no kernels",
                encode(&V::Map(vec![(s("amdhsa.target"), s("x"))])),
            ),
            ("not a map", encode(&V::Array(vec![]))),
            ("reserved marker", vec![0xc1]),
            ("empty", vec![]),
        ];
        for (what, note) in cases {
            assert!(note_kernel_resources(&note).is_err(), "{what}");
            assert_eq!(tree_oracle(&note), None, "the oracle agrees: {what}");
        }
        // The first of two `.name`s counts, as the tree lookup finds it.
        let twice = kernel(vec![
            (s(".name"), s("first")),
            (s(".symbol"), s("k.kd")),
            (s(".name"), s("second")),
        ]);
        assert_eq!(note_kernel_resources(&twice).unwrap()[0].name, "first");
        assert_eq!(tree_oracle(&twice).unwrap()[0].name, "first");
        // Every cut of a valid note is an error, never a panic or a hang
        // (a length prefix promising more than is left included).
        let note = encode(&document((0..12).map(kernel_value).collect()));
        for len in 0..note.len() {
            assert!(note_kernel_resources(&note[..len]).is_err(), "cut at {len}");
        }
        // Signed encodings (which encoders use for counts held as signed
        // values): a non-negative one is a count, a negative one an error.
        let signed = |count: &[u8]| {
            let mut note = vec![0x81, 0xae];
            note.extend(b"amdhsa.kernels");
            note.extend([0x91, 0x83, 0xa5]);
            note.extend(b".name");
            note.extend([0xa1, b'k', 0xa7]);
            note.extend(b".symbol");
            note.extend([0xa4]);
            note.extend(b"k.kd");
            note.push(0xab);
            note.extend(b".sgpr_count");
            note.extend(count);
            note
        };
        for (bytes, want) in [
            (&[0xd0, 0x05][..], Some(5)),
            (&[0xd1, 0x01, 0x02][..], Some(258)),
            (&[0xd2, 0, 0, 0, 9][..], Some(9)),
            (&[0xd3, 0, 0, 0, 0, 0, 0, 0, 11][..], Some(11)),
            (&[0xd0, 0xfb][..], None),
            (&[0xd1, 0xff, 0xfe][..], None),
            (&[0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0][..], None),
        ] {
            let note = signed(bytes);
            let got = note_kernel_resources(&note).ok().map(|k| k[0].sgpr_count);
            assert_eq!(got, want, "{bytes:x?}");
            assert_eq!(
                tree_oracle(&note).map(|k| k[0].sgpr_count),
                want,
                "{bytes:x?}"
            );
        }
        let mut huge = vec![0xdd, 0xff, 0xff, 0xff, 0xff];
        huge.extend([0xc0; 8]);
        assert!(note_kernel_resources(&huge).is_err());
    }
}
