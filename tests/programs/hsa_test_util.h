// Shared by the raw-HSA test programs in this directory (trace_app.cpp,
// dispatch_bench.cpp, rpc_doorbell.cpp): status checks and code-object
// loading. Header-only; each program includes it once.
#ifndef RPROF_HSA_TEST_UTIL_H
#define RPROF_HSA_TEST_UTIL_H

#include <hsa/hsa.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

// Program name printed in front of error messages.
#ifndef HSA_TEST_PROGRAM
#define HSA_TEST_PROGRAM "hsa-test"
#endif

// Exits with status 2 and a message naming the call when an HSA call fails.
#define CHECK(x)                                                                                        \
  do {                                                                                                  \
    hsa_status_t status_ = (x);                                                                         \
    if (status_ != HSA_STATUS_SUCCESS) {                                                                \
      const char* msg_ = "?";                                                                           \
      hsa_status_string(status_, &msg_);                                                                \
      fprintf(stderr, HSA_TEST_PROGRAM ": %s:%d: %s: 0x%x %s\n", __FILE__, __LINE__, #x, (unsigned)status_, \
              msg_);                                                                                    \
      exit(2);                                                                                          \
    }                                                                                                   \
  } while (0)

// Loads and freezes the code object at `path` for `agent`. Exits with status
// 2 (like a failed HSA call) and `hint` if the file cannot be read.
static inline hsa_executable_t hsa_test_load_code_object(hsa_agent_t agent, const char* path,
                                                         const char* hint = "") {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, HSA_TEST_PROGRAM ": cannot open code object %s: %s%s\n", path, strerror(errno), hint);
    exit(2);
  }
  std::vector<char> bytes;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  fclose(f);
  hsa_code_object_reader_t reader;
  CHECK(hsa_code_object_reader_create_from_memory(bytes.data(), bytes.size(), &reader));
  hsa_executable_t exec;
  CHECK(hsa_executable_create_alt(HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, nullptr, &exec));
  CHECK(hsa_executable_load_agent_code_object(exec, agent, reader, nullptr, nullptr));
  CHECK(hsa_executable_freeze(exec, nullptr));
  CHECK(hsa_code_object_reader_destroy(reader));
  return exec;
}

// The kernel object of kernel `name` (without ".kd") in `exec`.
static inline uint64_t hsa_test_kernel_object(hsa_executable_t exec, hsa_agent_t agent, const char* name) {
  std::string sym = std::string(name) + ".kd";
  hsa_executable_symbol_t s;
  CHECK(hsa_executable_get_symbol_by_name(exec, sym.c_str(), &agent, &s));
  uint64_t object;
  CHECK(hsa_executable_symbol_get_info(s, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, &object));
  return object;
}

#endif
