//! The emulated machine's topology: nodes, memory banks, caches and IO links, in KFD's structs.
//!
//! Layouts:
//! * **dGPU** (default): node 0 is the CPU (`NumCPUCores > 0`, one system-memory bank); nodes 1..=n are discrete
//!   GPUs (`NumCPUCores = 0`, a public frame buffer, LDS and scratch apertures), each with a PCIe link to node 0.
//! * **APU** (`RPROF_EMU_APU=1`): a single node 0 holding both the CPU cores and the GPU's SIMDs, with one system
//!   bank plus the LDS/scratch apertures. ROCr then reports a FULL-profile GPU and a CPU agent on the same node.

use crate::config::{Config, GpuModel};
use hsa_sys::hsakmt::*;

/// Size of the system-memory bank reported on the CPU node.
pub const SYSTEM_MEMORY_BYTES: u64 = 64 << 30;
/// Base of the LDS (group segment) aperture; ROCr asserts a non-zero value.
pub const LDS_APERTURE: u64 = 0x1000_0000_0000_0000;
/// Base of the scratch (private segment) aperture.
pub const SCRATCH_APERTURE: u64 = 0x2000_0000_0000_0000;
/// `GbAddrConfig` for `hsaKmtGetTileConfig`: a Vega10-like value whose pipe-interleave field encodes 256 bytes.
pub const GB_ADDR_CONFIG: u32 = 0x2a11_4042;

/// A GPU as placed in the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuNode {
    /// The ISA model.
    pub model: GpuModel,
    /// Compute units.
    pub cus: u32,
    /// Index among the GPUs (0-based).
    pub index: u32,
}

/// One KFD node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// CPU cores (0 for a discrete GPU).
    pub cpu_cores: u32,
    /// The GPU part, if any.
    pub gpu: Option<GpuNode>,
}

/// All nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Indexed by node id.
    pub nodes: Vec<Node>,
    /// Frame buffer size per GPU.
    pub vram_bytes: u64,
}

fn host_cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1)
}

fn utf16_name(name: &str) -> [u16; 64] {
    let mut out = [0u16; 64];
    for (o, c) in out.iter_mut().zip(name.encode_utf16().take(63)) {
        *o = c;
    }
    out
}

fn ascii_name(name: &str) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (o, c) in out.iter_mut().zip(name.bytes().take(63)) {
        *o = c;
    }
    out
}

/// CP microcode version reported for a model (`EngineId.uCode`, sysfs `fw_version`). ROCr >= 6.2 asserts that the
/// CP implements asynchronous scratch reclaim on gfx94x from version 177 on, which the emulator does not: gfx94x
/// reports 170. Others report 800.
pub fn cp_firmware(m: GpuModel) -> u32 {
    if (m.gfx_version.0, m.gfx_version.1) == (9, 4) {
        170
    } else {
        800
    }
}

/// Vector registers per CU in bytes, as KFD's thunk computes them: 512 KiB on gfx908, gfx90a and gfx94x, 384 KiB on
/// gfx11/gfx12, 256 KiB otherwise.
pub fn vgpr_bytes_per_cu(m: GpuModel) -> u32 {
    match m.gfx_version {
        (9, 0, 8) | (9, 0, 10) | (9, 4, _) | (9, 5, _) => 0x80000,
        (11, _, _) | (12, _, _) => 0x60000,
        _ => 0x40000,
    }
}

impl Topology {
    /// Builds the topology a configuration describes.
    pub fn new(config: &Config) -> Topology {
        let gpus = config.gpus.iter().enumerate().map(|(i, m)| GpuNode {
            model: *m,
            cus: config.cus_of(m),
            index: i as u32,
        });
        let nodes = if config.apu {
            let gpu = gpus.take(1).next();
            vec![Node {
                cpu_cores: host_cores(),
                gpu,
            }]
        } else {
            let mut nodes = vec![Node {
                cpu_cores: host_cores(),
                gpu: None,
            }];
            nodes.extend(gpus.map(|g| Node {
                cpu_cores: 0,
                gpu: Some(g),
            }));
            nodes
        };
        Topology {
            nodes,
            vram_bytes: config.vram_mib << 20,
        }
    }

