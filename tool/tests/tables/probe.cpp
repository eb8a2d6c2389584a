// Prints, for the ROCr headers it is compiled against, the table versions and the offset of every API-table entry
// rprof reads or replaces (tool/src/runtime.rs, session.rs, signals.rs, rpc_wait.rs). scripts/gen-table-layouts.sh
// compiles it inside each runtime's root and turns the output into tool/src/table_layouts.rs;
// tool/tests/table_layouts.rs compiles it again and compares. One "label value" line each.
#include <hsa_api_trace.h>
#include <cstddef>
#include <cstdio>

#define ENTRY(table, field) std::printf(#table "." #field " %zu\n", offsetof(table, field))

int main() {
  std::printf("root.major %u\nroot.step %u\nroot.size %zu\n", unsigned(HSA_API_TABLE_MAJOR_VERSION),
              unsigned(HSA_API_TABLE_STEP_VERSION), sizeof(HsaApiTable));
  std::printf("core.major %u\ncore.step %u\ncore.size %zu\n", unsigned(HSA_CORE_API_TABLE_MAJOR_VERSION),
              unsigned(HSA_CORE_API_TABLE_STEP_VERSION), sizeof(CoreApiTable));
  std::printf("amd.major %u\namd.step %u\namd.size %zu\n", unsigned(HSA_AMD_EXT_API_TABLE_MAJOR_VERSION),
              unsigned(HSA_AMD_EXT_API_TABLE_STEP_VERSION), sizeof(AmdExtTable));
  ENTRY(HsaApiTable, version);
  ENTRY(HsaApiTable, core_);
  ENTRY(HsaApiTable, amd_ext_);
  ENTRY(CoreApiTable, hsa_init_fn);
  ENTRY(CoreApiTable, hsa_shut_down_fn);
  ENTRY(CoreApiTable, hsa_iterate_agents_fn);
  ENTRY(CoreApiTable, hsa_agent_get_info_fn);
  ENTRY(CoreApiTable, hsa_queue_create_fn);
  ENTRY(CoreApiTable, hsa_queue_destroy_fn);
  ENTRY(CoreApiTable, hsa_queue_load_read_index_relaxed_fn);
  ENTRY(CoreApiTable, hsa_queue_load_write_index_relaxed_fn);
  ENTRY(CoreApiTable, hsa_signal_destroy_fn);
  ENTRY(CoreApiTable, hsa_signal_load_relaxed_fn);
  ENTRY(CoreApiTable, hsa_signal_store_screlease_fn);
  ENTRY(CoreApiTable, hsa_signal_subtract_screlease_fn);
  ENTRY(CoreApiTable, hsa_signal_wait_relaxed_fn);
  ENTRY(CoreApiTable, hsa_signal_wait_scacquire_fn);
  ENTRY(CoreApiTable, hsa_executable_freeze_fn);
  ENTRY(CoreApiTable, hsa_executable_iterate_symbols_fn);
  ENTRY(CoreApiTable, hsa_executable_symbol_get_info_fn);
  ENTRY(AmdExtTable, hsa_amd_profiling_set_profiler_enabled_fn);
  ENTRY(AmdExtTable, hsa_amd_profiling_get_dispatch_time_fn);
  ENTRY(AmdExtTable, hsa_amd_signal_create_fn);
  ENTRY(AmdExtTable, hsa_amd_queue_intercept_create_fn);
  ENTRY(AmdExtTable, hsa_amd_queue_intercept_register_fn);
  ENTRY(AmdExtTable, hsa_amd_profiling_async_copy_enable_fn);
  ENTRY(AmdExtTable, hsa_amd_profiling_get_async_copy_time_fn);
  ENTRY(AmdExtTable, hsa_amd_memory_async_copy_fn);
  ENTRY(AmdExtTable, hsa_amd_memory_async_copy_rect_fn);
  ENTRY(AmdExtTable, hsa_amd_profiling_convert_tick_to_system_domain_fn);
  ENTRY(AmdExtTable, hsa_amd_memory_pool_get_info_fn);
  ENTRY(AmdExtTable, hsa_amd_agent_iterate_memory_pools_fn);
  ENTRY(AmdExtTable, hsa_amd_memory_pool_allocate_fn);
  ENTRY(AmdExtTable, hsa_amd_memory_pool_free_fn);
  ENTRY(AmdExtTable, hsa_amd_agents_allow_access_fn);
#if HSA_AMD_EXT_API_TABLE_MAJOR_VERSION >= 2
  ENTRY(AmdExtTable, hsa_amd_memory_async_copy_on_engine_fn);
#endif
  return 0;
}
