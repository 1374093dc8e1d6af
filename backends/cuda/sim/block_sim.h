// A host simulator of GPU thread blocks: runs a kernel body (backends/cuda/kernels.h) with every
// thread of a block as a fiber (ucontext), switching at the block barrier, warp shuffles and mma,
// so the same source that nvcc and hipcc compile runs, and is checked, on a machine without a
// GPU. Fibers switch through Boost.Context where the build found it (a few nanoseconds), else
// through ucontext (which makes a system call per switch). Blocks run one after another; a barrier that not every live thread of the block (or
// lane of the warp) reaches is reported as a divergence error instead of hanging.
#pragma once
#if TESSERA_SIM_BOOST_CONTEXT
#include <boost/context/fiber.hpp>
#else
#include <ucontext.h>
#endif

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/args.h"

namespace tessera::gpu::sim {

class BlockSim;

// The execution context kernels.h asks for (see there), on the host.
class HostCtx {
 public:
  int tid() const { return tid_; }
  int ntid() const { return ntid_; }
  int bx() const { return bx_; }
  int by() const { return by_; }
  int nbx() const { return nbx_; }
  int nby() const { return nby_; }
  void sync();
  float shfl_xor(float v, int mask);
  int32_t shfl(int32_t v, int src);
  // The warp's 16x8x16 int8 mma (kernels.h mma_s8_shfl gives the fragment layout), as one
  // collective: every lane leaves its fragments and reads the others' after the warp meets.
  void mma_s8(int32_t a0, int32_t a1, int32_t b, int32_t* d);
  template <int Slot, class T, int N>
  T* smem() {
    static_assert(Slot >= 0 && Slot < kSlots && sizeof(T) * N <= kSlotBytes, "shared slot too large for the simulator");
    return reinterpret_cast<T*>(shared_base() + Slot * kSlotBytes);
  }
  void set_error(int32_t* err, KernelError e) {
    if (*err == 0) *err = int32_t(e);  // fibers never run concurrently
  }

  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = 16384;

 private:
  friend class BlockSim;
  uint8_t* shared_base();
  BlockSim* sim_ = nullptr;
  int tid_ = 0, ntid_ = 0, bx_ = 0, by_ = 0, nbx_ = 0, nby_ = 0;
};

class BlockSim {
 public:
  BlockSim() = default;
  BlockSim(const BlockSim&) = delete;
  BlockSim& operator=(const BlockSim&) = delete;
  // Runs |body| for every thread of a grid_x x grid_y grid of |threads|-thread blocks. Returns
  // an empty string, or what went wrong (a divergent barrier).
  std::string run(uint32_t grid_x, uint32_t grid_y, uint32_t threads, const std::function<void(HostCtx&)>& body);

 private:
  friend class HostCtx;
  enum class State : uint8_t { kRun, kBlockWait, kWarpWait, kDone };
  struct Fiber {
#if TESSERA_SIM_BOOST_CONTEXT
    boost::context::fiber fiber;  // the thread, while suspended
    boost::context::fiber sink;   // the scheduler, while the thread runs
#else
    ucontext_t ctx;
#endif
    std::vector<uint8_t> stack;
    State state = State::kRun;
    int parity = 0;
    HostCtx hc;
  };
#if !TESSERA_SIM_BOOST_CONTEXT
  static void entry();
#endif
  void start(int tid);
  void resume(int tid);
  void yield(int tid, State s);
  // Parks |words| in this thread's slot of the next bank, waits for the warp, returns the bank.
  const uint32_t* exchange(int tid, const uint32_t* words, int n);
  std::string run_block();

#if !TESSERA_SIM_BOOST_CONTEXT
  ucontext_t sched_{};
#endif
  std::vector<Fiber> fibers_;
  std::vector<uint32_t> bank_[2];  // a word per thread for shuffles, three for mma fragments
  std::vector<uint8_t> shared_;
  const std::function<void(HostCtx&)>* body_ = nullptr;
  int current_ = 0;
};

}  // namespace tessera::gpu::sim