    /// The node, if it exists.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.get(id as usize)
    }

    /// Nodes with a GPU.
    pub fn gpu_nodes(&self) -> impl Iterator<Item = (u32, &GpuNode)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.gpu.as_ref().map(|g| (i as u32, g)))
    }

    fn is_apu(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].gpu.is_some()
    }

    /// KFD's GPU id of a node (`KFDGpuID`, sysfs `gpu_id`): non-zero and unique for GPU nodes, 0 for CPU-only
    /// nodes.
    pub fn kfd_gpu_id(&self, id: u32) -> u32 {
        match self.node(id) {
            Some(Node { gpu: Some(_), .. }) => 0x3e80 + id * 0x101,
            _ => 0,
        }
    }

    /// amdgpu family id of a node's GPU (`FamilyID`; libdrm `family_id`): AMDGPU_FAMILY_AI (141) for gfx9,
    /// AMDGPU_FAMILY_NV (143) for gfx10; 0 without a GPU.
    pub fn family_id(&self, id: u32) -> u32 {
        match self.node(id).and_then(|n| n.gpu) {
            Some(g) if g.model.gfx_version.0 == 9 => 141,
            Some(g) if g.model.gfx_version.0 == 10 => 143,
            _ => 0,
        }
    }

    /// Memory banks of a node.
    pub fn memory_banks(&self, id: u32) -> Vec<HsaMemoryProperties> {
        let Some(node) = self.node(id) else {
            return Vec::new();
        };
        let bank = |heap: HSA_HEAPTYPE, size: u64, base: u64| {
            let mut m = HsaMemoryProperties {
                HeapType: heap,
                VirtualBaseAddress: base,
                ..Default::default()
            };
            m.__bindgen_anon_1.SizeInBytes = size;
            m.Width = 64;
            m.MemoryClockMax = 1600;
            m
        };
        let mut banks = Vec::new();
        if node.cpu_cores > 0 {
            banks.push(bank(HSA_HEAPTYPE_SYSTEM, SYSTEM_MEMORY_BYTES, 0));
        }
        if node.gpu.is_some() {
            if node.cpu_cores == 0 {
                banks.push(bank(HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC, self.vram_bytes, 0));
            }
            banks.push(bank(HSA_HEAPTYPE_GPU_LDS, 64 << 10, LDS_APERTURE));
            banks.push(bank(HSA_HEAPTYPE_GPU_SCRATCH, 4 << 30, SCRATCH_APERTURE));
        }
        banks
    }

    fn cpu_id_lo(&self, _id: u32) -> u32 {
        0
    }

    fn gpu_id_lo(&self, id: u32) -> u32 {
        0x8000_0000 + id * 0x1000
    }

    /// Caches of a node (at least one per node: HIP's cache queries assert otherwise).
    pub fn caches(&self, id: u32) -> Vec<HsaCacheProperties> {
        let Some(node) = self.node(id) else {
            return Vec::new();
        };
        let cache = |proc_id: u32, level: u32, size_kib: u32, cpu: bool| {
            let mut ty = HsaCacheType__bindgen_ty_1::default();
            ty.set_Data(1);
            if cpu {
                ty.set_CPU(1);
            } else {
                ty.set_HSACU(1);
            }
            HsaCacheProperties {
                ProcessorIdLow: proc_id,
                CacheLevel: level,
                CacheSize: size_kib,
                CacheLineSize: 64,
                CacheLinesPerTag: 1,
                CacheAssociativity: 16,
                CacheLatency: 10 * level,
                CacheType: HsaCacheType { ui32: ty },
                ..Default::default()
            }
        };
        let mut out = Vec::new();
        if node.cpu_cores > 0 {
            out.push(cache(self.cpu_id_lo(id), 1, 32, true));
            out.push(cache(self.cpu_id_lo(id), 2, 512, true));
        }
        if node.gpu.is_some() {
            out.push(cache(self.gpu_id_lo(id), 1, 16, false));
            out.push(cache(self.gpu_id_lo(id), 2, 8192, false));
        }
        out
    }

    /// IO links of a node: each discrete GPU has a PCIe link to node 0 and node 0 one back to each GPU.
    pub fn io_links(&self, id: u32) -> Vec<HsaIoLinkProperties> {
        if self.is_apu() || self.node(id).is_none() {
            return Vec::new();
        }
        let link = |from: u32, to: u32| HsaIoLinkProperties {
            IoLinkType: HSA_IOLINKTYPE_PCIEXPRESS,
            VersionMajor: 3,
            NodeFrom: from,
            NodeTo: to,
            Weight: 20,
            MinimumBandwidth: 1000,
            MaximumBandwidth: 16000,
            RecTransferSize: 0,
            ..Default::default()
        };
        if id == 0 {
            self.gpu_nodes().map(|(g, _)| link(0, g)).collect()
        } else {
            vec![link(id, 0)]
        }
    }

    /// The node's `HsaNodeProperties`.
    pub fn node_properties(&self, id: u32) -> Option<HsaNodeProperties> {
        let node = self.node(id)?;
        let mut p = HsaNodeProperties {
            NumCPUCores: node.cpu_cores,
            NumMemoryBanks: self.memory_banks(id).len() as u32,
            NumCaches: self.caches(id).len() as u32,
            NumIOLinks: self.io_links(id).len() as u32,
            CComputeIdLo: self.cpu_id_lo(id),
            MaxEngineClockMhzCCompute: 3000,
            ..Default::default()
        };
        p.MarketingName = utf16_name("Emulated host CPU");
        p.AMDName = ascii_name("CPU");
        if let Some(g) = node.gpu {
            let m = g.model;
            p.NumFComputeCores = g.cus * m.simds_per_cu;
            p.FComputeIdLo = self.gpu_id_lo(id);
            let mut cap = HSA_CAPABILITY__bindgen_ty_1::default();
            cap.set_DoorbellType(2);
            cap.set_QueueSizePowerOfTwo(1);
            cap.set_WatchPointsTotalBits(2);
            p.Capability = HSA_CAPABILITY { ui32: cap };
            p.MaxWavesPerSIMD = if m.wavefront_size == 32 { 16 } else { 8 };
            p.LDSSizeInKB = 64;
            p.WaveFrontSize = m.wavefront_size;
            p.NumShaderBanks = 4;
            p.NumArrays = 1;
            p.NumCUPerArray = g.cus.div_ceil(4);
            p.NumSIMDPerCU = m.simds_per_cu;
            p.MaxSlotsScratchCU = 32;
            let mut engine = HSA_ENGINE_ID__bindgen_ty_1::default();
            engine.set_Major(m.gfx_version.0);
            engine.set_Minor(m.gfx_version.1);
            engine.set_Stepping(m.gfx_version.2);
            engine.set_uCode(cp_firmware(m));
            p.EngineId = HSA_ENGINE_ID { ui32: engine };
            p.VendorId = 0x1002;
            p.DeviceId = m.device_id;
            p.LocationId = (g.index + 3) << 8;
            p.LocalMemSize = if node.cpu_cores == 0 {
                self.vram_bytes
            } else {
                0
            };
            p.MaxEngineClockMhzFCompute = 1700;
            p.DrmRenderMinor = 128 + g.index as i32;
            p.MarketingName = utf16_name(m.marketing_name);
            p.AMDName = ascii_name(m.name);
            let mut ucode = HSA_ENGINE_VERSION__bindgen_ty_1::default();
            ucode.set_uCodeSDMA(500);
            p.uCodeEngineVersions = HSA_ENGINE_VERSION {
                __bindgen_anon_1: ucode,
            };
            p.NumSdmaEngines = 2;
            p.NumSdmaQueuesPerEngine = 8;
            p.NumCpQueues = 24;
            p.UniqueID = 0x0e30_0000_0000_0000 | u64::from(id);
            p.VGPRSizePerCU = vgpr_bytes_per_cu(m);
            p.SGPRSizePerCU = 800 * 4;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dgpu_layout() {
        let t = Topology::new(&Config::default());
        assert_eq!(t.nodes.len(), 2);
        let gpu = t.node_properties(1).unwrap();
        assert_eq!(gpu.NumCPUCores, 0);
        assert_eq!(gpu.NumFComputeCores, 104 * 4);
        assert_eq!(gpu.DeviceId, 0x740f);
        assert_eq!(t.memory_banks(1).len(), 3);
        assert_eq!(t.io_links(0).len(), 1);
        assert_eq!(t.io_links(1)[0].NodeTo, 0);
        assert!(!t.caches(0).is_empty() && !t.caches(1).is_empty());
        assert_eq!(t.kfd_gpu_id(0), 0);
        assert_eq!(t.kfd_gpu_id(1), 0x3f81);
        assert_eq!(t.family_id(1), 141);
        assert_eq!(t.family_id(0), 0);
    }

    #[test]
    fn newer_isas_have_their_firmware_and_register_sizes() {
        let c = Config {
            gpus: ["gfx942", "gfx1100", "gfx90a", "gfx1030"]
                .iter()
                .map(|n| crate::config::model_by_name(n).unwrap())
                .collect(),
            ..Config::default()
        };
        let t = Topology::new(&c);
        let p = |n| t.node_properties(n).unwrap();
        // SAFETY: reading the bitfield view of a u32 union is always valid.
        let engine = |n| unsafe { p(n).EngineId.ui32 };
        assert_eq!(
            (engine(1).Major(), engine(1).Minor(), engine(1).Stepping()),
            (9, 4, 2)
        );
        assert_eq!(
            engine(1).uCode(),
            170,
            "below ROCr's async-reclaim gate (177)"
        );
        assert_eq!(p(1).VGPRSizePerCU, 0x80000);
        assert!(p(1).NumSdmaEngines >= 1);
        assert_eq!((engine(2).Major(), engine(2).Minor()), (11, 0));
        assert_eq!(engine(2).uCode(), 800);
        assert_eq!(p(2).VGPRSizePerCU, 0x60000);
        assert_eq!(p(2).WaveFrontSize, 32);
        assert_eq!(p(3).VGPRSizePerCU, 0x80000);
        assert_eq!(p(4).VGPRSizePerCU, 0x40000);
    }

    #[test]
    fn apu_layout_is_one_node() {
        let c = Config {
            apu: true,
            ..Config::default()
        };
        let t = Topology::new(&c);
        assert_eq!(t.nodes.len(), 1);
        let p = t.node_properties(0).unwrap();
        assert!(p.NumCPUCores > 0 && p.NumFComputeCores > 0);
        assert!(t.io_links(0).is_empty());
        assert_eq!(t.memory_banks(0)[0].HeapType, HSA_HEAPTYPE_SYSTEM);
    }
}
