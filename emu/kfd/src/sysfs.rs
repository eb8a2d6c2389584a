//! The KFD sysfs topology, generated from the device core's [`Topology`], and the path redirection that serves it.
//!
//! The tree is written once, on first need, into a fresh directory that `mkdtemp` creates with mode 0700 and an
//! unpredictable name (`rprof-emu-kfd-<pid>-XXXXXX`) under `$XDG_RUNTIME_DIR` (if it is an absolute path) or
//! `/tmp`; nothing at a fixed path is created or trusted. It is removed at exit (`atexit`); a process that ends
//! without exit handlers (`_exit`, a crash) leaves it, and the next process that creates a tree there removes
//! such leftovers (directories owned by our uid whose pid is gone). Layout (KFD's `kfd_sysfs.h`):
//!
//! * `topology/{generation_id,system_properties}`, `topology/nodes/N/{gpu_id,name,properties}` and
//!   `nodes/N/{mem_banks,caches,io_links}/M/properties` (only real memory banks: the thunk adds LDS, scratch and SVM
//!   apertures itself);
//! * `module/amdgpu/{initstate,version}` and a copy of `/proc/modules` with an `amdgpu` line, which tools such as
//!   `rocminfo` read (directly, or through `lsmod`) to decide that the driver is loaded.
//!
//! [`redirect`] rewrites `/sys/devices/virtual/kfd/kfd/topology...`, `/sys/class/kfd/kfd/topology...` and
//! `/sys/module/amdgpu...` and `/proc/modules` into that directory, without allocating (a stack buffer).

use std::ffi::{CStr, CString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hsa_sys::hsakmt::*;
use rprof_emu::topology::Topology;
use rprof_emu::Emulator;

/// Paths served from the generated tree: (prefix, directory under the tree root).
const PREFIXES: [(&[u8], &str); 4] = [
    (b"/sys/devices/virtual/kfd/kfd/topology", "topology"),
    (b"/sys/class/kfd/kfd/topology", "topology"),
    (b"/sys/module/amdgpu", "module/amdgpu"),
    // The host's module list plus `amdgpu`, for `lsmod | grep amdgpu` (rocminfo 5.2.3) and libkmod users.
    (b"/proc/modules", "proc-modules"),
];

/// The KFD `gpu_id` of a GPU node (16 bits: it is also part of mmap offsets).
pub fn gpu_id(node: u32) -> u32 {
    0x4e00 + node
}

/// The node of a KFD `gpu_id`.
pub fn node_of_gpu_id(emu: &Emulator, id: u32) -> Option<u32> {
    let node = id.checked_sub(0x4e00)?;
    emu.topology.node(node)?.gpu.is_some().then_some(node)
}

static ROOT: OnceLock<Option<CString>> = OnceLock::new();

/// The tree's root directory, created on first call (None if the emulator's configuration is bad or it could not
/// be written; the reason was printed).
pub fn root() -> Option<&'static CStr> {
    ROOT.get_or_init(|| {
        let emu = crate::emu()?;
        match create(&emu.topology) {
            Ok(dir) => {
                // SAFETY: registering a plain extern "C" fn with atexit.
                unsafe { libc::atexit(remove_at_exit) };
                CString::new(dir.into_os_string().into_encoded_bytes()).ok()
            }
            Err(e) => {
                eprintln!("rprof-emu-kfd: cannot write the emulated sysfs topology: {e}");
                None
            }
        }
    })
    .as_deref()
}

extern "C" fn remove_at_exit() {
    use std::os::unix::ffi::OsStrExt;
    if let Some(Some(dir)) = ROOT.get() {
        let _ = std::fs::remove_dir_all(Path::new(std::ffi::OsStr::from_bytes(dir.to_bytes())));
    }
}

