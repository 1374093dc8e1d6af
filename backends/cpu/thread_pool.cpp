#include "backends/cpu/thread_pool.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#if TESSERA_HAVE_TBB
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::cpu {

int available_cpu_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int physical_core_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return available_cpu_count();
  // One core per distinct sibling list ("0,4" or "0-1" for a core with two hardware threads).
  std::set<std::string> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string siblings;
    if (!(f >> siblings)) return available_cpu_count();  // no topology: count logical CPUs
    cores.insert(siblings);
  }
  return std::max<int>(1, int(cores.size()));
}

int default_thread_count() {
  if (const char* env = std::getenv("TESSERA_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return std::min(n, 4 * available_cpu_count());
  }
  return physical_core_count();
}

namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Polls |done| for up to ThreadPool::kSpinSeconds from |start|; true when it turned true
// meanwhile. The clock is read once per 64 polls (a pause is ~10-140 cycles, a clock read ~20 ns).
template <class Pred>
bool spin_until(Pred done, Clock::time_point start = Clock::now()) {
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(ThreadPool::kSpinSeconds));
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return done();
  }
}

uint64_t thread_nivcsw() {
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return uint64_t(ru.ru_nivcsw);
}

constexpr uint64_t kActiveMask = 0xffff;
constexpr uint64_t pack_range(int64_t lo, int64_t hi) { return uint64_t(lo) | uint64_t(hi) << 32; }

// Adaptation. A caller's wait over kStallSeconds (and over its own share) for a chunk a worker
// holds is a stall; kStallsToEvaluate stalls within kWindowOps parallel ops start an evaluation
// of one thread fewer. An evaluation alternates kEvalPhases phases of kPhaseSeconds, each at one
// width: long against a scheduler's time slice (a few ms), so preemptions land in both, and
// whole phases, so a worker that is not needed parks instead of competing for a core with the
// narrower width's ops. The wider of the two must be kEvalMargin faster to be kept. Holds before
// the next evaluation start at kMinHold and double up to kMaxHold while evaluations keep the
// width.
constexpr double kStallSeconds = 100e-6;
constexpr int kWindowOps = 256, kStallsToEvaluate = 2;
constexpr int kEvalPhases = 8;
constexpr double kPhaseSeconds = 8e-3;
constexpr double kEvalMargin = 0.03;
constexpr double kMinHold = 0.05, kMaxHold = 1.0;
// A narrowed lane's caller preempted more often than this (per second) postpones its probe.
constexpr double kPreemptionsPerSecond = 50;

// Claims one chunk of |r| (its first, or its last when |back|); -1 once the share is empty.
int64_t claim(std::atomic<uint64_t>& r, bool back) {
  uint64_t v = r.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t lo = int64_t(v & 0xffffffffu), hi = int64_t(v >> 32);
    if (lo >= hi) return -1;
    if (r.compare_exchange_weak(v, back ? pack_range(lo, hi - 1) : pack_range(lo + 1, hi), std::memory_order_relaxed))
      return back ? hi - 1 : lo;
  }
}

}  // namespace

#if TESSERA_HAVE_TBB
struct ThreadPool::TbbArena {
  explicit TbbArena(int n) : arena(n, 1) {}
  tbb::task_arena arena;
};
void ThreadPool::TbbArenaDeleter::operator()(TbbArena* a) const { delete a; }

