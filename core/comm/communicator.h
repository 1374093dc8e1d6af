// Communicator: the collectives tensor parallelism needs (docs/multi-device.md), behind one
// interface: the sum of a buffer over every rank (all-reduce), every rank's part gathered
// (all-gather), one rank's bytes to all (broadcast), and point-to-point send/recv. A tensor-
// parallel model holds one and calls it between the segments of its step graph (SplitGraph,
// core/exec/split_graph.h), so every backend works with every transport.
//
// Implementations: LocalCommunicator (one rank: every collective is the identity), and
// MpiCommunicator (core/comm/mpi_communicator.h, Open MPI or MPICH; one process per rank under
// mpirun). NCCL/RCCL, which work on device memory inside a stream, are the next one.
//
// Every rank must call the same collectives in the same order with the same sizes. A call that
// does not complete within the communicator's timeout (a rank died or stalls) fails with
// kUnavailable naming the call, instead of hanging.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "quant/dtype.h"

namespace tessera {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local", "mpi", ...
  virtual std::string backend() const = 0;

  // data[0, count) <- the elementwise sum of every rank's data[0, count), on every rank alike.
  // f16 and bf16 values are summed in f32 and rounded once.
  Status all_reduce_sum(void* data, int64_t count, DType dtype);
  // recv[r * bytes, (r + 1) * bytes) <- rank r's send[0, bytes), for every r.
  virtual Status all_gather(const void* send, void* recv, size_t bytes) = 0;
  // data[0, bytes) <- rank |root|'s data[0, bytes).
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;
  virtual Status send(const void* data, size_t bytes, int to) = 0;
  virtual Status recv(void* data, size_t bytes, int from) = 0;
  // Seconds a call may wait for the other ranks before it fails (<= 0: forever, for a follower
  // rank idle between requests).
  virtual void set_timeout(double) {}
  virtual double timeout() const { return 0; }

 protected:
  // The f32 sum behind all_reduce_sum.
  virtual Status all_reduce_f32(float* data, int64_t count) = 0;

 private:
  std::unique_ptr<float[]> scratch_;  // f16/bf16 values widened for the sum
  int64_t scratch_count_ = 0;
};

// One rank: every collective leaves the data as it is.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  Status all_gather(const void* send, void* recv, size_t bytes) override;
  Status broadcast(void*, size_t, int root) override;
  Status send(const void*, size_t, int to) override;
  Status recv(void*, size_t, int from) override;

 protected:
  Status all_reduce_f32(float*, int64_t) override { return OkStatus(); }
};

// The communicator of this process's launch: MPI's world when the process runs under mpirun (or
// TESSERA_COMM=mpi) and Tessera was built with MPI, else a LocalCommunicator. Fails when MPI was
// asked for but is not built in.
Result<std::shared_ptr<Communicator>> open_communicator();

}  // namespace tessera
