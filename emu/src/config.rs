//! Emulator configuration: environment variables, optionally layered over a config file.
//!
//! Every setting is a `KEY=VALUE` pair. It can come from the environment as `RPROF_EMU_KEY=VALUE`, or from the file
//! named by `RPROF_EMU_CONFIG` (one `KEY=VALUE` per line, `#` starts a comment, keys written without the
//! `RPROF_EMU_` prefix). The environment wins over the file. Unknown keys and bad values are errors: the emulator
//! then refuses `hsaKmtOpenKFD` and says why on stderr, so that a typo never silently yields another machine.

use std::collections::HashMap;

/// One ISA the emulator can present, with the properties KFD would report for a typical board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    /// `gfx90a` etc.
    pub name: &'static str,
    /// `EngineId` major.minor.stepping, as in ROCr's ISA registry.
    pub gfx_version: (u32, u32, u32),
    /// PCI device id.
    pub device_id: u16,
    /// Marketing name (becomes `HSA_AMD_AGENT_INFO_PRODUCT_NAME`).
    pub marketing_name: &'static str,
    /// Default number of compute units.
    pub compute_units: u32,
    /// SIMDs per CU (KFD's `NumSIMDPerCU`).
    pub simds_per_cu: u32,
    /// Native wavefront size.
    pub wavefront_size: u32,
}

/// The ISAs the emulator knows.
pub const GPU_MODELS: [GpuModel; 7] = [
    GpuModel {
        name: "gfx900",
        gfx_version: (9, 0, 0),
        device_id: 0x6860,
        marketing_name: "Emulated Radeon Instinct MI25",
        compute_units: 64,
        simds_per_cu: 4,
        wavefront_size: 64,
    },
    GpuModel {
        name: "gfx906",
        gfx_version: (9, 0, 6),
        device_id: 0x66a1,
        marketing_name: "Emulated AMD Instinct MI50",
        compute_units: 60,
        simds_per_cu: 4,
        wavefront_size: 64,
    },
    GpuModel {
        name: "gfx908",
        gfx_version: (9, 0, 8),
        device_id: 0x738c,
        marketing_name: "Emulated AMD Instinct MI100",
        compute_units: 120,
        simds_per_cu: 4,
        wavefront_size: 64,
    },
    GpuModel {
        name: "gfx90a",
        gfx_version: (9, 0, 10),
        device_id: 0x740f,
        marketing_name: "Emulated AMD Instinct MI210",
        compute_units: 104,
        simds_per_cu: 4,
        wavefront_size: 64,
    },
    GpuModel {
        name: "gfx942",
        gfx_version: (9, 4, 2),
        device_id: 0x74a1,
        marketing_name: "Emulated AMD Instinct MI300X",
        compute_units: 304,
        simds_per_cu: 4,
        wavefront_size: 64,
    },
    GpuModel {
        name: "gfx1030",
        gfx_version: (10, 3, 0),
        device_id: 0x73bf,
        marketing_name: "Emulated AMD Radeon RX 6800 XT",
        compute_units: 72,
        simds_per_cu: 2,
        wavefront_size: 32,
    },
    GpuModel {
        name: "gfx1100",
        gfx_version: (11, 0, 0),
        device_id: 0x744c,
        marketing_name: "Emulated AMD Radeon RX 7900 XTX",
        compute_units: 96,
        simds_per_cu: 2,
        wavefront_size: 32,
    },
];

/// Default compute units of the APU layout.
pub const APU_COMPUTE_UNITS: u32 = 8;

