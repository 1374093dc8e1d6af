// tessera-pool-designs: the CPU backend's thread pool against the designs the field uses, on
// one synthetic workload shaped like a decode step and a prefill step of SmolLM2-135M, while 0,
// 1, 2 ... busy processes (children of this program) compete for the cores. Issue 44 asks for
// the pool that wins under load; docs/cpu-threads.md reports the figures and the choice.
//
// Designs, each with T threads:
//   tessera    backends/cpu's ThreadPool (chunks claimed; an op ends when its chunks are done;
//              adaptive width; parallel_for_stealing as the GEMVs use it)
//   tessera-fixed  the same with adaptation off (TESSERA_CPU_ADAPT=0's behaviour)
//   omp-static OpenMP `schedule(static)`, OMP_WAIT_POLICY=active: a fixed split and a barrier at
//              the end of every op (the design of Tessera's old pool and of Highway's ThreadPool,
//              whose Run ends when every worker has finished its share)
//   omp-dynamic OpenMP `schedule(dynamic)` over the same chunks, OMP_WAIT_POLICY=passive: work
//              claimed in chunks, but the region still ends at a barrier every thread reaches
//   tbb        oneTBB parallel_for in a task_arena of T (work stealing, auto partitioner)
//
// Each configuration runs in a child process of its own (OpenMP reads its wait policy once, and
// a design's idle threads must not compete with the next one), configurations alternate within
// each repeat, and the figures are medians. The workload: 30 layers of 7 int8 GEMVs (q, k, v,
// o, gate, up, down: 576 -> 576/192/192/576/1536/1536, 1536 -> 576), 106 MB of weights,
// parallelised over chunks of 16 output rows; prefill is the same with 32 activation rows.
// It is not the model (no attention, norms or quantised formats): it isolates the hand-off
// and completion costs of the pool, which is what differs between the designs.
#include <omp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "backends/cpu/thread_pool.h"

namespace {

constexpr int kLayers = 30;
constexpr int64_t kChunkRows = 16;
constexpr int kPrefillRows = 32;

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> w;
  std::vector<float> scale;
};

struct Workload {
  std::vector<Matrix> mats;  // kLayers x 7
  std::vector<int8_t> x;     // [kPrefillRows, 1536]
  std::vector<float> y;      // [kPrefillRows, 1536]
};

Workload make_workload() {
  const int64_t shapes[7][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}};
  Workload w;
  std::mt19937 rng(44);
  std::uniform_int_distribution<int> q(-127, 127);
  for (int l = 0; l < kLayers; ++l)
    for (const auto& s : shapes) {
      Matrix m;
      m.rows = s[0], m.cols = s[1];
      m.w.resize(size_t(m.rows * m.cols));
      for (auto& v : m.w) v = int8_t(q(rng));
      m.scale.assign(size_t(m.rows), 1.0f / 4096);
      w.mats.push_back(std::move(m));
    }
  w.x.resize(size_t(kPrefillRows) * 1536);
  for (auto& v : w.x) v = int8_t(q(rng));
  w.y.assign(size_t(kPrefillRows) * 1536, 0.0f);
  return w;
}

// Output rows [r0, r1) of y = x W^T for |tokens| activation rows (an AVX2 clone where the CPU
// has it, so that a decode step is bound by memory as the real one is).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))
#endif
void gemv_rows(const Matrix& m, const int8_t* x, int tokens, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* wr = m.w.data() + r * m.cols;
    for (int t = 0; t < tokens; ++t) {
      const int8_t* xt = x + int64_t(t) * m.cols;
      int32_t acc = 0;
      for (int64_t k = 0; k < m.cols; ++k) acc += int32_t(wr[k]) * int32_t(xt[k]);
      y[int64_t(t) * m.rows + r] = float(acc) * m.scale[size_t(r)];
    }
  }
}

enum class Design { kTessera, kTesseraFixed, kOmpStatic, kOmpDynamic, kTbb };

