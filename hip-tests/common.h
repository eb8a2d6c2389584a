// Shared helpers of the hip-tests programs: error checking, argument parsing
// and the machine-readable LAUNCHED report that the tests compare traces with.
//
// Report format (one line each, written with a single write(2) so that lines
// of several processes or threads never interleave):
//
//   LAUNCHED pid=<pid> [rank=<r>] count=<n> grid=<x>,<y>,<z> workgroup=<x>,<y>,<z> kernel=<name>
//   LAUNCHED pid=<pid> [rank=<r>] total=<n>
//
// `grid` is in work-items (blocks x block size, as in the AQL packet and in
// rocprofv3's Grid_Size columns); every launch of one kernel name uses the same
// geometry. `kernel=` is always the last field: demangled names contain spaces.
// The name is written exactly as a tracer shows it (Itanium demangling, as
// c++filt prints it), e.g. `void graph_node<3>(int*, int)`.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <unistd.h>

#define HIP_CHECK(expr)                                                                      \
    do {                                                                                     \
        hipError_t hip_check_status_ = (expr);                                               \
        if (hip_check_status_ != hipSuccess) {                                               \
            std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #expr,  \
                         hipGetErrorString(hip_check_status_), (int)hip_check_status_);      \
            std::exit(1);                                                                    \
        }                                                                                    \
    } while (0)

// Checks the launch that was just made (a bad configuration shows up here).
#define HIP_CHECK_LAUNCH() HIP_CHECK(hipGetLastError())

namespace hiptests {

// Writes one whole line to stdout with a single write(2).
inline void emit_line(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    std::fflush(stdout);
    const char* p = buf;
    while (n > 0) {
        ssize_t w = ::write(STDOUT_FILENO, p, (size_t)n);
        if (w <= 0) return;
        p += w;
        n -= (int)w;
    }
}

// Counts launches per kernel name (thread-safe) and prints the report.
class LaunchLog {
  public:
    // `rank` < 0: no rank field.
    explicit LaunchLog(int rank = -1) : rank_(rank) {}

    // Records n launches of `kernel` with `blocks` x `block` (n == 0 records
    // nothing). One name, one geometry: a mismatch is a bug in the program.
    void add(const std::string& kernel, dim3 blocks, dim3 block, long long n = 1) {
        if (n == 0) return;
        std::lock_guard<std::mutex> g(mu_);
        Entry& e = counts_[kernel];
        const Geometry geo{{blocks.x * block.x, blocks.y * block.y, blocks.z * block.z}, {block.x, block.y, block.z}};
        if (e.count != 0 && !(e.geo == geo)) {
            std::fprintf(stderr, "LaunchLog: %s launched with two geometries\n", kernel.c_str());
            std::abort();
        }
        e.geo = geo;
        e.count += n;
    }

    long long total() const {
        std::lock_guard<std::mutex> g(mu_);
        long long t = 0;
        for (const auto& kv : counts_) t += kv.second.count;
        return t;
    }

    void print() const {
        std::lock_guard<std::mutex> g(mu_);
        char prefix[64];
        if (rank_ >= 0)
            std::snprintf(prefix, sizeof prefix, "pid=%d rank=%d", (int)getpid(), rank_);
        else
            std::snprintf(prefix, sizeof prefix, "pid=%d", (int)getpid());
        long long t = 0;
        for (const auto& kv : counts_) {
            const Geometry& g = kv.second.geo;
            emit_line("LAUNCHED %s count=%lld grid=%u,%u,%u workgroup=%u,%u,%u kernel=%s", prefix, kv.second.count,
                      g.grid[0], g.grid[1], g.grid[2], g.wg[0], g.wg[1], g.wg[2], kv.first.c_str());
            t += kv.second.count;
        }
        emit_line("LAUNCHED %s total=%lld", prefix, t);
    }

  private:
    struct Geometry {
        unsigned grid[3];
        unsigned wg[3];
        bool operator==(const Geometry& o) const {
            return std::memcmp(grid, o.grid, sizeof grid) == 0 && std::memcmp(wg, o.wg, sizeof wg) == 0;
        }
    };
    struct Entry {
        long long count = 0;
        Geometry geo{};
    };
    int rank_;
    mutable std::mutex mu_;
    std::map<std::string, Entry> counts_;
};

// Parses the common command line: positional integers (with defaults) and
// `--verify` anywhere. Device results are only meaningful on real hardware
// (the emulated GPU times kernels but does not execute them), so result checks
// run only when --verify is given.
struct Args {
    bool verify = false;
    int npos = 0;
    long long pos[8] = {0};
    const char* words[8] = {nullptr};  // positional arguments as given

    Args(int argc, char** argv, const char* usage) {
        for (int i = 1; i < argc; ++i) {
            if (std::strcmp(argv[i], "--verify") == 0) {
                verify = true;
            } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
                std::printf("usage: %s %s\n", argv[0], usage);
                std::exit(0);
            } else if (npos < 8) {
                words[npos] = argv[i];
                char* end = nullptr;
                pos[npos] = std::strtoll(argv[i], &end, 10);
                if (end == argv[i] || *end != '\0') pos[npos] = -1;  // not a number
                ++npos;
            } else {
                std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
                std::exit(2);
            }
        }
    }

    // Positional integer `i` in [lo, hi], `def` when absent; exits 2 otherwise.
    long long get(int i, long long def, long long lo, long long hi, const char* what) const {
        if (i >= npos) return def;
        if (pos[i] < lo || pos[i] > hi) {
            std::fprintf(stderr, "bad %s '%s': expected an integer in [%lld, %lld]\n", what, words[i], lo,
                         hi);
            std::exit(2);
        }
        return pos[i];
    }
};

// Fails the program (exit 1) with a message if `ok` is false. The message is
// written with one write(2) so that it stays whole next to other processes'.
inline void verify_or_die(bool ok, const char* fmt, ...) {
    if (ok) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char line[600];
    int n = std::snprintf(line, sizeof line, "VERIFY FAILED (pid %d): %s\n", (int)getpid(), msg);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    if (n > 0) {
        ssize_t w = ::write(STDERR_FILENO, line, (size_t)n);
        (void)w;
    }
    std::exit(1);
}

}  // namespace hiptests