/// If `path` is under one of the served prefixes, writes the redirected NUL-terminated path into `buf` and returns
/// it.
pub fn redirect<'a>(path: &CStr, buf: &'a mut [u8; 4096]) -> Option<&'a CStr> {
    let p = path.to_bytes();
    if !p.starts_with(b"/sys/") && !p.starts_with(b"/proc/modules") {
        return None;
    }
    let (prefix, sub) = PREFIXES.iter().find(|(prefix, _)| {
        p.starts_with(prefix) && matches!(p.get(prefix.len()), None | Some(b'/'))
    })?;
    let root = root()?.to_bytes();
    let rest = &p[prefix.len()..];
    let total = root.len() + 1 + sub.len() + rest.len();
    if total + 1 > buf.len() {
        return None;
    }
    let mut at = 0;
    for part in [root, b"/", sub.as_bytes(), rest] {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    buf[at] = 0;
    CStr::from_bytes_with_nul(&buf[..=at]).ok()
}

fn base_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_absolute() && Path::new(&d).is_dir() => PathBuf::from(d),
        _ => PathBuf::from("/tmp"),
    }
}

/// Prefix of the tree directories: `rprof-emu-kfd-<pid>-XXXXXX`.
const DIR_PREFIX: &str = "rprof-emu-kfd-";

fn mkdtemp(base: &Path) -> std::io::Result<PathBuf> {
    let mut template = base
        .join(format!("{DIR_PREFIX}{}-XXXXXX", std::process::id()))
        .into_os_string()
        .into_encoded_bytes();
    template.push(0);
    // SAFETY: mkdtemp rewrites the trailing XXXXXX of our NUL-terminated buffer in place and creates the directory
    // with mode 0700, failing if it exists.
    let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
    if p.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    template.pop();
    use std::os::unix::ffi::OsStringExt;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(template)))
}

/// Removes trees left by processes of ours that have exited without running their exit handlers (`_exit`, a
/// crash): only real directories (not symlinks) owned by our uid, named for a pid that no longer exists.
fn remove_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks for the process's existence.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if gone && ours {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn create(topology: &Topology) -> std::io::Result<PathBuf> {
    let base = base_dir();
    remove_stale(&base);
    let dir = mkdtemp(&base)?;
    if let Err(e) = write_tree(&dir, topology) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(dir)
}

fn put(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text)
}

/// The whole file at `path`, read with raw system calls (never redirected); empty if it cannot be read.
fn read_real(path: &str) -> String {
    let Ok(c) = std::ffi::CString::new(path) else {
        return String::new();
    };
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        crate::real::openat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return String::new();
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads into our buffer from our fd.
        let n = unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    crate::real::close(fd);
    String::from_utf8_lossy(&out).into_owned()
}

/// The `gfx_target_version` value (decimal major*10000 + minor*100 + stepping).
pub fn gfx_target_version(v: (u32, u32, u32)) -> u32 {
    v.0 * 10000 + v.1 * 100 + v.2
}

/// Writes the whole tree under `dir`.
/// The topology as KFD shows it, and for each of its nodes the core node whose GPU it presents (which also
/// gives its `gpu_id`). The core's APU layout is one node holding the CPU cores and the GPU, which the thunk of
/// ROCr >= 6.2 would treat as an old-style APU (no buffer objects for system memory, and ROCr then fails to map
/// it); KFD shows a modern APU as a CPU node plus a GPU node without CPU cores, with a frame-buffer heap, and the
/// FUSION flag in libdrm's device info (see [`crate::drm`]). Other layouts are shown as they are.
pub fn kfd_view(t: &Topology) -> (Topology, Vec<Option<u32>>) {
    match t.nodes.as_slice() {
        [n] if n.cpu_cores > 0 && n.gpu.is_some() => {
            let split = Topology {
                nodes: vec![
                    rprof_emu::topology::Node {
                        cpu_cores: n.cpu_cores,
                        gpu: None,
                    },
                    rprof_emu::topology::Node {
                        cpu_cores: 0,
                        gpu: n.gpu,
                    },
                ],
                vram_bytes: t.vram_bytes,
            };
            (split, vec![None, Some(0)])
        }
        nodes => (
            t.clone(),
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| n.gpu.map(|_| i as u32))
                .collect(),
        ),
    }
}