/// Which kernels a duration override applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelKey {
    /// Symbol name, without the `.kd` suffix.
    Name(String),
    /// Kernel object (descriptor address).
    Object(u64),
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// GPUs, one node each (only the first is used in the APU layout).
    pub gpus: Vec<GpuModel>,
    /// APU layout: a single node holding the CPU cores and the GPU.
    pub apu: bool,
    /// Compute units per GPU (overrides the model default).
    pub compute_units: Option<u32>,
    /// Fixed cost of every kernel (ns).
    pub kernel_base_ns: u64,
    /// Cost of one workgroup on one CU (ns); divided by the CU count.
    pub kernel_workgroup_ns: u64,
    /// Every kernel takes exactly this long (ns), unless a per-kernel override says otherwise.
    pub kernel_fixed_ns: Option<u64>,
    /// Per-kernel durations (ns).
    pub kernel_ns: Vec<(KernelKey, u64)>,
    /// How long the command processor keeps spinning after its last activity (µs).
    pub spin_us: u64,
    /// While a running kernel ends within 20 µs, the command processor spins without yielding its core, as a
    /// GPU runs its kernels whatever the host's threads do (`false`: it yields, gentler on a 1-core machine, but
    /// then any host thread that takes the core delays the device's timeline).
    pub deadline_spin: bool,
    /// How close (µs) a running kernel's end must be for `deadline_spin` to hold the core.
    pub deadline_spin_us: u64,
    /// Nice value the command processor thread asks for (best effort: lowering it below 0 needs root or
    /// `CAP_SYS_NICE`, and a refusal leaves the default). A GPU's command processor is never preempted by host
    /// threads; at -10 a woken host thread rarely preempts the emulated one in the middle of a kernel sequence.
    pub cp_nice: i32,
    /// The command processor thread runs at the real-time policy `SCHED_FIFO` (priority 1; needs root or
    /// `CAP_SYS_NICE`, a refusal leaves `cp_nice`): no host thread of the normal policies preempts it or is handed
    /// its core when it yields, so host work (the app's, a profiler's) never stretches the device's timeline, as on
    /// a real GPU. It still naps when idle; the kernel's real-time throttling leaves other threads 5 % of its core
    /// even then. Off by default: it changes what the benchmarks measured so far.
    pub cp_realtime: bool,
    /// Longest nap of the idle command processor (µs).
    pub max_nap_us: u64,
    /// Longest nap after one second without any progress (µs).
    pub deep_nap_us: u64,
    /// Size of each GPU's frame buffer (MiB).
    pub vram_mib: u64,
    /// Accept SDMA queues and emulate the SDMA engine (otherwise ROCr falls back to blit kernels).
    pub sdma: bool,
    /// Log unusual events (unknown pointers, faults) to stderr.
    pub log: bool,
    /// KFD interface version reported to the runtime, `(major, minor)`. Minor 14 and later enable event ages
    /// in ROCr >= 6.1 (ROCr 5.2.3 only distinguishes minor < 4 for sramecc ISAs).
    pub kfd_version: (u32, u32),
    /// File the emulator writes its driver-event wait counts to at exit (`event_waits=N`,
    /// `event_waits_at_once=M`): how often the runtime's threads waited on driver events, and how many of those
    /// waits returned without sleeping (a runtime thread spinning on the driver shows as the second); then the
    /// device's timeline ([`crate::cp::Timeline`]: busy and idle time, late retirements, start-up and exit).
    pub event_report: Option<std::path::PathBuf>,
}

/// Default KFD interface version: 1.14, the first with event ages.
pub const DEFAULT_KFD_VERSION: (u32, u32) = (1, 14);

impl Default for Config {
    fn default() -> Self {
        Config {
            gpus: vec![GPU_MODELS[3]],
            apu: false,
            compute_units: None,
            kernel_base_ns: 2_000,
            kernel_workgroup_ns: 1_000,
            kernel_fixed_ns: None,
            kernel_ns: Vec::new(),
            spin_us: 200,
            deadline_spin: true,
            deadline_spin_us: 20,
            cp_nice: -10,
            cp_realtime: false,
            max_nap_us: 1_000,
            deep_nap_us: 4_000,
            vram_mib: 16 * 1024,
            log: false,
            sdma: false,
            kfd_version: DEFAULT_KFD_VERSION,
            event_report: None,
        }
    }
}

