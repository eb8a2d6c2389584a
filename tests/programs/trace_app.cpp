// Raw-HSA program traced by tests/kernel_trace.rs. It knows exactly what it launched and prints it:
//   LAUNCHED kernel=<name> count=<n>
//   TOTAL <n>
// Usage: trace_app <code-object> <mode> [args]
//   threads T N     T threads, each with its own queue, N dispatches each
//   shared T N      T threads writing into one shared queue, N dispatches each
//   queue_first T N as threads, but the queues are made before the code object is loaded (as HIP does);
//                   prints QUEUE_CREATE_US, the time making them took
//   exit N [quick|_exit|handler_exit]  N dispatches, then exit(0) (or quick_exit(0), _exit(0)) with work in flight
//                  and no hsa_shut_down; handler_exit: exit(0), whose handler registered before hsa_init (so run
//                  after rprof's) takes 300 ms, as a runtime's teardown would, then ends the process by _exit(0)
//   latency N       N times: one kernel with an app signal, then a blocked wait on it; prints ROUNDTRIP_US
//   pairs N         N times: kernel with an app signal (not waited for), then a kernel without; one wait at the end
//   destroy N       N dispatches, then hsa_queue_destroy right away (work pending), then hsa_shut_down
//   exit_busy T N   T threads, each with its own queue, launch kernels without pause; once each has launched N,
//                   main calls exit(0) while they keep launching (prints LAUNCHED as of that moment)
//   gated N         one queue: a barrier-AND on a host signal, then N kernels with an app signal each; only
//                   then the host opens the gate and waits for the queue (prints GATED_SECONDS)
//   signal N SIG MS N dispatches, a barrier waited for (all done), MS ms of sleep, then raise(SIG) (TERM, INT or
//                   KILL) and sleep forever: the process ends however that signal ends it
//   bad_packets N   packets a tracer must not touch, each on its own queue (created with an error callback):
//                   queue 1: N kernels, a vendor-specific PM4-IB packet (empty IB) with a completion signal,
//                   N dispatches of a kernel object no loader knows (a copy of alpha's descriptor), a barrier;
//                   queue 2: a kernel, then a packet of undefined type 7; queue 3: a kernel, then a dispatch
//                   of kernel object 0. Prints QUEUE_ERROR queue=<q> status=<hsa_status_t> for each error
//                   callback (waits up to 5 s for queues 2 and 3), UNKNOWN_LAUNCHED N and the usual report.
//   destroy_gated N one queue: a barrier-AND on a host signal never opened, N kernels behind it, then
//                   hsa_queue_destroy (the kernels never run) and hsa_shut_down; prints DESTROY_SECONDS
//   fork N CHILD    N dispatches, then fork() without exec: the child (CHILD = none: no GPU use, some CPU work;
//                   clone: the same, the child made by the raw clone system call, so no pthread_atfork handler runs;
//                   hsa: calls into HSA after fork, undefined for ROCr: a signal, a kernel on the parent's queue,
//                   a 2 s bounded wait; prints CHILD_SIGNAL_CREATE, CHILD_DISPATCHED, CHILD_WAIT) prints CHILD_DONE and exit(0)s;
//                   the parent waits for it (20 s, then kills it), prints CHILD_STATUS, then N dispatches more
//   load T Q N [S]  T threads, each with Q queues of S slots (64), N calls per queue round robin: every 5th call a
//                   barrier-AND completing the thread's app signal, every 7th kernel with that signal, each waited
//                   for; prints RSS_KB warm=<at 10 %> end=<at the end> (thread 0's view)
//   events N [F] [Q] [late]  creates Q queues (1) and runs 64 kernels on the first (with `late`: the queues
//                   after the signals, no warm-up), then 5000 signals with hsa_signal_create(1, 0, NULL): ROCr makes each an
//                   interrupt signal holding one driver event while the driver has events, then falls back to
//                   plain signals; gives F (16) of the event signals back; N kernels on the first queue, every 2nd completing a
//                   held event signal waited for (blocked); prints EVENT_SIGNALS, PLAIN_SIGNALS, CREATE_STATUS
//   crossdep R      R rounds of a cross-queue dependency enqueued "backwards": on queue B a barrier-AND waiting
//                   for signal X, then a kernel; then on queue A the kernel that completes X. (A tracer that
//                   serialized kernels in enqueue order would deadlock here.)
// Kernels rotate alpha / beta_kernel / gamma_with_a_longer_name. Every 3rd dispatch carries an app completion
// signal that the thread waits on (blocked wait) right away; the rest carry none. Each thread ends with a
// barrier-AND packet whose signal it waits on, so it knows its queue drained.
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <hsa/amd_hsa_signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <string.h>
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#define HSA_TEST_PROGRAM "trace_app"
#include "hsa_test_util.h"