/// Writes the whole tree under `dir`.
pub fn write_tree(dir: &Path, core: &Topology) -> std::io::Result<()> {
    let (view, gpu_of) = kfd_view(core);
    let t = &view;
    let topo = dir.join("topology");
    put(&topo.join("generation_id"), "1\n")?;
    put(
        &topo.join("system_properties"),
        "platform_oem 0\nplatform_id 0\nplatform_rev 0\n",
    )?;
    for id in 0..t.nodes.len() as u32 {
        let nd = topo.join("nodes").join(id.to_string());
        let node = &t.nodes[id as usize];
        put(
            &nd.join("gpu_id"),
            &format!("{}\n", gpu_of[id as usize].map_or(0, gpu_id)),
        )?;
        put(
            &nd.join("name"),
            &format!("{}\n", node.gpu.map_or("", |g| g.model.name)),
        )?;
        let props = t.node_properties(id).expect("node exists");
        let banks: Vec<HsaMemoryProperties> = t
            .memory_banks(id)
            .into_iter()
            .filter(|b| {
                b.HeapType == HSA_HEAPTYPE_SYSTEM
                    || b.HeapType == HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC
                    || b.HeapType == HSA_HEAPTYPE_FRAME_BUFFER_PRIVATE
            })
            .collect();
        let caches = t.caches(id);
        let links = t.io_links(id);
        put(
            &nd.join("properties"),
            &node_properties_text(&props, banks.len(), caches.len(), links.len()),
        )?;
        for (i, b) in banks.iter().enumerate() {
            // SAFETY: both views of the size union are plain integers.
            let size = unsafe { b.__bindgen_anon_1.SizeInBytes };
            put(
                &nd.join(format!("mem_banks/{i}/properties")),
                &format!(
                    "heap_type {}\nsize_in_bytes {}\nflags 0\nwidth {}\nmem_clk_max {}\n",
                    b.HeapType, size, b.Width, b.MemoryClockMax
                ),
            )?;
        }
        for (i, c) in caches.iter().enumerate() {
            // SAFETY: the cache type union is a plain u32.
            let ty = unsafe { c.CacheType.Value };
            put(
                &nd.join(format!("caches/{i}/properties")),
                &format!(
                    "processor_id_low {}\nlevel {}\nsize {}\ncache_line_size {}\ncache_lines_per_tag {}\n\
                     association {}\nlatency {}\ntype {}\nsibling_map 1\n",
                    c.ProcessorIdLow,
                    c.CacheLevel,
                    c.CacheSize,
                    c.CacheLineSize,
                    c.CacheLinesPerTag,
                    c.CacheAssociativity,
                    c.CacheLatency,
                    ty
                ),
            )?;
        }
        for (i, l) in links.iter().enumerate() {
            put(
                &nd.join(format!("io_links/{i}/properties")),
                &format!(
                    "type {}\nversion_major {}\nversion_minor {}\nnode_from {}\nnode_to {}\nweight {}\n\
                     min_latency 0\nmax_latency 0\nmin_bandwidth {}\nmax_bandwidth {}\n\
                     recommended_transfer_size 0\nrecommended_sdma_engine_id_mask 0\nflags 0\n",
                    l.IoLinkType, l.VersionMajor, l.VersionMinor, l.NodeFrom, l.NodeTo, l.Weight,
                    l.MinimumBandwidth, l.MaximumBandwidth
                ),
            )?;
        }
    }
    // Read the real list with system calls: std's `open` would come back through our own redirection.
    let mut modules = read_real("/proc/modules");
    if !modules.lines().any(|l| l.starts_with("amdgpu ")) {
        modules.push_str("amdgpu 16384 0 - Live 0x0000000000000000\n");
    }
    put(&dir.join("proc-modules"), &modules)?;
    let module = dir.join("module/amdgpu");
    put(&module.join("initstate"), "live\n")?;
    put(&module.join("version"), "6.4.0-emulated\n")?;
    put(&module.join("refcnt"), "0\n")?;
    std::fs::create_dir_all(module.join("holders"))?;
    Ok(())
}

