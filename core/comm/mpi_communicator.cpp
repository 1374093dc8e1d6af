#include "core/comm/mpi_communicator.h"

// The C API only: Open MPI and MPICH would otherwise pull in their deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tessera {

namespace {

// Set when a call timed out: the world is broken, and MPI_Finalize (a collective) would wait for
// the rank that is gone, so the process exits without it.
std::atomic<bool> g_broken{false};

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

Status check_bytes(const char* what, size_t bytes) {
  return bytes <= size_t(INT_MAX) ? OkStatus()
                                  : InvalidArgument(std::string(what) + ": " + std::to_string(bytes) +
                                                    " bytes is more than one MPI call carries (2^31 - 1)");
}

}  // namespace

Result<std::shared_ptr<MpiCommunicator>> MpiCommunicator::world() {
  static std::once_flag once;
  static int init_error = MPI_SUCCESS;
  std::call_once(once, [] {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) return;
    int provided = 0;
    // The engine's thread may make the calls, one thread at a time.
    init_error = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (init_error != MPI_SUCCESS) return;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int finalised = 0;
      MPI_Finalized(&finalised);
      if (!finalised && !g_broken.load()) MPI_Finalize();
    });
  });
  if (init_error != MPI_SUCCESS) return Unavailable("MPI_Init_thread failed: " + mpi_error(init_error));
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double timeout = 60;
  if (const char* t = std::getenv("TESSERA_COMM_TIMEOUT_S")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end == t || *end || !(v > 0))
      return InvalidArgument(std::string("TESSERA_COMM_TIMEOUT_S=") + t + ": expected a positive number of seconds");
    timeout = v;
  }
  return std::shared_ptr<MpiCommunicator>(new MpiCommunicator(rank, size, timeout));
}

Status MpiCommunicator::finish(void* request, const char* what, size_t bytes) {
  auto* req = static_cast<MPI_Request*>(request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  ++calls_;
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return Unavailable("rank " + std::to_string(rank_) + ": " + what + " #" + std::to_string(calls_) + " (" +
                         std::to_string(bytes) + " bytes) failed: " + mpi_error(rc));
    if (done) return OkStatus();
    if (timeout_s_ > 0 && std::chrono::steady_clock::now() > deadline) {
      // (MPI cannot cancel a collective: the request is abandoned with the run.)
      g_broken.store(true);
      return Unavailable("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + what + " #" +
                         std::to_string(calls_) + " (" + std::to_string(bytes) + " bytes) did not complete in " +
                         std::to_string(int(timeout_s_)) + " s: another rank died or stalled");
    }
    // Short steps spin (a step's collectives come microseconds apart); long waits sleep.
    if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 1000 : 50));
  }
}

Status MpiCommunicator::all_reduce_f32(float* data, int64_t count) {
  if (size_ == 1 || count == 0) return OkStatus();
  TS_RETURN_IF_ERROR(check_bytes("all_reduce", size_t(count) * 4));
  MPI_Request req;
  const int rc = MPI_Iallreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS) return Unavailable("all_reduce: " + mpi_error(rc));
  return finish(&req, "all_reduce", size_t(count) * 4);
}

Status MpiCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  TS_RETURN_IF_ERROR(check_bytes("all_gather", bytes));
  MPI_Request req;
  const int rc = MPI_Iallgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS) return Unavailable("all_gather: " + mpi_error(rc));
  return finish(&req, "all_gather", bytes);
}

Status MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  TS_RETURN_IF_ERROR(check_bytes("broadcast", bytes));
  if (root < 0 || root >= size_)
    return InvalidArgument("broadcast from rank " + std::to_string(root) + " of " + std::to_string(size_));
  MPI_Request req;
  const int rc = MPI_Ibcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS) return Unavailable("broadcast: " + mpi_error(rc));
  return finish(&req, "broadcast", bytes);
}

Status MpiCommunicator::send(const void* data, size_t bytes, int to) {
  TS_RETURN_IF_ERROR(check_bytes("send", bytes));
  if (to < 0 || to >= size_ || to == rank_)
    return InvalidArgument("send to rank " + std::to_string(to) + " from rank " + std::to_string(rank_) + " of " +
                           std::to_string(size_));
  MPI_Request req;
  const int rc = MPI_Isend(data, int(bytes), MPI_BYTE, to, 0, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS) return Unavailable("send: " + mpi_error(rc));
  return finish(&req, "send", bytes);
}

Status MpiCommunicator::recv(void* data, size_t bytes, int from) {
  TS_RETURN_IF_ERROR(check_bytes("recv", bytes));
  if (from < 0 || from >= size_ || from == rank_)
    return InvalidArgument("recv from rank " + std::to_string(from) + " on rank " + std::to_string(rank_) + " of " +
                           std::to_string(size_));
  MPI_Request req;
  const int rc = MPI_Irecv(data, int(bytes), MPI_BYTE, from, 0, MPI_COMM_WORLD, &req);
  if (rc != MPI_SUCCESS) return Unavailable("recv: " + mpi_error(rc));
  return finish(&req, "recv", bytes);
}

}  // namespace tessera
