//! The agents of the run, from the runtime's agent iteration: the GPU
//! agents, then (for the memory-copy trace, whose copies name them) the CPU
//! agents.
//!
//! Owns enumerating agents and reading their names and compute-unit counts
//! (once, at `OnLoad`), and mapping an agent handle to its index. Must not
//! touch queues or dispatches.

use std::ffi::c_void;

use hsa_sys::{
    hsa_agent_t, hsa_status_t, HSA_AGENT_INFO_DEVICE, HSA_AGENT_INFO_NAME,
    HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, HSA_AMD_AGENT_INFO_PRODUCT_NAME, HSA_DEVICE_TYPE_CPU,
    HSA_DEVICE_TYPE_GPU, HSA_STATUS_SUCCESS,
};
use rprof_core::record::AgentInfo;

use crate::runtime::Runtime;

/// Every agent of the runtime, in enumeration order.
fn all(rt: &Runtime) -> Vec<hsa_agent_t> {
    unsafe extern "C" fn collect(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Vec` passed below, alive for the iteration.
        let v = unsafe { &mut *data.cast::<Vec<hsa_agent_t>>() };
        v.push(agent);
        HSA_STATUS_SUCCESS
    }
    let mut all: Vec<hsa_agent_t> = Vec::new();
    if let Some(iterate) = rt.core.hsa_iterate_agents_fn {
        // SAFETY: the callback only pushes into `all`, which outlives the call.
        unsafe { iterate(Some(collect), (&mut all as *mut Vec<hsa_agent_t>).cast()) };
    }
    all
}

/// The agents of one device type (`HSA_DEVICE_TYPE_*`), in enumeration
/// order.
pub(super) fn of_type(rt: &Runtime, device: u32) -> Vec<hsa_agent_t> {
    all(rt)
        .into_iter()
        .filter(|&a| info_u32(rt, a, HSA_AGENT_INFO_DEVICE) == device)
        .collect()
}

/// GPU agents in enumeration order, then, with `with_cpus`, the CPU agents
/// in enumeration order (indices continue after the GPUs').
pub(super) fn enumerate(rt: &Runtime, with_cpus: bool) -> Vec<AgentInfo> {
    let all = all(rt);
    let mut out = Vec::new();
    for want_gpu in [true, false] {
        if !want_gpu && !with_cpus {
            break;
        }
        for &agent in &all {
            let device = info_u32(rt, agent, HSA_AGENT_INFO_DEVICE);
            let take = if want_gpu {
                device == HSA_DEVICE_TYPE_GPU
            } else {
                device == HSA_DEVICE_TYPE_CPU
            };
            if !take {
                continue;
            }
            out.push(AgentInfo {
                index: out.len() as u32,
                name: info_string(rt, agent, HSA_AGENT_INFO_NAME),
                product_name: info_string(rt, agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME),
                handle: agent.handle,
                compute_units: info_u32(rt, agent, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT),
                cpu: !want_gpu,
            });
        }
    }
    out
}

fn info_string(rt: &Runtime, agent: hsa_agent_t, attribute: u32) -> String {
    let Some(get) = rt.core.hsa_agent_get_info_fn else {
        return String::new();
    };
    let mut buf = [0u8; 64];
    // SAFETY: both attributes write at most 64 bytes (a char[64]) into `buf`.
    let status = unsafe { get(agent, attribute, buf.as_mut_ptr().cast()) };
    if status != HSA_STATUS_SUCCESS {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn info_u32(rt: &Runtime, agent: hsa_agent_t, attribute: u32) -> u32 {
    let Some(get) = rt.core.hsa_agent_get_info_fn else {
        return 0;
    };
    let mut v = 0u32;
    // SAFETY: the attributes queried this way are 32-bit values.
    let status = unsafe { get(agent, attribute, (&mut v as *mut u32).cast()) };
    if status == HSA_STATUS_SUCCESS {
        v
    } else {
        0
    }
}

/// The index of a traced GPU agent among `agents` (`None`: not a GPU rprof
/// traces).
pub(super) fn gpu_index(agents: &[AgentInfo], agent: hsa_agent_t) -> Option<u32> {
    agents
        .iter()
        .find(|a| a.handle == agent.handle && !a.cpu)
        .map(|a| a.index)
}

/// The index of any listed agent (GPU or CPU) and whether it is a GPU.
/// A linear search of a few entries: no lock, no allocation.
pub(super) fn any_agent(agent: hsa_agent_t) -> Option<(u32, bool)> {
    super::listed_agents()
        .iter()
        .find(|a| a.handle == agent.handle)
        .map(|a| (a.index, !a.cpu))
}