/// A node's `properties` file: `key value` lines, numbers only (the thunk stops at the first other line).
pub fn node_properties_text(
    p: &HsaNodeProperties,
    banks: usize,
    caches: usize,
    links: usize,
) -> String {
    let mut s = String::new();
    let mut kv = |k: &str, v: u64| {
        let _ = writeln!(s, "{k} {v}");
    };
    // SAFETY: these unions are plain integers in every view.
    let (cap, engine, sdma_fw) = unsafe {
        (
            p.Capability.Value,
            p.EngineId.ui32,
            p.uCodeEngineVersions.__bindgen_anon_1.uCodeSDMA(),
        )
    };
    let gpu = p.NumFComputeCores > 0;
    kv("cpu_cores_count", p.NumCPUCores.into());
    kv("simd_count", p.NumFComputeCores.into());
    kv("mem_banks_count", banks as u64);
    kv("caches_count", caches as u64);
    kv("io_links_count", links as u64);
    kv("p2p_links_count", 0);
    kv("cpu_core_id_base", p.CComputeIdLo.into());
    kv("simd_id_base", p.FComputeIdLo.into());
    kv("max_waves_per_simd", p.MaxWavesPerSIMD.into());
    kv("lds_size_in_kb", p.LDSSizeInKB.into());
    kv("gds_size_in_kb", 0);
    kv("num_gws", 0);
    kv("wave_front_size", p.WaveFrontSize.into());
    kv(
        "array_count",
        (p.NumShaderBanks * p.NumArrays.max(1)).into(),
    );
    kv(
        "simd_arrays_per_engine",
        p.NumArrays.max(u32::from(gpu)).into(),
    );
    kv("cu_per_simd_array", p.NumCUPerArray.into());
    kv("simd_per_cu", p.NumSIMDPerCU.into());
    kv("max_slots_scratch_cu", p.MaxSlotsScratchCU.into());
    let gfx = if gpu {
        gfx_target_version((engine.Major(), engine.Minor(), engine.Stepping()))
    } else {
        0
    };
    kv("gfx_target_version", gfx.into());
    kv("vendor_id", p.VendorId.into());
    kv("device_id", p.DeviceId.into());
    kv("location_id", p.LocationId.into());
    kv("domain", 0);
    kv(
        "drm_render_minor",
        if gpu { p.DrmRenderMinor as u64 } else { 0 },
    );
    kv("hive_id", 0);
    kv("num_sdma_engines", p.NumSdmaEngines.into());
    kv("num_sdma_xgmi_engines", 0);
    kv(
        "num_sdma_queues_per_engine",
        p.NumSdmaQueuesPerEngine.into(),
    );
    kv("num_cp_queues", p.NumCpQueues.into());
    kv(
        "max_engine_clk_fcompute",
        p.MaxEngineClockMhzFCompute.into(),
    );
    kv("local_mem_size", p.LocalMemSize);
    kv("fw_version", if gpu { engine.uCode().into() } else { 0 });
    kv("capability", cap.into());
    kv("debug_prop", 0);
    kv("sdma_fw_version", if gpu { sdma_fw.into() } else { 0 });
    kv("unique_id", p.UniqueID);
    kv("num_xcc", u64::from(gpu));
    kv(
        "max_engine_clk_ccompute",
        p.MaxEngineClockMhzCCompute.into(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rprof_emu::config::Config;

    fn value(text: &str, key: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{key} missing"))
            .parse()
            .unwrap()
    }

    #[test]
    fn gpu_node_properties_are_numeric_and_complete() {
        let t = Topology::new(&Config::default());
        let p = t.node_properties(1).unwrap();
        let text = node_properties_text(&p, 1, 2, 1);
        for line in text.lines() {
            let (k, v) = line.split_once(' ').unwrap();
            assert!(
                k.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                "{line}"
            );
            v.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
        }
        assert_eq!(value(&text, "gfx_target_version"), 90010);
        assert_eq!(value(&text, "simd_count"), 416);
        assert_eq!(value(&text, "simd_per_cu"), 4);
        assert_eq!(value(&text, "cpu_cores_count"), 0);
        assert_eq!(value(&text, "capability") & (1 << 27), 0, "no SVM API");
        assert_eq!(
            value(&text, "capability") & (1 << 29),
            0,
            "no debug firmware: no RUNTIME_ENABLE"
        );
        assert_eq!((value(&text, "capability") >> 12) & 3, 2, "doorbell type 2");
        assert_eq!(value(&text, "drm_render_minor"), 128);
        assert_eq!(value(&text, "num_xcc"), 1);
        assert!(value(&text, "simd_arrays_per_engine") > 0);
    }

    #[test]
    fn the_apu_is_shown_as_a_cpu_node_and_a_gpu_node() {
        let c = Config {
            apu: true,
            ..Config::default()
        };
        let core = Topology::new(&c);
        assert_eq!(core.nodes.len(), 1);
        let dir = mkdtemp(Path::new("/tmp")).unwrap();
        write_tree(&dir, &core).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("topology/nodes/0/gpu_id"), "0\n");
        // The GPU node carries the core node 0's gpu_id (its queues and memory belong to core node 0).
        assert_eq!(read("topology/nodes/1/gpu_id"), format!("{}\n", gpu_id(0)));
        let cpu = read("topology/nodes/0/properties");
        let gpu = read("topology/nodes/1/properties");
        assert!(value(&cpu, "cpu_cores_count") > 0);
        assert_eq!(value(&cpu, "simd_count"), 0);
        assert_eq!(value(&gpu, "cpu_cores_count"), 0);
        assert_eq!(value(&gpu, "simd_count"), 8 * 4);
        assert_eq!(
            value(
                &read("topology/nodes/1/mem_banks/0/properties"),
                "heap_type"
            ),
            1
        );
        assert_eq!(
            value(&read("topology/nodes/1/io_links/0/properties"), "node_to"),
            0
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tree_has_contiguous_nodes_and_real_banks_only() {
        let c = Config {
            gpus: vec![rprof_emu::config::model_by_name("gfx942").unwrap(); 2],
            ..Config::default()
        };
        let t = Topology::new(&c);
        let dir = mkdtemp(Path::new("/tmp")).unwrap();
        write_tree(&dir, &t).unwrap();
        let nodes = dir.join("topology/nodes");
        let mut names: Vec<String> = std::fs::read_dir(&nodes)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["0", "1", "2"]);
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("topology/nodes/0/gpu_id"), "0\n");
        assert_eq!(read("topology/nodes/2/gpu_id"), format!("{}\n", gpu_id(2)));
        let gpu = read("topology/nodes/1/properties");
        assert_eq!(value(&gpu, "gfx_target_version"), 90402);
        assert_eq!(value(&gpu, "mem_banks_count"), 1);
        assert_eq!(
            value(
                &read("topology/nodes/1/mem_banks/0/properties"),
                "heap_type"
            ),
            1
        );
        assert_eq!(
            value(&read("topology/nodes/1/io_links/0/properties"), "node_from"),
            1
        );
        assert_eq!(
            value(&read("topology/nodes/0/io_links/1/properties"), "node_to"),
            2
        );
        assert_eq!(read("module/amdgpu/initstate"), "live\n");
        let mode = std::fs::metadata(&dir).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