const KEYS: [&str; 20] = [
    "SDMA",
    "DEADLINE_SPIN_US",
    "CP_REALTIME",
    "EVENT_REPORT",
    "DEADLINE_SPIN",
    "CP_NICE",
    "KFD_VERSION",
    "DEEP_NAP_US",
    "GPUS",
    "APU",
    "CUS",
    "KERNEL_BASE_NS",
    "KERNEL_WG_NS",
    "KERNEL_NS",
    "SPIN_US",
    "MAX_NAP_US",
    "VRAM_MB",
    "LOG",
    "CONFIG",
    "ISA",
];

fn parse_u64(key: &str, v: &str) -> Result<u64, String> {
    let v = v.trim();
    let parsed = if let Some(hex) = v.strip_prefix("0x") {
        u64::from_str_radix(hex, 16)
    } else {
        v.parse()
    };
    parsed.map_err(|_| format!("{key}: '{v}' is not a number"))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v.trim() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        other => Err(format!("{key}: '{other}' is not a boolean")),
    }
}

/// Looks an ISA up by name (`gfx90a`, also accepted with `:feature` suffixes stripped).
pub fn model_by_name(name: &str) -> Option<GpuModel> {
    let base = name.trim().split(':').next().unwrap_or("");
    GPU_MODELS.iter().copied().find(|m| m.name == base)
}

impl Config {
    /// Reads the process environment (and the file it names).
    pub fn from_env() -> Result<Config, String> {
        let mut pairs: HashMap<String, String> = HashMap::new();
        if let Ok(path) = std::env::var("RPROF_EMU_CONFIG") {
            let text = read_config_file(std::path::Path::new(&path))
                .map_err(|e| format!("RPROF_EMU_CONFIG={path}: {e}"))?;
            for (k, v) in parse_file(&text)? {
                pairs.insert(k, v);
            }
        }
        for (k, v) in std::env::vars() {
            if let Some(key) = k.strip_prefix("RPROF_EMU_") {
                pairs.insert(key.to_string(), v);
            }
        }
        Config::from_pairs(&pairs)
    }

