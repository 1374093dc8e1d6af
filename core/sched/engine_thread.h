// EngineThread: runs an Engine's step loop on its own thread. Any thread may submit, cancel and
// read stats; token callbacks run on the engine thread and must not block it (hand the event to
// your own queue). The Engine must not be used directly while an EngineThread drives it.
#pragma once
#include <condition_variable>
#include <deque>
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

 private:
  void loop();

  Engine& engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<RequestId, GenerationRequest>> inbox_;
  std::vector<RequestId> cancels_;
  bool stopping_ = false;
  bool drain_ = false;
  EngineStats stats_;
  Status last_error_;
  std::thread thread_;
};

}  // namespace tessera