struct DesignInfo {
  Design design;
  const char* name;
  const char* omp_wait;  // OMP_WAIT_POLICY for the child, or nullptr
};

constexpr DesignInfo kDesigns[] = {
    {Design::kTessera, "tessera", nullptr},
    {Design::kTesseraFixed, "tessera-fixed", nullptr},
    {Design::kOmpStatic, "omp-static", "active"},
    {Design::kOmpDynamic, "omp-dynamic", "passive"},
    {Design::kTbb, "tbb", nullptr},
};

// Runs one step (every matrix once) with |tokens| activation rows on design |d|.
struct Runner {
  Design d;
  int threads;
  tessera::cpu::ThreadPool* pool = nullptr;
  tbb::task_arena* arena = nullptr;

  void op(const Matrix& m, Workload& w, int tokens) {
    const int64_t chunks = (m.rows + kChunkRows - 1) / kChunkRows;
    auto run_chunks = [&](int64_t c0, int64_t c1) {
      gemv_rows(m, w.x.data(), tokens, w.y.data(), c0 * kChunkRows, std::min(m.rows, c1 * kChunkRows));
    };
    switch (d) {
      case Design::kTessera:
      case Design::kTesseraFixed:
        pool->parallel_for_stealing(chunks, 1, [&](int64_t b, int64_t e, int) { run_chunks(b, e); });
        break;
      case Design::kOmpStatic:
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t c = 0; c < chunks; ++c) run_chunks(c, c + 1);
        break;
      case Design::kOmpDynamic:
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int64_t c = 0; c < chunks; ++c) run_chunks(c, c + 1);
        break;
      case Design::kTbb:
        arena->execute([&] {
          tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1),
                            [&](const tbb::blocked_range<int64_t>& r) { run_chunks(r.begin(), r.end()); });
        });
        break;
    }
  }

  void step(Workload& w, int tokens) {
    if (pool) pool->set_lane(tokens == 1 ? tessera::cpu::ThreadPool::kDecode : tessera::cpu::ThreadPool::kBatch);
    for (const Matrix& m : w.mats) op(m, w, tokens);
  }
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The child: steps per second of decode (1 row) and prefill (kPrefillRows rows, reported as
// rows per second), each after a warm-up, printed as "decode prefill".
int run_child(Design d, int threads, double seconds) {
  Workload w = make_workload();
  std::unique_ptr<tessera::cpu::ThreadPool> pool;
  std::unique_ptr<tbb::task_arena> arena;
  if (d == Design::kTessera || d == Design::kTesseraFixed) {
    pool = std::make_unique<tessera::cpu::ThreadPool>(threads);
    pool->set_caps(threads, threads);
    pool->set_adaptive(d == Design::kTessera);
  }
  if (d == Design::kTbb) arena = std::make_unique<tbb::task_arena>(threads);
  Runner r{d, threads, pool.get(), arena.get()};
  double figures[2] = {0, 0};
  const int tokens[2] = {1, kPrefillRows};
  for (int i = 0; i < 2; ++i) {
    const double warm_end = now() + 0.5;
    while (now() < warm_end) r.step(w, tokens[i]);
    int steps = 0;
    const double t0 = now();
    while (now() - t0 < seconds) r.step(w, tokens[i]), ++steps;
    figures[i] = steps * double(tokens[i]) / (now() - t0);
  }
  std::printf("%.3f %.3f\n", figures[0], figures[1]);
  return 0;
}

std::vector<pid_t> g_busy;

void stop_busy() {
  for (pid_t p : g_busy) kill(p, SIGKILL);
  for (pid_t p : g_busy) waitpid(p, nullptr, 0);
  g_busy.clear();
}

void start_busy(int n) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(1800);
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    if (pid > 0) g_busy.push_back(pid);
  }
  usleep(200000);
}

