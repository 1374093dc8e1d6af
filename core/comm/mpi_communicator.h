// The Communicator over MPI (Open MPI or MPICH): one process per rank under mpirun, the ranks of
// MPI_COMM_WORLD. Collectives are issued non-blocking and polled against a deadline
// (TESSERA_COMM_TIMEOUT_S, 60 s by default), so a rank that died or stalls makes the others fail
// with the call's name rather than hang. Calls must come from one thread at a time.
#pragma once
#include <memory>

#include "core/comm/communicator.h"

namespace tessera {

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD of this process (MPI initialised on first use, finalised at exit).
  static Result<std::shared_ptr<MpiCommunicator>> world();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  Status all_gather(const void* send, void* recv, size_t bytes) override;
  Status broadcast(void* data, size_t bytes, int root) override;
  Status send(const void* data, size_t bytes, int to) override;
  Status recv(void* data, size_t bytes, int from) override;
  // Seconds a call may take before it fails (default: TESSERA_COMM_TIMEOUT_S or 60).
  void set_timeout(double seconds) override { timeout_s_ = seconds; }
  double timeout() const override { return timeout_s_; }

 protected:
  Status all_reduce_f32(float* data, int64_t count) override;

 private:
  MpiCommunicator(int rank, int size, double timeout_s) : rank_(rank), size_(size), timeout_s_(timeout_s) {}
  // Waits for request |req| of call |what| until the deadline.
  Status finish(void* req, const char* what, size_t bytes);
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 60;
  int64_t calls_ = 0;  // collectives issued, for the error messages
};

}  // namespace tessera
