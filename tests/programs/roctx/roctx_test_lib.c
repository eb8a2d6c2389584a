// A test ROCTx library for the runtimes whose root ships none (written by rprof from ROCTx's documented API:
// roctx.h's declarations and the documented return values). Built as libroctx64.so.4 with the ROCTX_4.1 symbol
// version of Debian's libroctx64-4, plus roctxNameOsThread of the newer rocprofiler-sdk-roctx API, so the test
// program links to it exactly as it would to the shipped library. It counts the calls it receives
// (roctx_test_calls) so a test can check that an interposer passed every call on.
#include <stdatomic.h>
#include <stdint.h>

static _Thread_local int depth;
static atomic_ulong next_id = 1;
static atomic_ulong calls;

void roctxMarkA(const char* message) {
  (void)message;
  atomic_fetch_add(&calls, 1);
}

int roctxRangePushA(const char* message) {
  (void)message;
  atomic_fetch_add(&calls, 1);
  return depth++;
}

int roctxRangePop(void) {
  atomic_fetch_add(&calls, 1);
  if (depth == 0) return -1;
  return --depth;
}

uint64_t roctxRangeStartA(const char* message) {
  (void)message;
  atomic_fetch_add(&calls, 1);
  return atomic_fetch_add(&next_id, 1);
}

void roctxRangeStop(uint64_t id) {
  (void)id;
  atomic_fetch_add(&calls, 1);
}

int roctxNameOsThread(const char* name) {
  (void)name;
  atomic_fetch_add(&calls, 1);
  return 0;
}

unsigned long roctx_test_calls(void) { return atomic_load(&calls); }