// The same calls on oneTBB: kSplit's ranges and kChunks' chunks are one task each
// (simple_partitioner), kSteal's chunks go to TBB's own partitioner and work stealing, kParts'
// parts are one task each. thread_index is the arena slot, in [0, size()).
void ThreadPool::dispatch_tbb(Mode mode, int64_t n, int64_t grain, const RangeFn* fn,
                              const std::function<void(int)>* part_fn) {
  ops_.store(ops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  const int64_t chunks = mode == Mode::kParts ? n_threads_ : (n + grain - 1) / grain;
  const int64_t units = mode == Mode::kSplit ? std::min<int64_t>(n_threads_, chunks) : chunks;
  auto slot = [] { return std::max(0, tbb::this_task_arena::current_thread_index()); };
  tbb_->arena.execute([&] {
    if (mode == Mode::kSteal) {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1), [&](const tbb::blocked_range<int64_t>& r) {
        (*fn)(r.begin() * grain, std::min(n, r.end() * grain), slot());
      });
      return;
    }
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, units, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          for (int64_t u = r.begin(); u < r.end(); ++u) {
            if (mode == Mode::kParts) {
              (*part_fn)(int(u));
            } else if (mode == Mode::kChunks) {
              (*fn)(u * grain, std::min(n, (u + 1) * grain), slot());
            } else {  // kSplit
              const int64_t lo = chunks * u / units, hi = chunks * (u + 1) / units;
              (*fn)(lo * grain, std::min(n, hi * grain), slot());
            }
          }
        },
        tbb::simple_partitioner());
  });
}
#else
struct ThreadPool::TbbArena {};
void ThreadPool::TbbArenaDeleter::operator()(TbbArena* a) const { delete a; }
void ThreadPool::dispatch_tbb(Mode, int64_t, int64_t, const RangeFn*, const std::function<void(int)>*) {}
#endif

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      slots_(std::make_unique<Slot[]>(kSlots)),
      worker_state_(std::make_unique<Worker[]>(size_t(n_threads_))) {
  for (int i = 0; i < kSlots; ++i) slots_[i].shares = std::make_unique<Share[]>(size_t(n_threads_));
  for (auto& l : lanes_) l.cap = l.width = n_threads_;
  const char* env = std::getenv("TESSERA_CPU_ADAPT");
  adaptive_ = !(env && std::string(env) == "0");
  const char* pool = std::getenv("TESSERA_CPU_POOL");
  if (pool && std::string(pool) == "tbb") {
#if TESSERA_HAVE_TBB
    if (n_threads_ > 1) {
      tbb_.reset(new TbbArena(n_threads_));
      adaptive_ = false;
      return;
    }
#else
    std::fprintf(stderr, "tessera: TESSERA_CPU_POOL=tbb ignored: this build has no oneTBB\n");
#endif
  }
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  for (int i = 1; i < n_threads_; ++i) {
    std::lock_guard<std::mutex> lock(worker_state_[i].mu);
    worker_state_[i].cv.notify_one();
  }
  for (auto& t : threads_) t.join();
}

void ThreadPool::set_caps(int decode, int batch) {
  const int caps[2] = {std::clamp(decode, 1, n_threads_), std::clamp(batch, 1, n_threads_)};
  for (int l = 0; l < 2; ++l) {
    lanes_[l] = LaneState{};
    lanes_[l].cap = lanes_[l].width = caps[l];
  }
}

void ThreadPool::set_adaptive(bool on) {
  adaptive_ = on;
  for (auto& l : lanes_) {
    const int cap = l.cap;
    l = LaneState{};
    l.cap = l.width = cap;
  }
}

ThreadPoolStats ThreadPool::stats() const {
  ThreadPoolStats s;
  s.threads = n_threads_;
  s.adaptive = adaptive_;
  s.tbb = tbb_ != nullptr;
  for (int l = 0; l < 2; ++l) {
    s.cap[l] = lanes_[l].cap;
    s.width[l] = lanes_[l].width;
    s.min_width[l] = lanes_[l].min_width;
  }
  s.ops = ops_.load(std::memory_order_relaxed);
  s.narrow_ops = narrow_ops_.load(std::memory_order_relaxed);
  s.shrinks = shrinks_.load(std::memory_order_relaxed);
  s.stalls = stalls_.load(std::memory_order_relaxed);
  s.steals = caller_steals_.load(std::memory_order_relaxed);
  s.nivcsw = caller_nivcsw_.load(std::memory_order_relaxed);
  for (int i = 1; i < n_threads_; ++i) {
    s.late += worker_state_[i].late.load(std::memory_order_relaxed);
    s.steals += worker_state_[i].steals.load(std::memory_order_relaxed);
    s.nivcsw += worker_state_[i].nivcsw.load(std::memory_order_relaxed);
  }
  return s;
}