    /// Builds a configuration from `KEY → VALUE` pairs (keys without the `RPROF_EMU_` prefix).
    pub fn from_pairs(pairs: &HashMap<String, String>) -> Result<Config, String> {
        let mut c = Config::default();
        for (k, v) in pairs {
            if !KEYS.contains(&k.as_str()) {
                return Err(format!("unknown setting RPROF_EMU_{k}"));
            }
            match k.as_str() {
                "GPUS" | "ISA" => {
                    let mut gpus = Vec::new();
                    for name in v.split(',').filter(|s| !s.trim().is_empty()) {
                        gpus.push(model_by_name(name).ok_or_else(|| {
                            format!("{k}: unknown ISA '{name}' (known: gfx900 gfx906 gfx908 gfx90a gfx1030)")
                        })?);
                    }
                    if gpus.is_empty() {
                        return Err(format!("{k}: no GPU given"));
                    }
                    if gpus.len() > MAX_GPUS {
                        return Err(format!("{k}: {} GPUs, at most {MAX_GPUS}", gpus.len()));
                    }
                    c.gpus = gpus;
                }
                "APU" => c.apu = parse_bool(k, v)?,
                "CUS" => {
                    let n = parse_u64(k, v)?;
                    if n == 0 || n > 1024 {
                        return Err(format!("CUS: {n} is out of range 1..=1024"));
                    }
                    c.compute_units = Some(n as u32);
                }
                "KERNEL_BASE_NS" => c.kernel_base_ns = parse_u64(k, v)?,
                "KERNEL_WG_NS" => c.kernel_workgroup_ns = parse_u64(k, v)?,
                "KERNEL_NS" => {
                    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        match item.rsplit_once('=') {
                            None => c.kernel_fixed_ns = Some(parse_u64(k, item)?),
                            Some((key, ns)) => {
                                let ns = parse_u64(k, ns)?;
                                let key = key.trim();
                                let key = if let Some(hex) = key.strip_prefix("0x") {
                                    KernelKey::Object(u64::from_str_radix(hex, 16).map_err(
                                        |_| format!("KERNEL_NS: bad kernel object '{key}'"),
                                    )?)
                                } else {
                                    KernelKey::Name(
                                        key.strip_suffix(".kd").unwrap_or(key).to_string(),
                                    )
                                };
                                c.kernel_ns.push((key, ns));
                            }
                        }
                    }
                }
                "SPIN_US" => c.spin_us = parse_u64(k, v)?,
                "DEADLINE_SPIN_US" => c.deadline_spin_us = parse_u64(k, v)?,
                "MAX_NAP_US" => c.max_nap_us = parse_u64(k, v)?.max(1),
                "DEEP_NAP_US" => c.deep_nap_us = parse_u64(k, v)?.max(1),
                "VRAM_MB" => c.vram_mib = parse_u64(k, v)?.max(1),
                "LOG" => c.log = parse_bool(k, v)?,
                "EVENT_REPORT" => {
                    if v.trim().is_empty() {
                        return Err("EVENT_REPORT: an empty path".to_string());
                    }
                    c.event_report = Some(std::path::PathBuf::from(v.trim()));
                }
                "SDMA" => c.sdma = parse_bool(k, v)?,
                "DEADLINE_SPIN" => c.deadline_spin = parse_bool(k, v)?,
                "CP_REALTIME" => c.cp_realtime = parse_bool(k, v)?,
                "CP_NICE" => {
                    c.cp_nice = v
                        .trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|n| (-20..=19).contains(n))
                        .ok_or_else(|| format!("CP_NICE: '{v}' is not a nice value (-20..19)"))?
                }
                "KFD_VERSION" => {
                    let bad = || format!("KFD_VERSION: '{v}' is not MAJOR.MINOR with major 1");
                    let (major, minor) = v.trim().split_once('.').ok_or_else(bad)?;
                    let major: u32 = major.parse().map_err(|_| bad())?;
                    let minor: u32 = minor.parse().map_err(|_| bad())?;
                    if major != 1 {
                        return Err(bad());
                    }
                    c.kfd_version = (major, minor);
                }
                _ => {} // CONFIG: the file itself
            }
        }
        Ok(c)
    }

    /// Compute units of GPU `model`. An APU defaults to [`APU_COMPUTE_UNITS`]: ROCr reserves scratch for every
    /// queue of a FULL-profile agent in proportion to the CU count, and 100+ CUs exhaust its 4 GiB aperture.
    pub fn cus_of(&self, model: &GpuModel) -> u32 {
        self.compute_units.unwrap_or(if self.apu {
            APU_COMPUTE_UNITS
        } else {
            model.compute_units
        })
    }

    /// Duration override for a kernel, by object first, then by name, then the fixed duration.
    pub fn kernel_override(&self, object: u64, name: Option<&str>) -> Option<u64> {
        let by_object = self
            .kernel_ns
            .iter()
            .find(|(k, _)| *k == KernelKey::Object(object))
            .map(|(_, ns)| *ns);
        let by_name = || {
            let name = name?;
            let name = name.strip_suffix(".kd").unwrap_or(name);
            self.kernel_ns
                .iter()
                .find(|(k, _)| matches!(k, KernelKey::Name(n) if n == name))
                .map(|(_, ns)| *ns)
        };
        by_object.or_else(by_name).or(self.kernel_fixed_ns)
    }

    /// The default time model: `base + ceil(workgroups / cus) * workgroup_ns`.
    pub fn model_duration_ns(&self, workgroups: u64, cus: u32) -> u64 {
        let waves = workgroups.div_ceil(u64::from(cus.max(1)));
        self.kernel_base_ns
            .saturating_add(waves.saturating_mul(self.kernel_workgroup_ns))
    }
}

/// The largest configuration file read (a real one is a few lines).
pub const MAX_CONFIG_BYTES: u64 = 64 << 10;
/// The most GPUs a configuration may ask for.
pub const MAX_GPUS: usize = 64;

