#include "backends/cuda/sim/block_sim.h"

#include <cstring>

namespace tessera::gpu::sim {

namespace {
#if !TESSERA_SIM_BOOST_CONTEXT
thread_local BlockSim* g_running = nullptr;  // the simulator whose fiber is starting
#endif
constexpr size_t kStackBytes = 64 * 1024;
}  // namespace

uint8_t* HostCtx::shared_base() { return sim_->shared_.data(); }

void HostCtx::sync() { sim_->yield(tid_, BlockSim::State::kBlockWait); }

float HostCtx::shfl_xor(float v, int mask) {
  // Two banks, alternating per shuffle: a lane released from this shuffle may write its next
  // value before a slower lane has read this one.
  auto& f = sim_->fibers_[size_t(tid_)];
  const int bank = f.parity;
  f.parity ^= 1;
  sim_->bank_[bank][size_t(tid_)] = v;
  sim_->yield(tid_, BlockSim::State::kWarpWait);
  const int src = (tid_ & ~31) | ((tid_ & 31) ^ (mask & 31));
  if (src >= ntid_) return v;
  return sim_->bank_[bank][size_t(src)];
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
  for (auto& b : bank_) b.assign(threads, 0.0f);
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