void ThreadPool::worker(int index) {
  Worker& me = worker_state_[size_t(index)];
  uint64_t seen = 0, joined = 0;
  const uint64_t nivcsw_base = thread_nivcsw();
  const auto ready = [&] {
    return stop_.load(std::memory_order_seq_cst) ||
           (published_.load(std::memory_order_seq_cst) != seen &&
            index < published_width_.load(std::memory_order_seq_cst));
  };
  for (;;) {
    if (!spin_until(ready)) {
      me.nivcsw.store(thread_nivcsw() - nivcsw_base, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lock(me.mu);
      // Paired with the caller's store of published_ and load of parked (both seq_cst): either
      // the caller sees parked and notifies under mu, or this predicate sees the new op.
      me.parked.store(true, std::memory_order_seq_cst);
      me.cv.wait(lock, ready);
      me.parked.store(false, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t g = published_.load(std::memory_order_acquire);
    seen = g;
    if (worker_hook_) worker_hook_(index);
    Slot& s = slots_[g % kSlots];
    // Enter: only while the slot still holds generation g (else that op is done and the slot
    // serves a later one, whose fields this thread has not synchronised with).
    uint64_t c = s.control.load(std::memory_order_acquire);
    bool entered = false;
    while ((c >> 16) == (g & (~uint64_t(0) >> 16))) {
      if (s.control.compare_exchange_weak(c, c + 1, std::memory_order_acquire, std::memory_order_acquire)) {
        entered = true;
        break;
      }
    }
    if (!entered) {
      me.late.store(me.late.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      continue;
    }
    uint64_t steals = 0;
    const bool eligible = index < s.width && (s.mode != Mode::kSteal || index < s.parts);
    const int64_t ran = eligible ? run_claims(s, index, &steals) : 0;
    if (ran == 0 && eligible) {
      me.late.store(me.late.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    } else if (ran > 0 && s.done.fetch_add(ran, std::memory_order_seq_cst) + ran == s.chunks &&
               caller_parked_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
    s.control.fetch_sub(1, std::memory_order_release);  // leave: the slot may be reused
    if (steals) me.steals.store(me.steals.load(std::memory_order_relaxed) + steals, std::memory_order_relaxed);
    if ((++joined & 255) == 0) me.nivcsw.store(thread_nivcsw() - nivcsw_base, std::memory_order_relaxed);
  }
}

static uint64_t op_key(int mode, int64_t n, int64_t grain) {
  uint64_t h = uint64_t(mode) * 0x9E3779B97F4A7C15ull ^ uint64_t(n) * 0xC2B2AE3D27D4EB4Full ^ uint64_t(grain) * 0x165667B19E3779F9ull;
  return (h ^ (h >> 29)) | 1;  // never 0 (an empty entry)
}

// The width of the op about to run. Outside an evaluation: the lane's width, and an evaluation
// starts when its hold is over (of width + 1 when the lane is narrowed; of width - 1 after
// stalls). During one: the op runs at the width its shape has fewer samples of.
int ThreadPool::op_width(Mode mode, int64_t n, int64_t grain, int* arm) {
  LaneState& L = lanes_[lane_];
  *arm = -1;
  if (adaptive_ && !L.evaluating && (L.width < L.cap || L.window_stalls >= kStallsToEvaluate)) {
    const Clock::time_point now = Clock::now();
    if (L.width < L.cap && now >= L.next_probe) {
      // While this thread itself keeps being preempted at the narrower width, more threads
      // than cores want to run: a wider width would only add one. Postpone the probe.
      const uint64_t nivcsw = thread_nivcsw();
      const double rate = double(nivcsw - std::min(nivcsw, L.nivcsw_mark)) /
                          std::max(1e-3, seconds_between(L.mark_time, now));
      L.nivcsw_mark = nivcsw;
      L.mark_time = now;
      if (rate > kPreemptionsPerSecond) {
        L.probe_hold = std::min(kMaxHold, std::max(kMinHold, 2 * L.probe_hold));
        L.next_probe = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(L.probe_hold));
      } else {
        start_evaluation(L, L.width + 1);
      }
    }
    else if (L.width > 1 && L.window_stalls >= kStallsToEvaluate && now >= L.next_narrow) start_evaluation(L, L.width - 1);
  }
  int w = L.width;
  if (L.evaluating) {
    const Clock::time_point now = Clock::now();
    if (now >= L.phase_end) {
      if (++L.phase >= kEvalPhases) {
        end_evaluation(L);
        return op_width(mode, n, grain, arm);
      }
      L.phase_end = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kPhaseSeconds));
    }
    const uint64_t key = op_key(int(mode), n, grain);
    OpStat& st = L.stats[key % kOpStats];
    if (st.key != key) st = OpStat{key, {0, 0}, {0, 0}};
    *arm = L.phase % 2 == 0 ? 1 : 0;  // the other width first
    if (*arm == 1) w = L.other;
  }
  if (L.min_width == 0 || w < L.min_width) L.min_width = w;
  ops_.store(ops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (w < L.cap) narrow_ops_.store(narrow_ops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return w;
}

void ThreadPool::start_evaluation(LaneState& L, int other) {
  L.evaluating = true;
  L.other = other;
  L.phase = 0;
  L.phase_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kPhaseSeconds));
  if (!L.stats) L.stats = std::make_unique<OpStat[]>(kOpStats);
  for (int i = 0; i < kOpStats; ++i) L.stats[i] = OpStat{};
}

void ThreadPool::finish_op(Mode mode, int64_t n, int64_t grain, int arm, double seconds) {
  LaneState& L = lanes_[lane_];
  if (arm < 0 || !L.evaluating) return;
  OpStat& st = L.stats[op_key(int(mode), n, grain) % kOpStats];
  if (st.key != op_key(int(mode), n, grain)) return;  // evicted by another shape meanwhile
  st.seconds[arm] += seconds;
  st.count[arm] += 1;
}

// Compares the two widths over the op shapes sampled at both, each weighted by how often it ran:
// the time the evaluated ops would have taken all at one width or all at the other.
void ThreadPool::end_evaluation(LaneState& L) {
  double at_width = 0, at_other = 0;
  for (int i = 0; i < kOpStats; ++i) {
    const OpStat& st = L.stats[i];
    if (st.count[0] == 0 || st.count[1] == 0) continue;
    const double runs = double(st.count[0] + st.count[1]);
    at_width += st.seconds[0] / st.count[0] * runs;
    at_other += st.seconds[1] / st.count[1] * runs;
  }
  L.evaluating = false;
  L.window_ops = L.window_stalls = 0;
  const bool wider = L.other > L.width;
  // Ties go to the narrower width: the wider one must be kEvalMargin faster. Under load the
  // comparison is noisy, and the narrower width is the one that stays fast when the load grows
  // (and leaves a core to the other program); on a quiet machine the wider width wins by its
  // speed-up, far past the margin.
  const double factor = wider ? 1.0 - kEvalMargin : 1.0 + kEvalMargin;
  const bool switch_width = at_other > 0 && at_width > 0 && at_other < at_width * factor;
  const Clock::time_point now = Clock::now();
  const auto later = [&](double s) { return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  if (wider) {
    L.probe_hold = switch_width ? kMinHold : std::min(kMaxHold, std::max(kMinHold, 2 * L.probe_hold));
  } else {
    L.narrow_hold = switch_width ? kMinHold : std::min(kMaxHold, std::max(kMinHold, 2 * L.narrow_hold));
    if (switch_width) {
      L.probe_hold = kMinHold;
      shrinks_.store(shrinks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  if (switch_width) L.width = L.other;
  L.next_probe = later(L.probe_hold);
  L.next_narrow = later(L.narrow_hold);
  L.nivcsw_mark = thread_nivcsw();
  L.mark_time = now;
  // The caller's own involuntary switches, once per evaluation (a system call).
  thread_local uint64_t last = thread_nivcsw();
  const uint64_t n = thread_nivcsw();
  if (n > last) caller_nivcsw_.store(caller_nivcsw_.load(std::memory_order_relaxed) + (n - last), std::memory_order_relaxed);
  last = n;
}

ThreadPool::Slot& ThreadPool::begin_op(Mode mode, int width) {
  const uint64_t g = ++generation_;
  Slot& s = slots_[g % kSlots];
  // Reuse the slot once every worker that entered it (kSlots ops ago) has left; a worker
  // descheduled inside it is the only case that waits here.
  uint64_t c = s.control.load(std::memory_order_acquire);
  for (int spins = 0;;) {
    if ((c & kActiveMask) == 0) {
      if (s.control.compare_exchange_weak(c, g << 16, std::memory_order_acq_rel, std::memory_order_acquire)) break;
      continue;
    }
    if (++spins > 64) std::this_thread::yield();
    else cpu_relax();
    c = s.control.load(std::memory_order_acquire);
  }
  s.mode = mode;
  s.width = width;
  return s;
}

void ThreadPool::call_chunk(const Slot& s, int64_t k, int t) {
  switch (s.mode) {
    case Mode::kChunks:
    case Mode::kSteal:
      (*s.fn)(k * s.grain, std::min(s.n, (k + 1) * s.grain), t);
      return;
    case Mode::kSplit: {
      const int64_t units = (s.n + s.grain - 1) / s.grain;
      const int64_t u0 = units * k / s.parts, u1 = units * (k + 1) / s.parts;
      const int64_t b = u0 * s.grain, e = std::min(s.n, u1 * s.grain);
      if (b < e) (*s.fn)(b, e, t);
      return;
    }
    case Mode::kParts:
      (*s.part_fn)(int(k));
      return;
  }
}

int64_t ThreadPool::run_claims(Slot& s, int t, uint64_t* steals) {
  int64_t ran = 0;
  if (s.mode != Mode::kSteal) {
    for (int64_t k; (k = s.next.fetch_add(1, std::memory_order_relaxed)) < s.chunks; ++ran) call_chunk(s, k, t);
    return ran;
  }
  // Own share front to back, then the others' back to front (threads beyond the shares take
  // nothing: fewer chunks than threads).
  const int T = s.parts;
  if (t >= T) return 0;
  for (int k = 0; k < T; ++k) {
    const int victim = (t + k) % T;
    const bool back = victim != t;
    for (int64_t c; (c = claim(s.shares[size_t(victim)].range, back)) >= 0; ++ran) {
      call_chunk(s, c, t);
      if (back) ++*steals;
    }
  }
  return ran;
}

void ThreadPool::run(Slot& s, int64_t chunks) {
  s.chunks = chunks;
  s.next.store(0, std::memory_order_relaxed);
  s.done.store(0, std::memory_order_relaxed);
  const uint64_t g = generation_;
  published_width_.store(s.width, std::memory_order_seq_cst);
  published_.store(g, std::memory_order_seq_cst);
  for (int i = 1; i < s.width; ++i) {
    Worker& w = worker_state_[size_t(i)];
    if (w.parked.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(w.mu);
      w.cv.notify_one();
    }
  }
  uint64_t steals = 0;
  const Clock::time_point t0 = Clock::now();
  const int64_t ran = run_claims(s, 0, &steals);
  if (ran) s.done.fetch_add(ran, std::memory_order_seq_cst);
  const auto done = [&] { return s.done.load(std::memory_order_seq_cst) >= chunks; };
  if (done()) {
    note_wait(false);
  } else {
    const Clock::time_point t1 = Clock::now();
    if (!spin_until(done, t1)) {
      std::unique_lock<std::mutex> lock(mu_);
      caller_parked_.store(true, std::memory_order_seq_cst);
      cv_done_.wait(lock, done);
      caller_parked_.store(false, std::memory_order_relaxed);
    }
    // A stall: a wait longer than kStallSeconds and than the caller's own share of the op. A
    // quiet machine's tail is at most about one chunk, shorter than the several the caller ran
    // (big prefill chunks wait > 100 us for the last one without anything wrong).
    const double wait = seconds_between(t1, Clock::now());
    note_wait(wait > kStallSeconds && wait > seconds_between(t0, t1));
  }
  if (steals) caller_steals_.store(caller_steals_.load(std::memory_order_relaxed) + steals, std::memory_order_relaxed);
}

// Counts a parallel op and whether its caller stalled on a held chunk; a window with stalls
// makes the next op start an evaluation of one thread fewer (op_width).
void ThreadPool::note_wait(bool stalled) {
  LaneState& L = lanes_[lane_];
  if (stalled) {
    stalls_.store(stalls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    ++L.window_stalls;
  }
  if (++L.window_ops >= kWindowOps && L.window_stalls < kStallsToEvaluate) L.window_ops = L.window_stalls = 0;
}

// Every public call: pick the width, run on the caller alone when one thread (or one unit) is
// all the op gets, else publish it; time it while the lane evaluates widths.
void ThreadPool::dispatch(Mode mode, int64_t n, int64_t grain, const RangeFn* fn, const std::function<void(int)>* part_fn) {
  if (tbb_) return dispatch_tbb(mode, n, grain, fn, part_fn);
  int arm = -1;
  const int w = n_threads_ == 1 ? 1 : op_width(mode, n, grain, &arm);
  const Clock::time_point t0 = arm >= 0 ? Clock::now() : Clock::time_point{};
  const int64_t chunks = mode == Mode::kParts ? n_threads_ : (n + grain - 1) / grain;
  // kSplit: one range per thread that takes part; kSteal: one share per thread.
  const int64_t units = mode == Mode::kSplit || mode == Mode::kSteal ? std::min<int64_t>(w, chunks) : chunks;
  if (mode == Mode::kSteal && w > 1 && chunks >= (int64_t(1) << 32)) {
    // The packed shares hold 32-bit chunk indices: claim chunks from one counter instead.
    Slot& s = begin_op(Mode::kChunks, w);
    s.n = n, s.grain = grain, s.parts = w, s.fn = fn;
    run(s, chunks);
  } else if (w == 1 || units <= 1) {
    if (mode == Mode::kParts) {
      for (int p = 0; p < n_threads_; ++p) (*part_fn)(p);
    } else if (mode == Mode::kChunks) {
      for (int64_t k = 0; k < chunks; ++k) (*fn)(k * grain, std::min(n, (k + 1) * grain), 0);
    } else {
      (*fn)(0, n, 0);  // kSplit, kSteal: one call over [0, n)
    }
  } else {
    Slot& s = begin_op(mode, w);
    s.n = n;
    s.grain = grain;
    s.parts = int(units);
    s.fn = fn;
    s.part_fn = part_fn;
    if (mode == Mode::kSteal)
      for (int t = 0; t < s.parts; ++t)
        s.shares[size_t(t)].range.store(pack_range(chunks * t / s.parts, chunks * (t + 1) / s.parts), std::memory_order_relaxed);
    run(s, mode == Mode::kSplit ? units : chunks);
  }
  if (arm >= 0) finish_op(mode, n, grain, arm, seconds_between(t0, Clock::now()));
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  dispatch(Mode::kSplit, n, std::max<int64_t>(1, grain), &fn, nullptr);
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const RangeFn& fn) {
  if (n <= 0) return;
  dispatch(Mode::kChunks, n, std::max<int64_t>(1, chunk), &fn, nullptr);
}

void ThreadPool::parallel_for_stealing(int64_t n, int64_t chunk, const RangeFn& fn) {
  if (n <= 0) return;
  dispatch(Mode::kSteal, n, std::max<int64_t>(1, chunk), &fn, nullptr);
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) { dispatch(Mode::kParts, 0, 1, nullptr, &fn); }

}  // namespace tessera::cpu
