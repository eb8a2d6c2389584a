/* Query-only libhsa-amd-aqlprofile64.so.1 for the rocprofv3 peer root (bench section `peer`; see
 * docs/performance.md "rocprofv3 side by side"). scripts/bench.sh compiles it inside the peer root and the
 * bench puts it first on rocprofv3's LD_LIBRARY_PATH, ahead of the recipe's all-failing stub (W6).
 * Why: rocprofv3's tool builds counter metadata for every GPU agent at start-up (tool_init ->
 * metadata::init -> rocprofiler_iterate_counter_dimensions), whatever the options, and the SDK throws
 * (std::terminate) when aqlprofile cannot answer; AMD's real aqlprofile answers these on a real GPU.
 * Written from the declarations in rocprofiler-sdk's aql/aql_profile_v2.h; it answers the agent registration
 * and counter-metadata queries (block id 0, one instance, every event valid, one INSTANCE dimension of extent 1), so that tool_init completes; every
 * packet-building call (counter collection, thread trace) still fails as in the recipe's stub. */
#include <stdint.h>
#include <stdbool.h>
#define ERR 0x1000 /* HSA_STATUS_ERROR */
#define API __attribute__((visibility("default")))
typedef struct { uint64_t handle; } agent_handle;
typedef struct { const char* name; uint32_t id; uint32_t instance_count; } id_query;
static uint64_t next_agent = 1;
API int aqlprofile_register_agent(agent_handle* h, const void* info) { (void)info; if (!h) return ERR; h->handle = __atomic_fetch_add(&next_agent, 1, __ATOMIC_RELAXED); return 0; }
API int aqlprofile_get_pmc_info(const void* profile, int attribute, void* value) {
  (void)profile;
  if (!value) return ERR;
  if (attribute == 5) { id_query* q = value; q->id = 0; q->instance_count = 1; return 0; }  /* BLOCK_ID */
  if (attribute == 4) { *(uint32_t*)value = 4; return 0; }                                 /* BLOCK_COUNTERS */
  return ERR;
}
API int aqlprofile_validate_pmc_event(agent_handle a, const void* ev, bool* result) { (void)a; (void)ev; if (!result) return ERR; *result = true; return 0; }
/* One dimension, "INSTANCE" (id 0), of extent 1 for every event: the metadata a single-instance block has. */
typedef int (*coord_cb)(int position, int id, int extent, int coordinate, const char* name, void* ud);
typedef int (*name_cb)(int id, const char* name, void* ud);
/* aqlprofile_pmc_event_t (16 bytes) is passed by value in two registers. */
API int aqlprofile_iterate_event_coord(agent_handle a, uint64_t ev0, uint64_t ev1, uint64_t sample, coord_cb cb, void* ud) {
  (void)a; (void)ev0; (void)ev1; (void)sample;
  return cb ? cb(0, 0, 1, 0, "INSTANCE", ud) : ERR;
}
API int aqlprofile_iterate_event_ids(name_cb cb, void* ud) { return cb ? cb(0, "INSTANCE", ud) : ERR; }
#define S API int
#define E { return ERR; }
S aqlprofile_pmc_iterate_data() E
S aqlprofile_pmc_create_packets() E
API void aqlprofile_pmc_delete_packets() {}
S aqlprofile_att_iterate_data() E
S aqlprofile_att_create_packets() E
API void aqlprofile_att_delete_packets() {}
S aqlprofile_att_codeobj_marker() E
S hsa_ven_amd_aqlprofile_validate_event() E
S hsa_ven_amd_aqlprofile_start() E
S hsa_ven_amd_aqlprofile_stop() E
S hsa_ven_amd_aqlprofile_read() E
S hsa_ven_amd_aqlprofile_legacy_get_pm4() E
S hsa_ven_amd_aqlprofile_att_marker() E
S hsa_ven_amd_aqlprofile_get_info() E
S hsa_ven_amd_aqlprofile_iterate_data() E
S hsa_ven_amd_aqlprofile_error_string(const char** s) { if (s) *s = "aqlprofile query-only stub (peer-rocprofv3)"; return 0; }
S hsa_ven_amd_aqlprofile_iterate_event_ids() E
S hsa_ven_amd_aqlprofile_iterate_event_coord() E
