// A persistent pool of worker threads for the CPU backend; the calling thread takes part, so a
// pool of N threads has N-1 workers.
//
// An op completes when its work is done, not when every thread has arrived. Each op is a set of
// chunks that threads claim atomically (one at a time, or front/back of per-thread shares for
// parallel_for_stealing); the caller starts claiming at once, a worker joins when it wakes, and
// the caller returns as soon as every chunk has run. A worker the OS descheduled holds at most
// the chunk it claimed; one that wakes after the op is done finds nothing to claim (its slot's
// generation moved on) and never delays the next op. See docs/cpu-threads.md.
//
// Hand-off is spin-then-sleep: a thread polls for up to kSpinSeconds before it parks on its own
// condition variable (a decode step is hundreds of sub-millisecond ops; waking a parked thread
// costs a futex call plus, in a VM, an IPI to a halted vCPU). An idle pool costs nothing.
//
// Width: how many threads an op may use, at most size(). Two lanes (decode: ops of 1-row graphs,
// batch: prefill) each have a cap (--threads, --threads-batch). With adaptation on (the default;
// TESSERA_CPU_ADAPT=0 turns it off), stalls (the caller waiting on a chunk a descheduled worker
// holds: another program wants the cores) start an evaluation: the lane's next ops alternate,
// in phases of a few time slices, between its width and one thread fewer, and the faster (per op
// shape, weighted by how often each ran) is kept. A narrowed lane
// evaluates one thread more after a hold (doubling while the narrower width keeps winning), so
// it returns to its cap once the machine is quiet. On a quiet machine nothing is evaluated.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