/// Reads a configuration file as untrusted input: at most
/// [`MAX_CONFIG_BYTES`] (so `/dev/zero` or a huge file is an error, not an
/// endless read), UTF-8.
fn read_config_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "larger than {MAX_CONFIG_BYTES} bytes: not a configuration file"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

fn parse_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("config line {}: expected KEY=VALUE", i + 1))?;
        let k = k.trim();
        let k = k.strip_prefix("RPROF_EMU_").unwrap_or(k);
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic mutation fuzzing (stable Rust): a seed configuration
    /// mutated by a fixed xorshift sequence must parse to a configuration or
    /// an error, never a panic.
    #[test]
    fn fuzz_config_never_panics() {
        let seed = "# emulator\nGPUS=gfx90a,gfx942\nCUS=8\nKERNEL_NS=add=1000,0x7f00=20,500\n\
                    KFD_VERSION=1.14\nVRAM_MB=512\nAPU=0\nLOG=1\nSDMA=yes\n";
        let pieces = [
            "=",
            ",",
            "0x",
            ".kd",
            "#",
            "\n",
            "gfx",
            "99999999999999999999",
            ":",
            "1.",
            "-1",
            "=",
        ];
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut ok, mut errors) = (0u32, 0u32);
        for _ in 0..20_000 {
            let mut text = seed.as_bytes().to_vec();
            for _ in 0..1 + next() % 4 {
                let at = (next() % (text.len() as u64 + 1)) as usize;
                match next() % 4 {
                    0 if at < text.len() => {
                        text.remove(at);
                    }
                    1 if at < text.len() => text[at] = next() as u8,
                    2 => {
                        let p = pieces[(next() % pieces.len() as u64) as usize];
                        text.splice(at..at, p.bytes()).for_each(drop);
                    }
                    _ => text.truncate(at),
                }
            }
            let text = String::from_utf8_lossy(&text);
            let result = std::panic::catch_unwind(|| {
                parse_file(&text).and_then(|p| Config::from_pairs(&p.into_iter().collect()))
            });
            match result {
                Ok(Ok(_)) => ok += 1,
                Ok(Err(_)) => errors += 1,
                Err(_) => panic!("config parsing panicked on {text:?}"),
            }
        }
        assert_eq!(ok + errors, 20_000);
        assert!(ok > 0 && errors > 0, "ok {ok}, errors {errors}");
    }

    #[test]
    fn hostile_config_files_are_errors() {
        let e = read_config_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e, "larger than 65536 bytes: not a configuration file");
        let p = std::env::temp_dir().join(format!("rprof-emu-cfg-{}", std::process::id()));
        std::fs::write(&p, b"GPUS=gfx90a\n\xff\xfe\n").unwrap();
        assert_eq!(read_config_file(&p).unwrap_err(), "not UTF-8 text");
        std::fs::write(&p, b"GPUS=gfx90a\n").unwrap();
        assert_eq!(read_config_file(&p).unwrap(), "GPUS=gfx90a\n");
        std::fs::remove_file(&p).unwrap();
        let many = vec!["gfx90a"; MAX_GPUS + 1].join(",");
        let e = Config::from_pairs(&pairs(&[("GPUS", &many)])).unwrap_err();
        assert_eq!(e, "GPUS: 65 GPUs, at most 64");
        let ok = vec!["gfx90a"; MAX_GPUS].join(",");
        assert_eq!(
            Config::from_pairs(&pairs(&[("GPUS", &ok)]))
                .unwrap()
                .gpus
                .len(),
            MAX_GPUS
        );
    }

    fn pairs(items: &[(&str, &str)]) -> HashMap<String, String> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_one_gfx90a() {
        let c = Config::from_pairs(&HashMap::new()).unwrap();
        assert_eq!(c.gpus.len(), 1);
        assert_eq!(c.gpus[0].name, "gfx90a");
        assert!(!c.apu);
        assert_eq!(c.model_duration_ns(1, 104), 3_000);
        assert_eq!(c.model_duration_ns(209, 104), 5_000);
    }

    #[test]
    fn parses_gpus_and_overrides() {
        let c = Config::from_pairs(&pairs(&[
            ("GPUS", "gfx90a,gfx908:sramecc+"),
            ("CUS", "8"),
            ("KERNEL_NS", "vadd=5000, 0x1000=7,  slow.kd=9"),
        ]))
        .unwrap();
        assert_eq!(
            c.gpus.iter().map(|g| g.name).collect::<Vec<_>>(),
            ["gfx90a", "gfx908"]
        );
        assert_eq!(c.cus_of(&c.gpus[1]), 8);
        assert_eq!(c.kernel_override(0x1000, Some("vadd")), Some(7));
        assert_eq!(c.kernel_override(0x2000, Some("vadd.kd")), Some(5000));
        assert_eq!(c.kernel_override(0x2000, Some("slow")), Some(9));
        assert_eq!(c.kernel_override(0x2000, Some("other")), None);
        let fixed = Config::from_pairs(&pairs(&[("KERNEL_NS", "0,vadd=3")])).unwrap();
        assert_eq!(fixed.kernel_override(1, Some("x")), Some(0));
        assert_eq!(fixed.kernel_override(1, Some("vadd")), Some(3));
    }

    #[test]
    fn rejects_typos() {
        assert!(Config::from_pairs(&pairs(&[("GPU", "gfx90a")])).is_err());
        assert!(Config::from_pairs(&pairs(&[("GPUS", "gfx999")])).is_err());
        assert!(Config::from_pairs(&pairs(&[("CUS", "many")])).is_err());
    }

    #[test]
    fn deadline_spin_is_on_by_default_and_can_be_turned_off() {
        assert!(Config::default().deadline_spin);
        let c = Config::from_pairs(&pairs(&[("DEADLINE_SPIN", "0")])).unwrap();
        assert!(!c.deadline_spin);
        assert!(Config::from_pairs(&pairs(&[("DEADLINE_SPIN", "sometimes")])).is_err());
    }

    #[test]
    fn the_deadline_spin_window_defaults_to_20_us() {
        assert_eq!(Config::default().deadline_spin_us, 20);
        assert_eq!(
            Config::from_pairs(&pairs(&[("DEADLINE_SPIN_US", "100")]))
                .unwrap()
                .deadline_spin_us,
            100
        );
        assert!(Config::from_pairs(&pairs(&[("DEADLINE_SPIN_US", "soon")])).is_err());
    }

    #[test]
    fn cp_realtime_is_off_by_default_and_can_be_turned_on() {
        assert!(!Config::default().cp_realtime);
        assert!(
            Config::from_pairs(&pairs(&[("CP_REALTIME", "1")]))
                .unwrap()
                .cp_realtime
        );
        assert!(Config::from_pairs(&pairs(&[("CP_REALTIME", "always")])).is_err());
    }

    #[test]
    fn cp_nice_defaults_to_minus_10_and_is_bounded() {
        assert_eq!(Config::default().cp_nice, -10);
        assert_eq!(
            Config::from_pairs(&pairs(&[("CP_NICE", "0")]))
                .unwrap()
                .cp_nice,
            0
        );
        for bad in ["-21", "20", "x", ""] {
            assert!(
                Config::from_pairs(&pairs(&[("CP_NICE", bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn kfd_version_defaults_to_1_14_and_is_configurable() {
        assert_eq!(Config::default().kfd_version, (1, 14));
        let c = Config::from_pairs(&pairs(&[("KFD_VERSION", "1.8")])).unwrap();
        assert_eq!(c.kfd_version, (1, 8));
        for bad in ["2.0", "1", "1.x", ""] {
            assert!(
                Config::from_pairs(&pairs(&[("KFD_VERSION", bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn file_syntax() {
        let kv = parse_file("# comment\nGPUS = gfx906\nRPROF_EMU_APU=1 # trailing\n\n").unwrap();
        assert_eq!(
            kv,
            vec![("GPUS".into(), "gfx906".into()), ("APU".into(), "1".into())]
        );
        assert!(parse_file("nonsense").is_err());
    }
}