// Runs this program as a child for one configuration; false when it failed.
bool run_config(const char* self, const DesignInfo& di, int threads, double seconds, double* decode, double* prefill) {
  std::string cmd;
  if (di.omp_wait) cmd += std::string("OMP_WAIT_POLICY=") + di.omp_wait + " ";
  cmd +=
      std::string("'") + self + "' --child " + di.name + " " + std::to_string(threads) + " " + std::to_string(seconds);
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return false;
  double a = 0, b = 0;
  const int got = std::fscanf(f, "%lf %lf", &a, &b);
  if (pclose(f) != 0 || got != 2) return false;
  *decode = a, *prefill = b;
  return true;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

int usage() {
  std::fprintf(stderr,
               "usage: tessera-pool-designs [--busy N]... [--repeats N] [--seconds S] [--threads T]\n"
               "  decode steps/s and prefill rows/s of a SmolLM2-shaped int8 step under each thread-pool\n"
               "  design (tessera, tessera-fixed, omp-static, omp-dynamic, tbb) at T threads (default: the\n"
               "  CPUs online), plus tessera-fixed at 1 thread, beside N busy processes (default 0 and 1)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && std::strcmp(argv[1], "--child") == 0) {
    for (const DesignInfo& di : kDesigns)
      if (std::strcmp(argv[2], di.name) == 0) return run_child(di.design, std::atoi(argv[3]), std::atof(argv[4]));
    return 2;
  }
  std::vector<int> busy;
  int repeats = 5, threads = int(sysconf(_SC_NPROCESSORS_ONLN));
  double seconds = 1.5;
  for (int i = 1; i < argc; ++i) {
    const bool has = i + 1 < argc;
    if (std::strcmp(argv[i], "--busy") == 0 && has) busy.push_back(std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--repeats") == 0 && has) repeats = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--seconds") == 0 && has) seconds = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--threads") == 0 && has) threads = std::atoi(argv[++i]);
    else return usage();
  }
  if (busy.empty()) busy = {0, 1};
  if (repeats < 1 || threads < 1 || seconds <= 0) return usage();
  std::atexit(stop_busy);
  struct Row {
    const DesignInfo* di;
    int threads;
  };
  std::vector<Row> rows;
  for (const DesignInfo& di : kDesigns) rows.push_back({&di, threads});
  rows.push_back({&kDesigns[1], 1});
  std::printf("%d CPUs; %d threads; %d repeats of %.1f s per figure (median), designs alternating\n",
              int(sysconf(_SC_NPROCESSORS_ONLN)), threads, repeats, seconds);
  std::printf("%-5s %-18s %14s %16s %10s %10s\n", "busy", "design", "decode step/s", "prefill rows/s", "dec/best",
              "pre/best");
  for (int b : busy) {
    start_busy(b);
    std::vector<std::vector<double>> dec(rows.size()), pre(rows.size());
    for (int rep = 0; rep < repeats; ++rep)
      for (size_t i = 0; i < rows.size(); ++i) {
        double d = 0, p = 0;
        if (run_config(argv[0], *rows[i].di, rows[i].threads, seconds, &d, &p))
          dec[i].push_back(d), pre[i].push_back(p);
      }
    stop_busy();
    double best_d = 0, best_p = 0;
    for (size_t i = 0; i < rows.size(); ++i)
      best_d = std::max(best_d, median(dec[i])), best_p = std::max(best_p, median(pre[i]));
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string name = std::string(rows[i].di->name) + " -t " + std::to_string(rows[i].threads);
      const double d = median(dec[i]), p = median(pre[i]);
      std::printf("%-5d %-18s %14.1f %16.1f %9.2fx %9.2fx\n", b, name.c_str(), d, p, best_d > 0 ? d / best_d : 0.0,
                  best_p > 0 ? p / best_p : 0.0);
    }
    std::fflush(stdout);
  }
  std::printf("(x/best: against the best row under the same load)\n");
  return 0;
}