// Counters since the pool was made (ThreadPool::stats). Ops: the pool's calls (each op of a
// graph makes one or a few).
struct ThreadPoolStats {
  int threads = 0;            // size()
  int cap[2] = {0, 0};        // per lane (decode, batch): the most threads an op may use
  int width[2] = {0, 0};      // per lane: the width now
  int min_width[2] = {0, 0};  // per lane: the narrowest width used (0: lane unused)
  bool adaptive = false;
  bool tbb = false;           // the calls run on a oneTBB arena (TESSERA_CPU_POOL=tbb)
  uint64_t ops = 0;           // calls of the pool
  uint64_t narrow_ops = 0;    // calls run below their lane's cap (the pool shrank under load)
  uint64_t shrinks = 0;       // times a lane narrowed
  uint64_t late = 0;          // worker arrivals that found the op's work already claimed
  uint64_t stalls = 0;        // ops whose caller waited > 100 us for a chunk a worker held
  uint64_t steals = 0;        // chunks a thread took from another's share
  uint64_t nivcsw = 0;        // involuntary context switches of the pool's threads (sampled)
};

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t, int64_t, int)>;
  enum Lane { kDecode = 0, kBatch = 1 };

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The most threads any op uses (per-thread buffers are sized by it); thread indices passed to
  // jobs are in [0, size()).
  int size() const { return n_threads_; }
  // The width the current lane's ops use now (<= size()); an evaluation may run some ops at one
  // more or one fewer.
  int width() const { return lanes_[lane_].width; }

  // The lane the following ops count against (the device sets it per graph). Caller's thread only.
  void set_lane(Lane lane) { lane_ = lane; }
  // Caps per lane, each clamped to [1, size()]. Not while an op runs.
  void set_caps(int decode, int batch);
  // Adaptive width on or off (off: every op uses its lane's cap). Not while an op runs.
  void set_adaptive(bool on);
  // A snapshot of the counters: from the thread that runs ops, or while none runs.
  ThreadPoolStats stats() const;
  // For tests: called by each worker with its index after it wakes for an op and before it tries
  // to take part (a test blocks a worker there to stand for one the OS descheduled). Set it
  // before the first op, or while no op runs and every worker is known to be parked.
  void set_worker_hook_for_testing(std::function<void(int)> hook) { worker_hook_ = std::move(hook); }

  // In all the calls below, |thread_index| identifies the thread that runs the call (0: the
  // caller), for per-thread scratch: it never names a part of the work that a given thread must
  // run. Each blocks until all calls are done; none is re-entrant; jobs must not throw.

  // Calls fn(begin, end, thread_index) over disjoint ranges covering [0, n): min(width(),
  // units) ranges of about equal size, aligned to |grain|.
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn);
  // Calls fn(begin, end, thread_index) over the chunks [k * chunk, (k + 1) * chunk) of [0, n),
  // each thread taking the next unclaimed chunk until none is left, in order. For jobs of many
  // equal units where a fixed split leaves one thread waiting on the other (a prefill GEMM).
  void parallel_for_dynamic(int64_t n, int64_t chunk, const RangeFn& fn);
  // Calls fn(begin, end, thread_index) over the chunks [k * chunk, (k + 1) * chunk) of [0, n):
  // the chunks are split into min(width(), chunks) contiguous shares; thread t claims share t
  // from the front (one sequential stream: what a decode GEMV needs; interleaved chunks measured
  // -12%), and a thread whose share is done takes chunks from the back of the others' (a late or
  // slower thread's share is finished by the rest). |chunk| >= 1; one call over [0, n) when a
  // single thread would run.
  void parallel_for_stealing(int64_t n, int64_t chunk, const RangeFn& fn);
  // Calls fn(part) once for each part in [0, size()), on whichever threads claim them (a part
  // is not a thread: one thread may run several). For per-part setup and for jobs that claim
  // their own work from a shared counter.
  void run_on_all(const std::function<void(int)>& fn);

  // How long a thread polls before it parks: long enough to bridge the gap between two ops of a
  // decode step, short enough that an idle pool costs nothing measurable.
  static constexpr double kSpinSeconds = 200e-6;

 private:
  enum class Mode : uint8_t { kChunks, kSplit, kSteal, kParts };
  struct alignas(64) Share {
    std::atomic<uint64_t> range{0};  // [lo, hi) of chunk indices, packed lo | hi << 32
  };
  // One op's claim state. The caller reuses a slot only when no worker is inside it (control's
  // active count is 0), so a worker that entered may read the job's fields without a race; a
  // worker that read an older generation fails to enter (control's generation differs).
  struct alignas(64) Slot {
    std::atomic<uint64_t> control{0};  // generation << 16 | workers inside
    Mode mode = Mode::kChunks;
    int parts = 0;                     // kSplit: ranges; kSteal: shares; kParts: parts
    int width = 0;                     // threads with index < width may enter
    int64_t n = 0, grain = 0, chunks = 0;
    const RangeFn* fn = nullptr;
    const std::function<void(int)>* part_fn = nullptr;
    alignas(64) std::atomic<int64_t> next{0};  // the next unclaimed chunk (all but kSteal)
    alignas(64) std::atomic<int64_t> done{0};  // chunks run, added once per thread at its end
    std::unique_ptr<Share[]> shares;
  };
  // A worker's parking place and its own counters (written by it alone).
  struct alignas(64) Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<bool> parked{false};
    std::atomic<uint64_t> late{0}, steals{0}, nivcsw{0};
  };
  // The adaptive width of one lane (caller's thread only). An evaluation runs the lane's ops at
  // two widths in alternating phases, sums their times per op shape (OpStat: mode, n, grain),
  // and keeps the faster.
  struct OpStat {
    uint64_t key = 0;
    double seconds[2] = {0, 0};  // summed op times at the current width [0] and the other [1]
    int count[2] = {0, 0};
  };
  static constexpr int kOpStats = 64;
  struct LaneState {
    int cap = 1, width = 1, min_width = 0;
    // Stalls among the last window of parallel ops (what starts an evaluation of width - 1).
    int window_ops = 0, window_stalls = 0;
    bool evaluating = false;
    int other = 0;       // the width evaluated against |width|
    int phase = 0;       // of the evaluation: even phases run |other|, odd ones |width|
    std::chrono::steady_clock::time_point phase_end{};
    std::unique_ptr<OpStat[]> stats;
    double probe_hold = 0, narrow_hold = 0;  // seconds before the next evaluation up / down
    std::chrono::steady_clock::time_point next_probe{}, next_narrow{};
    // The caller's involuntary switches at |mark_time| (what postpones a probe under load).
    uint64_t nivcsw_mark = 0;
    std::chrono::steady_clock::time_point mark_time{};
  };
  static constexpr int kSlots = 4;

  // The width for an op of this shape (and, while evaluating, the arm it counts for: -1 none).
  int op_width(Mode mode, int64_t n, int64_t grain, int* arm);
  void finish_op(Mode mode, int64_t n, int64_t grain, int arm, double seconds);
  void start_evaluation(LaneState& L, int other);
  void end_evaluation(LaneState& L);
  void worker(int index);
  // Publishes |s| (chunks of work) to the workers, runs claims on the caller and waits for all.
  void run(Slot& s, int64_t chunks);
  int64_t run_claims(Slot& s, int t, uint64_t* steals);
  void call_chunk(const Slot& s, int64_t k, int t);
  Slot& begin_op(Mode mode, int width);
  void note_wait(bool stalled);
  void dispatch(Mode mode, int64_t n, int64_t grain, const RangeFn* fn, const std::function<void(int)>* part_fn);
  // TESSERA_CPU_POOL=tbb (builds with oneTBB only): every call runs on a oneTBB task_arena of
  // size() threads instead of this pool's workers, for the design comparison of
  // docs/cpu-threads.md. Null otherwise.
  struct TbbArena;
  struct TbbArenaDeleter {
    void operator()(TbbArena* a) const;
  };
  std::unique_ptr<TbbArena, TbbArenaDeleter> tbb_;
  void dispatch_tbb(Mode mode, int64_t n, int64_t grain, const RangeFn* fn, const std::function<void(int)>* part_fn);

  int n_threads_;
  std::function<void(int)> worker_hook_;
  bool adaptive_ = true;
  Lane lane_ = kDecode;
  LaneState lanes_[2];
  uint64_t generation_ = 0;  // caller's count of published ops
  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<Worker[]> worker_state_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> published_{0};
  std::atomic<int> published_width_{0};
  std::atomic<bool> stop_{false};
  // The caller's parking place while it waits for held chunks.
  std::mutex mu_;
  std::condition_variable cv_done_;
  std::atomic<bool> caller_parked_{false};
  // Counters (the caller's, except nivcsw_ which adds the workers' samples).
  std::atomic<uint64_t> ops_{0}, narrow_ops_{0}, shrinks_{0}, stalls_{0}, caller_steals_{0};
  std::atomic<uint64_t> caller_nivcsw_{0};
};

// Threads to use by default: TESSERA_THREADS if set (> 0), else the physical cores this process
// may run on (hyperthread siblings counted once, from /sys/devices/system/cpu/cpu*/topology).
int default_thread_count();
// The logical CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpu_count();
// The physical cores among them (1 per sibling set), at least 1; the logical count where the
// topology files are absent.
int physical_core_count();

}  // namespace tessera::cpu