static hsa_agent_t g_gpu = {0}, g_cpu = {0};
static hsa_amd_memory_pool_t g_kernarg_pool;
static bool g_have_kernarg = false;

static hsa_status_t on_agent(hsa_agent_t a, void*) {
  hsa_device_type_t t;
  CHECK(hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &t));
  if (t == HSA_DEVICE_TYPE_GPU && g_gpu.handle == 0) g_gpu = a;
  if (t == HSA_DEVICE_TYPE_CPU && g_cpu.handle == 0) g_cpu = a;
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t on_pool(hsa_amd_memory_pool_t p, void*) {
  hsa_amd_segment_t seg;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &seg));
  if (seg != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
  uint32_t flags;
  CHECK(hsa_amd_memory_pool_get_info(p, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
  if ((flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) && !g_have_kernarg) {
    g_kernarg_pool = p;
    g_have_kernarg = true;
  }
  return HSA_STATUS_SUCCESS;
}

struct Kernel {
  const char* name;
  uint64_t object;
};
static Kernel g_kernels[3] = {{"alpha", 0}, {"beta_kernel", 0}, {"gamma_with_a_longer_name", 0}};
static void* g_kernarg = nullptr;

static void load(const char* path) {
  hsa_executable_t exec = hsa_test_load_code_object(g_gpu, path);
  for (auto& k : g_kernels) k.object = hsa_test_kernel_object(exec, g_gpu, k.name);
}

static uint16_t header(hsa_packet_type_t type, bool barrier) {
  return (uint16_t)((type << HSA_PACKET_HEADER_TYPE) | ((barrier ? 1 : 0) << HSA_PACKET_HEADER_BARRIER) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                    (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

static uint64_t reserve(hsa_queue_t* q) {
  uint64_t idx = hsa_queue_add_write_index_scacq_screl(q, 1);
  while (idx - hsa_queue_load_read_index_scacquire(q) >= q->size) std::this_thread::yield();
  return idx;
}

static void publish(hsa_queue_t* q, uint64_t idx, void* pkt, uint16_t hdr, uint16_t setup) {
  __atomic_store_n((uint32_t*)pkt, (uint32_t)hdr | ((uint32_t)setup << 16), __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, idx);
}

static void dispatch(hsa_queue_t* q, const Kernel& k, uint32_t grid, uint16_t wg, hsa_signal_t sig) {
  uint64_t idx = reserve(q);
  auto* p = (hsa_kernel_dispatch_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->workgroup_size_x = wg;
  p->workgroup_size_y = 1;
  p->workgroup_size_z = 1;
  p->grid_size_x = grid;
  p->grid_size_y = 1;
  p->grid_size_z = 1;
  p->kernel_object = k.object;
  p->kernarg_address = g_kernarg;
  p->completion_signal = sig;
  publish(q, idx, p, header(HSA_PACKET_TYPE_KERNEL_DISPATCH, false), 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
}

static void barrier(hsa_queue_t* q, hsa_signal_t done) {
  uint64_t idx = reserve(q);
  auto* p = (hsa_barrier_and_packet_t*)q->base_address + (idx & (q->size - 1));
  memset((char*)p + 4, 0, sizeof(*p) - 4);
  p->completion_signal = done;
  publish(q, idx, p, header(HSA_PACKET_TYPE_BARRIER_AND, true), 0);
}

static void wait_zero(hsa_signal_t s) {
  while (hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_EQ, 0, UINT64_MAX, HSA_WAIT_STATE_BLOCKED) != 0) {
  }
}

static hsa_queue_t* make_queue(uint32_t size = 256) {
  hsa_queue_t* q;
  CHECK(hsa_queue_create(g_gpu, size, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &q));
  return q;
}

static std::atomic<long> g_count[3];

static void report();

static std::atomic<int> g_queue_errors[4];
static std::atomic<int> g_queue_status[4];

static void on_queue_error(hsa_status_t status, hsa_queue_t*, void* data) {
  int q = (int)(intptr_t)data;
  if (q < 0 || q > 3) return;
  g_queue_status[q] = (int)status;
  g_queue_errors[q]++;
}

static hsa_queue_t* make_queue_reporting(int id) {
  hsa_queue_t* q;
  CHECK(hsa_queue_create(g_gpu, 256, HSA_QUEUE_TYPE_MULTI, on_queue_error, (void*)(intptr_t)id, UINT32_MAX,
                         UINT32_MAX, &q));
  return q;
}

// Writes a raw 64-byte packet (the first 4 bytes, header and setup, last).
static void raw_packet(hsa_queue_t* q, const uint8_t (&bytes)[64]) {
  uint64_t idx = reserve(q);
  auto* p = (uint8_t*)q->base_address + 64 * (idx & (q->size - 1));
  memcpy(p + 4, bytes + 4, 60);
  uint32_t first;
  memcpy(&first, bytes, 4);
  __atomic_store_n((uint32_t*)p, first, __ATOMIC_RELEASE);
  hsa_signal_store_screlease(q->doorbell_signal, idx);
}

static void bad_packets(int n) {
  hsa_signal_t done, vendor_done;
  CHECK(hsa_signal_create(1, 0, nullptr, &done));
  CHECK(hsa_signal_create(1, 0, nullptr, &vendor_done));
  hsa_queue_t* q1 = make_queue_reporting(1);
  for (int i = 0; i < n; i++) {
    dispatch(q1, g_kernels[0], 64, 64, hsa_signal_t{0});
    g_count[0]++;
  }
  // AMD vendor-specific packet, format PM4 IB (1), an empty indirect buffer, a completion signal at byte 56.
  uint8_t vendor[64] = {0};
  uint16_t vh = header(HSA_PACKET_TYPE_VENDOR_SPECIFIC, true);
  memcpy(vendor, &vh, 2);
  vendor[2] = 1;
  memcpy(vendor + 56, &vendor_done.handle, 8);
  raw_packet(q1, vendor);
  // A kernel object nothing loaded: a copy of alpha's descriptor in memory of the app's own.
  void* copy = nullptr;
  CHECK(hsa_amd_memory_pool_allocate(g_kernarg_pool, 4096, 0, &copy));
  CHECK(hsa_amd_agents_allow_access(1, &g_gpu, nullptr, copy));
  memcpy(copy, (const void*)g_kernels[0].object, 64);
  Kernel unknown = {"unknown", (uint64_t)copy};
  for (int i = 0; i < n; i++) dispatch(q1, unknown, 64, 64, hsa_signal_t{0});
  printf("UNKNOWN_LAUNCHED %d\n", n);
  barrier(q1, done);
  wait_zero(done);
  wait_zero(vendor_done);
  // Queue 2: a packet of undefined type 7. Queue 3: a dispatch of kernel object 0.
  hsa_queue_t* q2 = make_queue_reporting(2);
  dispatch(q2, g_kernels[1], 128, 64, hsa_signal_t{0});
  g_count[1]++;
  uint8_t undefined[64] = {0};
  uint16_t uh = (uint16_t)(7 << HSA_PACKET_HEADER_TYPE);
  memcpy(undefined, &uh, 2);
  raw_packet(q2, undefined);
  hsa_queue_t* q3 = make_queue_reporting(3);
  dispatch(q3, g_kernels[2], 192, 64, hsa_signal_t{0});
  g_count[2]++;
  Kernel none = {"none", 0};
  dispatch(q3, none, 64, 64, hsa_signal_t{0});
  auto t0 = std::chrono::steady_clock::now();
  while ((g_queue_errors[2] == 0 || g_queue_errors[3] == 0) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int q = 1; q <= 3; q++)
    if (g_queue_errors[q]) printf("QUEUE_ERROR queue=%d status=%#x\n", q, g_queue_status[q].load());
  report();
  CHECK(hsa_queue_destroy(q1));
  hsa_queue_destroy(q2);
  hsa_queue_destroy(q3);
}

// One thread's work: n dispatches on q; every 3rd carries a signal the thread waits on.
static void work(hsa_queue_t* q, int n, int salt) {
  hsa_signal_t own;
  CHECK(hsa_signal_create(1, 0, nullptr, &own));
  for (int i = 0; i < n; i++) {
    int k = (i + salt) % 3;
    bool with_signal = i % 3 == 2;
    if (with_signal) hsa_signal_store_screlease(own, 1);
    dispatch(q, g_kernels[k], 64u * (k + 1), 64, with_signal ? own : hsa_signal_t{0});
    g_count[k]++;
    if (with_signal) wait_zero(own);
  }
  hsa_signal_store_screlease(own, 1);
  barrier(q, own);
  wait_zero(own);
  CHECK(hsa_signal_destroy(own));
}

static void report() {
  long total = 0;
  for (int k = 0; k < 3; k++) {
    printf("LAUNCHED kernel=%s count=%ld grid=%u\n", g_kernels[k].name, g_count[k].load(), 64u * (k + 1));
    total += g_count[k];
  }
  printf("TOTAL %ld\n", total);
  fflush(stdout);
}

// `fork N CHILD`: see the usage at the top.
static int fork_mode(int n, const std::string& child) {
  hsa_queue_t* q = make_queue();
  work(q, n, 0);
  fflush(stdout);
  fflush(stderr);
  // `clone`: a child made by the raw clone system call, as fork() makes it but without fork's handlers
  // (pthread_atfork), as some launchers and runtimes do.
  pid_t pid = child == "clone" ? (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) : fork();
  if (pid < 0) {
    perror("fork");
    return 1;
  }
  if (pid == 0) {
    if (child == "hsa") {
      hsa_signal_t s;
      hsa_status_t st = hsa_signal_create(1, 0, nullptr, &s);
      printf("CHILD_SIGNAL_CREATE %#x\n", (unsigned)st);
      fflush(stdout);
      if (st == HSA_STATUS_SUCCESS) {
        dispatch(q, g_kernels[0], 64, 64, s);
        printf("CHILD_DISPATCHED\n");
        fflush(stdout);
        uint64_t freq = 0;
        hsa_system_get_info(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, &freq);
        hsa_signal_value_t v =
            hsa_signal_wait_scacquire(s, HSA_SIGNAL_CONDITION_LT, 1, 2 * freq, HSA_WAIT_STATE_ACTIVE);
        printf("CHILD_WAIT %ld\n", (long)v);
      }
    } else {
      volatile unsigned long x = 0;
      for (unsigned long i = 0; i < 10000000; i++) x += i;
    }
    printf("CHILD_DONE\n");
    fflush(stdout);
    exit(0);
  }
  int status = 0;
  auto t0 = std::chrono::steady_clock::now();
  bool killed = false;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (killed)
    printf("CHILD_STATUS hung\n");
  else if (WIFEXITED(status))
    printf("CHILD_STATUS exit=%d\n", WEXITSTATUS(status));
  else
    printf("CHILD_STATUS signal=%d\n", WTERMSIG(status));
  work(q, n, 1);
  report();
  CHECK(hsa_queue_destroy(q));
  CHECK(hsa_shut_down());
  return 0;
}

static long rss_kb() {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// `load T Q N [S]`: see the usage at the top.
static int load_mode(int threads, int queues, long n, uint32_t size) {
  static std::atomic<long> warm_kb{0};
  std::vector<std::thread> ts;
  // Each thread's queues, destroyed from this thread once all are done: ROCr 5.2.3 can hang destroying queues
  // from several threads at once (docs/emulated-gpu.md, "A lost wake-up that was ROCr's").
  std::vector<std::vector<hsa_queue_t*>> all_queues(threads);
  for (int t = 0; t < threads; t++) {
    ts.emplace_back([=, &all_queues] {
      std::vector<hsa_queue_t*>& qs = all_queues[t];
      for (int i = 0; i < queues; i++) qs.push_back(make_queue(size));
      hsa_signal_t app;
      CHECK(hsa_signal_create(1, 0, nullptr, &app));
      long calls = n * queues;
      for (long c = 0; c < calls; c++) {
        hsa_queue_t* q = qs[c % queues];
        int k = (int)((c + t) % 3);
        if (c % 5 == 4) {
          hsa_signal_store_screlease(app, 1);
          barrier(q, app);
          wait_zero(app);
        } else if (c % 7 == 6) {
          hsa_signal_store_screlease(app, 1);
          dispatch(q, g_kernels[k], 64u * (k + 1), 64, app);
          g_count[k]++;
          wait_zero(app);
        } else {
          dispatch(q, g_kernels[k], 64u * (k + 1), 64, hsa_signal_t{0});
          g_count[k]++;
        }
        if (t == 0 && c == calls / 10) warm_kb = rss_kb();
      }
      for (auto q : qs) {
        hsa_signal_store_screlease(app, 1);
        barrier(q, app);
        wait_zero(app);
      }
      CHECK(hsa_signal_destroy(app));
    });
  }
  for (auto& t : ts) t.join();
  for (auto& qs : all_queues)
    for (auto q : qs) CHECK(hsa_queue_destroy(q));
  printf("RSS_KB warm=%ld end=%ld\n", warm_kb.load(), rss_kb());
  report();
  CHECK(hsa_shut_down());
  return 0;
}

// Whether `s` holds a driver event (ROCr's interrupt signal: its amd_signal_t has an event mailbox).
static bool has_event(hsa_signal_t s) {
  return ((const amd_signal_t*)(uintptr_t)s.handle)->event_mailbox_ptr != 0;
}

// `events N [F]`: see the usage at the top.
static int events_mode(int n, int give_back, int queues, bool late) {
  std::vector<hsa_queue_t*> qs;
  if (!late)
    for (int i = 0; i < queues; i++) qs.push_back(make_queue());
  // Warm-up on the first queue (a tracer's signal pool grows here): 64 kernels, then a barrier waited for.
  if (!late) {
    hsa_signal_t warm;
    CHECK(hsa_signal_create(1, 0, nullptr, &warm));
    for (int i = 0; i < 64; i++) {
      dispatch(qs[0], g_kernels[i % 3], 64u * (i % 3 + 1), 64, hsa_signal_t{0});
      g_count[i % 3]++;
    }
    barrier(qs[0], warm);
    wait_zero(warm);
    CHECK(hsa_signal_destroy(warm));
  }
  std::vector<hsa_signal_t> held, plain;
  hsa_status_t st = HSA_STATUS_SUCCESS;
  while (held.size() + plain.size() < 5000) {
    hsa_signal_t s;
    st = hsa_signal_create(1, 0, nullptr, &s);
    if (st != HSA_STATUS_SUCCESS) break;
    (has_event(s) ? held : plain).push_back(s);
  }
  for (int i = 0; i < give_back && !held.empty(); i++) {
    CHECK(hsa_signal_destroy(held.back()));
    held.pop_back();
  }
  printf("EVENT_SIGNALS %zu\n", held.size());
  printf("PLAIN_SIGNALS %zu\n", plain.size());
  printf("CREATE_STATUS %#x\n", (unsigned)st);
  fflush(stdout);
  if (late)
    for (int i = 0; i < queues; i++) {
      hsa_queue_t* x;
      hsa_status_t qst = hsa_queue_create(g_gpu, 256, HSA_QUEUE_TYPE_MULTI, nullptr, nullptr, UINT32_MAX, UINT32_MAX, &x);
      printf("LATE_QUEUE_STATUS %#x\n", (unsigned)qst);
      fflush(stdout);
      if (qst != HSA_STATUS_SUCCESS) return 2;
      qs.push_back(x);
    }
  hsa_queue_t* q = qs[0];
  for (int i = 0; i < n; i++) {
    int k = i % 3;
    if (i % 2 == 0 && !held.empty()) {
      // From both ends: the first events created and the last ones (the driver's highest ids and slots).
      size_t n = held.size(), j = (size_t)i % n;
      hsa_signal_t s = i % 4 == 0 ? held[j] : held[n - 1 - j];
      hsa_signal_store_screlease(s, 1);
      dispatch(q, g_kernels[k], 64u * (k + 1), 64, s);
      g_count[k]++;
      wait_zero(s);
    } else {
      dispatch(q, g_kernels[k], 64u * (k + 1), 64, hsa_signal_t{0});
      g_count[k]++;
    }
  }
  hsa_signal_t done = held.empty() ? plain[0] : held[0];
  hsa_signal_store_screlease(done, 1);
  barrier(q, done);
  wait_zero(done);
  report();
  for (auto s : held) CHECK(hsa_signal_destroy(s));
  for (auto s : plain) CHECK(hsa_signal_destroy(s));
  for (auto x : qs) CHECK(hsa_queue_destroy(x));
  CHECK(hsa_shut_down());
  return 0;
}

// The thread ids of this process (/proc/self/task).
static std::vector<long> task_ids() {
  std::vector<long> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ids.push_back(atol(e->d_name));
    }
    closedir(d);
  }
  return ids;
}

// A thread's name (/proc/self/task/TID/comm), without the newline.
static std::string task_name(long tid) {
  char path[64], buf[64] = {0};
  snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
  if (FILE* f = fopen(path, "r")) {
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
  }
  buf[strcspn(buf, "\n")] = 0;
  return buf;
}

// Field `n` (19: nice, 41: scheduling policy) of /proc/self/task/TID/stat,
// counted after the parenthesised name, which may hold spaces.
static int task_stat_field(long tid, int n) {
  char path[64], buf[1024] = {0};
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE* f = fopen(path, "r");
  if (!f) return 999;
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  const char* p = strrchr(buf, ')');
  if (!p) return 999;
  // After ") ": state is field 3.
  int field = 2;
  for (; *p && field < n; p++) {
    if (*p == ' ') field++;
  }
  return atoi(p);
}

// An exit handler that outlasts rprof's and then skips the rest of exit (no later handler, no destructor).
static void slow_handler_then_underscore_exit() {
  usleep(300 * 1000);
  _exit(0);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <code-object> threads|shared|exit [args]\n", argv[0]);
    return 1;
  }
  std::string mode = argv[2];
  if (mode == "exit" && argc > 4 && std::string(argv[4]) == "handler_exit") atexit(slow_handler_then_underscore_exit);
  CHECK(hsa_init());
  CHECK(hsa_iterate_agents(on_agent, nullptr));
  if (g_gpu.handle == 0) {
    fprintf(stderr, "no GPU\n");
    return 3;
  }
  CHECK(hsa_amd_agent_iterate_memory_pools(g_cpu, on_pool, nullptr));
  auto load_kernels = [&] {
    load(argv[1]);
    if (g_have_kernarg) {
      CHECK(hsa_amd_memory_pool_allocate(g_kernarg_pool, 4096, 0, &g_kernarg));
      CHECK(hsa_amd_agents_allow_access(1, &g_gpu, nullptr, g_kernarg));
      memset(g_kernarg, 0, 4096);
    }
  };
  if (mode == "queue_first") {
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    int per = argc > 4 ? atoi(argv[4]) : 100;
    auto created = std::chrono::steady_clock::now();
    std::vector<hsa_queue_t*> queues;
    for (int t = 0; t < threads; t++) queues.push_back(make_queue());
    long long us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - created).count();
    printf("QUEUE_CREATE_US %lld\n", us);
    load_kernels();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) ts.emplace_back(work, queues[t], per, t);
    for (auto& t : ts) t.join();
    report();
    for (auto q : queues) CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
    return 0;
  }
  load_kernels();
  if (mode == "threads" || mode == "shared") {
    int threads = argc > 3 ? atoi(argv[3]) : 4;
    int per = argc > 4 ? atoi(argv[4]) : 100;
    std::vector<hsa_queue_t*> queues;
    hsa_queue_t* shared = mode == "shared" ? make_queue() : nullptr;
    for (int t = 0; t < threads; t++) queues.push_back(shared ? shared : make_queue());
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) ts.emplace_back(work, queues[t], per, t);
    for (auto& t : ts) t.join();
    report();
    if (shared) {
      CHECK(hsa_queue_destroy(shared));
    } else {
      for (auto q : queues) CHECK(hsa_queue_destroy(q));
    }
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "latency" || mode == "pairs") {
    int n = argc > 3 ? atoi(argv[3]) : 200;
    hsa_queue_t* q = make_queue();
    // latency: one signal reset before each kernel and waited for; pairs: one counter signal that every
    // signalled kernel decrements once, waited for at the end.
    hsa_signal_t s;
    CHECK(hsa_signal_create(mode == "pairs" ? n : 1, 0, nullptr, &s));
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
      if (mode == "latency") hsa_signal_store_screlease(s, 1);
      dispatch(q, g_kernels[0], 64, 64, s);
      g_count[0]++;
      if (mode == "latency") {
        wait_zero(s);
      } else {
        dispatch(q, g_kernels[1], 128, 64, hsa_signal_t{0});
        g_count[1]++;
      }
    }
    wait_zero(s);
    hsa_signal_store_screlease(s, 1);
    barrier(q, s);
    wait_zero(s);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    printf("ROUNDTRIP_US %.1f\n", us / n);
    report();
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "destroy") {
    int n = argc > 3 ? atoi(argv[3]) : 100;
    hsa_queue_t* q = make_queue();
    for (int i = 0; i < n; i++) {
      dispatch(q, g_kernels[i % 3], 64u * (i % 3 + 1), 64, hsa_signal_t{0});
      g_count[i % 3]++;
    }
    report();
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "bad_packets") {
    bad_packets(argc > 3 ? atoi(argv[3]) : 10);
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "destroy_gated") {
    int n = argc > 3 ? atoi(argv[3]) : 10;
    hsa_queue_t* q = make_queue();
    hsa_signal_t gate;
    CHECK(hsa_signal_create(1, 0, nullptr, &gate));
    uint64_t idx = reserve(q);
    auto* p = (hsa_barrier_and_packet_t*)q->base_address + (idx & (q->size - 1));
    memset((char*)p + 4, 0, sizeof(*p) - 4);
    p->dep_signal[0] = gate;
    publish(q, idx, p, header(HSA_PACKET_TYPE_BARRIER_AND, true), 0);
    for (int i = 0; i < n; i++) {
      dispatch(q, g_kernels[i % 3], 64u * (i % 3 + 1), 64, hsa_signal_t{0});
      g_count[i % 3]++;
    }
    report();
    auto t0 = std::chrono::steady_clock::now();
    CHECK(hsa_queue_destroy(q));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("DESTROY_SECONDS %.3f\n", s);
    CHECK(hsa_signal_destroy(gate));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "crossdep") {
    int rounds = argc > 3 ? atoi(argv[3]) : 20;
    hsa_queue_t* a = make_queue();
    hsa_queue_t* b = make_queue();
    hsa_signal_t x, done;
    CHECK(hsa_signal_create(1, 0, nullptr, &x));
    CHECK(hsa_signal_create(1, 0, nullptr, &done));
    for (int r = 0; r < rounds; r++) {
      hsa_signal_store_screlease(x, 1);
      hsa_signal_store_screlease(done, 1);
      // Queue B: wait for X, then kernel 1, then complete `done`.
      uint64_t idx = reserve(b);
      auto* p = (hsa_barrier_and_packet_t*)b->base_address + (idx & (b->size - 1));
      memset((char*)p + 4, 0, sizeof(*p) - 4);
      p->dep_signal[0] = x;
      publish(b, idx, p, header(HSA_PACKET_TYPE_BARRIER_AND, true), 0);
      dispatch(b, g_kernels[1], 128, 64, hsa_signal_t{0});
      g_count[1]++;
      barrier(b, done);
      // Queue A: the kernel that completes X.
      dispatch(a, g_kernels[0], 64, 64, x);
      g_count[0]++;
      wait_zero(done);
    }
    report();
    CHECK(hsa_queue_destroy(a));
    CHECK(hsa_queue_destroy(b));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "fork") return fork_mode(argc > 3 ? atoi(argv[3]) : 10, argc > 4 ? argv[4] : "none");
  if (mode == "load")
    return load_mode(argc > 3 ? atoi(argv[3]) : 8, argc > 4 ? atoi(argv[4]) : 4, argc > 5 ? atol(argv[5]) : 100,
                     argc > 6 ? (uint32_t)atoi(argv[6]) : 64);
  if (mode == "events")
    return events_mode(argc > 3 ? atoi(argv[3]) : 100, argc > 4 ? atoi(argv[4]) : 16, argc > 5 ? atoi(argv[5]) : 1,
                       argc > 6 && std::string(argv[6]) == "late");
  if (mode == "exit_busy") {
    int threads = argc > 3 ? atoi(argv[3]) : 3;
    int n = argc > 4 ? atoi(argv[4]) : 200;
    static std::atomic<long> launched[16];
    for (int t = 0; t < threads && t < 16; t++) {
      hsa_queue_t* q = make_queue();
      std::thread([q, t] {
        for (long i = 0;; i++) {
          dispatch(q, g_kernels[(i + t) % 3], 64u * ((i + t) % 3 + 1), 64, hsa_signal_t{0});
          launched[t]++;
        }
      }).detach();
    }
    for (int t = 0; t < threads && t < 16; t++)
      while (launched[t].load() < n) std::this_thread::yield();
    long total = 0;
    for (int t = 0; t < threads && t < 16; t++) total += launched[t].load();
    printf("AT_EXIT_LAUNCHED %ld\n", total);
    fflush(stdout);
    exit(0);
  }
  if (mode == "gated") {
    int n = argc > 3 ? atoi(argv[3]) : 100;
    hsa_queue_t* q = make_queue();
    hsa_signal_t gate, sig, done;
    CHECK(hsa_signal_create(1, 0, nullptr, &gate));
    CHECK(hsa_signal_create(n, 0, nullptr, &sig));
    CHECK(hsa_signal_create(1, 0, nullptr, &done));
    auto t0 = std::chrono::steady_clock::now();
    uint64_t idx = reserve(q);
    auto* p = (hsa_barrier_and_packet_t*)q->base_address + (idx & (q->size - 1));
    memset((char*)p + 4, 0, sizeof(*p) - 4);
    p->dep_signal[0] = gate;
    publish(q, idx, p, header(HSA_PACKET_TYPE_BARRIER_AND, true), 0);
    for (int i = 0; i < n; i++) {
      dispatch(q, g_kernels[i % 3], 64u * (i % 3 + 1), 64, sig);
      g_count[i % 3]++;
    }
    hsa_signal_store_screlease(gate, 0);
    wait_zero(sig);
    barrier(q, done);
    wait_zero(done);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("GATED_SECONDS %.3f\n", s);
    report();
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "signal") {
    int n = argc > 3 ? atoi(argv[3]) : 100;
    std::string which = argc > 4 ? argv[4] : "TERM";
    int ms = argc > 5 ? atoi(argv[5]) : 0;
    int sig = which == "INT" ? SIGINT : which == "KILL" ? SIGKILL : SIGTERM;
    hsa_queue_t* q = make_queue();
    for (int i = 0; i < n; i++) {
      dispatch(q, g_kernels[i % 3], 64u * (i % 3 + 1), 64, hsa_signal_t{0});
      g_count[i % 3]++;
    }
    hsa_signal_t done;
    CHECK(hsa_signal_create(1, 0, nullptr, &done));
    barrier(q, done);
    wait_zero(done);
    report();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    raise(sig);
    for (;;) pause();
  }
  if (mode == "priorities") {
    // After a few kernels (rprof's threads exist by then): the nice value
    // and scheduling policy of this thread and of every thread whose name
    // starts with "rprof-".
    hsa_queue_t* q = make_queue();
    work(q, 3, 0);
    long me = syscall(SYS_gettid);
    printf("PRIORITY main %d %d\n", task_stat_field(me, 19), task_stat_field(me, 41));
    for (long tid : task_ids()) {
      std::string name = task_name(tid);
      if (name.rfind("rprof-", 0) == 0)
        printf("PRIORITY %s %d %d\n", name.c_str(), task_stat_field(tid, 19), task_stat_field(tid, 41));
    }
    report();
    CHECK(hsa_queue_destroy(q));
    CHECK(hsa_shut_down());
    return 0;
  }
  if (mode == "exit") {
    int n = argc > 3 ? atoi(argv[3]) : 500;
    hsa_queue_t* q = make_queue();
    for (int i = 0; i < n; i++) {
      dispatch(q, g_kernels[i % 3], 64u * (i % 3 + 1), 64, hsa_signal_t{0});
      g_count[i % 3]++;
    }
    report();
    if (argc > 4 && std::string(argv[4]) == "quick") quick_exit(0);
    if (argc > 4 && std::string(argv[4]) == "_exit") _exit(0);
    exit(0);
  }
  fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 1;
}
