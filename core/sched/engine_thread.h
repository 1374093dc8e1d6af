// EngineThread: runs an Engine's step loop on its own thread. Any thread may submit, cancel and
// read stats; token callbacks run on the engine thread and must not block it (hand the event to
// your own queue). The Engine must not be used directly while an EngineThread drives it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/sched/engine.h"

namespace tessera {

class EngineThread {
 public:
  // Starts the thread. |engine| must outlive this object.
  explicit EngineThread(Engine& engine);
  // shutdown(/*drain=*/false) and join.
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Validates on the caller's thread (so a bad request fails here, synchronously) and queues
  // it. Fails with Unavailable after shutdown began.
  Result<RequestId> submit(GenerationRequest req);
  // Runs |fn| on the engine thread between two steps (no step is in flight, so it may change
  // the model, e.g. load or unload a LoRA adapter) and returns its status; the caller waits.
  // Unavailable after shutdown began.
  Status call(std::function<Status(Engine&)> fn);
  // The checks submit makes (thread-safe).
  Status validate(const GenerationRequest& req) const { return engine_.validate(req); }
  // Cancels |id| (its callback gets a kCancelled finish event on the engine thread). Unknown or
  // finished ids are ignored.
  void cancel(RequestId id);
  // Stops taking requests. drain: run every queued and running request to its end first;
  // otherwise cancel them. Blocks until the thread exited. Idempotent.
  void shutdown(bool drain);

  // The engine's stats after its latest step, plus requests still in the inbox as waiting.
  EngineStats stats() const;
  // The status of the last failed step (OK if none): the requests in it finished with kError.
  Status last_error() const;
  // How many stats snapshots have been published (one after each pass of the loop, so after the
  // token callbacks of that pass). A callback that reads it gets N: what its event changed
  // (a finished request's blocks, its tokens) is in stats() once the version reaches N + 1.
  uint64_t stats_version() const { return stats_version_.load(); }
  // Blocks until stats_version() >= |version|, |timeout| passes or the thread has exited.
  void wait_stats_version(uint64_t version, std::chrono::milliseconds timeout) const;

 private:
  void loop();

  Engine& engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<RequestId, GenerationRequest>> inbox_;
  std::vector<RequestId> cancels_;
  struct Call {
    std::function<Status(Engine&)> fn;
    std::promise<Status> done;
  };
  std::deque<Call> calls_;
  bool stopping_ = false;
  bool drain_ = false;
  EngineStats stats_;
  std::atomic<uint64_t> stats_version_{0};
  mutable std::condition_variable published_;  // notified with each new stats_version_
  bool exited_ = false;
  Status last_error_;
  std::thread thread_;
};

}  // namespace tessera
