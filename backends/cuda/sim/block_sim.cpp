#include "backends/cuda/sim/block_sim.h"

#include <cstring>

#include "backends/cuda/kernels.h"

namespace tessera::gpu::sim {

namespace {
#if !TESSERA_SIM_BOOST_CONTEXT
thread_local BlockSim* g_running = nullptr;  // the simulator whose fiber is starting
#endif
constexpr size_t kStackBytes = 64 * 1024;
}  // namespace

uint8_t* HostCtx::shared_base() { return sim_->shared_.data(); }

void HostCtx::sync() { sim_->yield(tid_, BlockSim::State::kBlockWait); }

// Two banks, alternating per exchange: a lane released from one exchange may write its next
// value before a slower lane has read this one. Each thread owns kBankWords words of a bank.
constexpr int kBankWords = 3;

const uint32_t* BlockSim::exchange(int tid, const uint32_t* words, int n) {
  auto& f = fibers_[size_t(tid)];
  const int bank = f.parity;
  f.parity ^= 1;
  std::memcpy(&bank_[bank][size_t(tid) * kBankWords], words, sizeof(uint32_t) * size_t(n));
  yield(tid, State::kWarpWait);
  return bank_[bank].data();
}

float HostCtx::shfl_xor(float v, int mask) {
  uint32_t word;
  std::memcpy(&word, &v, sizeof word);
  const uint32_t* bank = sim_->exchange(tid_, &word, 1);
  const int src = (tid_ & ~31) | ((tid_ & 31) ^ (mask & 31));
  if (src >= ntid_) return v;
  std::memcpy(&v, &bank[size_t(src) * kBankWords], sizeof v);
  return v;
}

int32_t HostCtx::shfl(int32_t v, int src_lane) {
  const uint32_t word = uint32_t(v);
  const uint32_t* bank = sim_->exchange(tid_, &word, 1);
  const int src = (tid_ & ~31) | (src_lane & 31);
  if (src >= ntid_) return v;
  return int32_t(bank[size_t(src) * kBankWords]);
}

void HostCtx::mma_s8(int32_t a0, int32_t a1, int32_t b, int32_t* d) {
  const uint32_t words[kBankWords] = {uint32_t(a0), uint32_t(a1), uint32_t(b)};
  const uint32_t* bank = sim_->exchange(tid_, words, kBankWords);
  const int w0 = tid_ & ~31, lane = tid_ & 31, g = lane >> 2, t = lane & 3;
  // A[r][4q..4q+3] is word r / 8 of lane 4 (r % 8) + q; B[4q..4q+3][n] is word 2 of lane 4 n + q.
  // A lane past the block's end (a partial warp) contributes zeros.
  auto word = [&](int l, int i) { return w0 + l < ntid_ ? int32_t(bank[size_t(w0 + l) * kBankWords + size_t(i)]) : 0; };
  for (int q = 0; q < 4; ++q) {
    const int32_t lo = word(4 * g + q, 0), hi = word(4 * g + q, 1);
    const int32_t b0 = word(4 * (2 * t) + q, 2), b1 = word(4 * (2 * t + 1) + q, 2);
    d[0] = dot4_i8(lo, b0, d[0]);
    d[1] = dot4_i8(lo, b1, d[1]);
    d[2] = dot4_i8(hi, b0, d[2]);
    d[3] = dot4_i8(hi, b1, d[3]);
  }
}

#if TESSERA_SIM_BOOST_CONTEXT
namespace {
// Hands a fiber the simulator's own stack memory (kept across blocks) instead of allocating.
struct BorrowedStack {
  std::vector<uint8_t>* memory;
  boost::context::stack_context allocate() {
    boost::context::stack_context sc;
    sc.size = memory->size();
    sc.sp = memory->data() + memory->size();
    return sc;
  }
  void deallocate(boost::context::stack_context&) noexcept {}
};
}  // namespace

void BlockSim::start(int tid) {
  Fiber& f = fibers_[size_t(tid)];
  // A fiber left suspended by a divergent block is unwound first, while its stack (which the new
  // fiber reuses) is still intact.
  f.fiber = boost::context::fiber();
  f.sink = boost::context::fiber();
  f.fiber = boost::context::fiber(std::allocator_arg, BorrowedStack{&f.stack}, [this, tid](boost::context::fiber&& sink) {
    Fiber& me = fibers_[size_t(tid)];
    me.sink = std::move(sink);
    (*body_)(me.hc);
    me.state = State::kDone;
    return std::move(me.sink);
  });
}

void BlockSim::resume(int tid) {
  Fiber& f = fibers_[size_t(tid)];
  f.fiber = std::move(f.fiber).resume();
}

void BlockSim::yield(int tid, State s) {
  Fiber& f = fibers_[size_t(tid)];
  f.state = s;
  f.sink = std::move(f.sink).resume();
}
#else
void BlockSim::entry() {
  BlockSim* s = g_running;
  const int tid = s->current_;
  (*s->body_)(s->fibers_[size_t(tid)].hc);
  s->fibers_[size_t(tid)].state = State::kDone;
  // Returning resumes uc_link: the scheduler.
}

void BlockSim::start(int tid) {
  Fiber& f = fibers_[size_t(tid)];
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.data();
  f.ctx.uc_stack.ss_size = f.stack.size();
  f.ctx.uc_link = &sched_;
  makecontext(&f.ctx, &BlockSim::entry, 0);
}

void BlockSim::resume(int tid) {
  current_ = tid;
  g_running = this;
  swapcontext(&sched_, &fibers_[size_t(tid)].ctx);
}

void BlockSim::yield(int tid, State s) {
  fibers_[size_t(tid)].state = s;
  swapcontext(&fibers_[size_t(tid)].ctx, &sched_);
}
#endif

std::string BlockSim::run_block() {
  const int n = int(fibers_.size());
  for (;;) {
    for (int i = 0; i < n; ++i) {
      if (fibers_[size_t(i)].state != State::kRun) continue;
      resume(i);
    }
    bool live = false;
    for (const auto& f : fibers_) live |= f.state != State::kDone;
    if (!live) return {};
    bool released = false;
    for (int w = 0; w * 32 < n; ++w) {
      bool any_warp = false, all_warp_or_done = true;
      for (int i = w * 32; i < n && i < w * 32 + 32; ++i) {
        const State s = fibers_[size_t(i)].state;
        any_warp |= s == State::kWarpWait;
        all_warp_or_done &= s == State::kWarpWait || s == State::kDone;
      }
      if (any_warp && all_warp_or_done) {
        for (int i = w * 32; i < n && i < w * 32 + 32; ++i)
          if (fibers_[size_t(i)].state == State::kWarpWait) fibers_[size_t(i)].state = State::kRun;
        released = true;
      }
    }
    if (released) continue;
    bool all_block = true;
    for (const auto& f : fibers_) all_block &= f.state == State::kBlockWait || f.state == State::kDone;
    if (all_block) {
      for (auto& f : fibers_)
        if (f.state == State::kBlockWait) f.state = State::kRun;
      continue;
    }
    return "divergent barrier: some threads wait at a warp shuffle, others at __syncthreads";
  }
}

std::string BlockSim::run(uint32_t grid_x, uint32_t grid_y, uint32_t threads, const std::function<void(HostCtx&)>& body) {
  if (threads == 0 || threads > 1024) return "block of " + std::to_string(threads) + " threads";
  body_ = &body;
  fibers_.resize(threads);
  for (auto& b : bank_) b.assign(size_t(threads) * kBankWords, 0u);
  shared_.assign(HostCtx::kSlots * HostCtx::kSlotBytes, 0xff);  // garbage, as on a GPU
  for (uint32_t by = 0; by < grid_y; ++by) {
    for (uint32_t bx = 0; bx < grid_x; ++bx) {
      for (uint32_t t = 0; t < threads; ++t) {
        Fiber& f = fibers_[t];
        if (f.stack.empty()) f.stack.resize(kStackBytes);
        f.state = State::kRun;
        f.parity = 0;
        f.hc.sim_ = this;
        f.hc.tid_ = int(t);
        f.hc.ntid_ = int(threads);
        f.hc.bx_ = int(bx);
        f.hc.by_ = int(by);
        f.hc.nbx_ = int(grid_x);
        f.hc.nby_ = int(grid_y);
        start(int(t));
      }
      std::string err = run_block();
      if (!err.empty()) return err + " (block " + std::to_string(bx) + ", " + std::to_string(by) + ")";
    }
  }
  return {};
}

}  // namespace tessera::gpu::sim
