#include "core/comm/communicator.h"

#include <cstdlib>
#include <cstring>

#include "quant/half.h"
#ifdef TESSERA_HAVE_MPI
#include "core/comm/mpi_communicator.h"
#endif

namespace tessera {

Status Communicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  if (count < 0) return InvalidArgument("all_reduce_sum: negative count " + std::to_string(count));
  if (dtype == DType::kF32) return all_reduce_f32(static_cast<float*>(data), count);
  if (dtype != DType::kF16 && dtype != DType::kBF16)
    return InvalidArgument(std::string("all_reduce_sum: ") + dtype_name(dtype) +
                           " values cannot be summed (f32, f16, bf16)");
  if (scratch_count_ < count) {
    scratch_.reset(new float[size_t(count)]);
    scratch_count_ = count;
  }
  auto* h = static_cast<uint16_t*>(data);
  float* f = scratch_.get();
  const bool half = dtype == DType::kF16;
  for (int64_t i = 0; i < count; ++i) f[i] = half ? fp16_to_f32(h[i]) : bf16_to_f32(h[i]);
  TS_RETURN_IF_ERROR(all_reduce_f32(f, count));
  for (int64_t i = 0; i < count; ++i) h[i] = half ? f32_to_fp16(f[i]) : f32_to_bf16(f[i]);
  return OkStatus();
}

namespace {
Status only_rank(const char* what, int r) {
  return r == 0 ? OkStatus()
                : InvalidArgument(std::string(what) + ": rank " + std::to_string(r) + " of a one-rank communicator");
}
}  // namespace

Status LocalCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  if (bytes && send != recv) std::memmove(recv, send, bytes);
  return OkStatus();
}
Status LocalCommunicator::broadcast(void*, size_t, int root) { return only_rank("broadcast", root); }
Status LocalCommunicator::send(const void*, size_t, int to) {
  return Unimplemented("send to rank " + std::to_string(to) + ": a one-rank communicator has no peer");
}
Status LocalCommunicator::recv(void*, size_t, int from) {
  return Unimplemented("recv from rank " + std::to_string(from) + ": a one-rank communicator has no peer");
}

Result<std::shared_ptr<Communicator>> open_communicator() {
  const char* want = std::getenv("TESSERA_COMM");
  // mpirun (Open MPI, MPICH / Hydra) tells its processes their place in these variables.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  const bool mpi = want ? std::strcmp(want, "mpi") == 0 : launched;
  if (want && !mpi && std::strcmp(want, "local") != 0)
    return InvalidArgument(std::string("TESSERA_COMM=") + want + ": unknown communicator (local, mpi)");
  if (!mpi) return std::shared_ptr<Communicator>(std::make_shared<LocalCommunicator>());
#ifdef TESSERA_HAVE_MPI
  TS_ASSIGN_OR_RETURN(auto c, MpiCommunicator::world());
  return std::shared_ptr<Communicator>(std::move(c));
#else
  return Unimplemented(
      "this process runs under mpirun (or TESSERA_COMM=mpi) but Tessera was built without MPI "
      "(install libopenmpi-dev and reconfigure)");
#endif
}

}  // namespace tessera
