#include "core/sched/engine_thread.h"

namespace tessera {

EngineThread::EngineThread(Engine& engine) : engine_(engine) {
  stats_ = engine_.stats();
  thread_ = std::thread([this] { loop(); });
}

EngineThread::~EngineThread() { shutdown(/*drain=*/false); }

Result<RequestId> EngineThread::submit(GenerationRequest req) {
  TS_RETURN_IF_ERROR(engine_.validate(req));
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Unavailable("the engine is shutting down");
  const RequestId id = engine_.reserve_id();
  inbox_.emplace_back(id, std::move(req));
  ++stats_.waiting;
  cv_.notify_one();
  return id;
}

Status EngineThread::call(std::function<Status(Engine&)> fn) {
  std::future<Status> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    calls_.push_back(Call{std::move(fn), {}});
    result = calls_.back().done.get_future();
    cv_.notify_one();
  }
  return result.get();
}

void EngineThread::cancel(RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
  cv_.notify_one();
}

void EngineThread::shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) drain_ = drain;
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

EngineStats EngineThread::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineThread::wait_stats_version(uint64_t version, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  published_.wait_for(lock, timeout, [&] { return exited_ || stats_version_.load() >= version; });
}

Status EngineThread::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void EngineThread::loop() {
  bool idle = true;
  while (true) {
    std::deque<std::pair<RequestId, GenerationRequest>> inbox;
    std::vector<RequestId> cancels;
    std::deque<Call> calls;
    bool stopping, drain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || !calls_.empty() || !idle; });
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      calls.swap(calls_);
      stopping = stopping_;
      drain = drain_;
    }
    // Calls first: a request that arrived with a call was validated against the model before it.
    for (Call& c : calls) c.done.set_value(c.fn(engine_));
    // Submits before cancels: a cancel may name a request that arrived in the same batch.
    for (auto& [id, req] : inbox) {
      TokenCallback cb = req.on_token;
      const Status s = engine_.submit_as(id, std::move(req));
      if (!s.ok() && cb) {  // validated on submit, so only a changed engine gets here
        TokenEvent ev{id, 0, -1, {}, 0.0f, {}};
        ev.finish = FinishReason::kError;
        ev.error = s.to_string();
        cb(ev);
      }
    }
    for (RequestId id : cancels) engine_.cancel(id);
    if (stopping && !drain) engine_.cancel_all();
    Status step_status = OkStatus();
    if (!engine_.idle()) step_status = engine_.step();
    idle = engine_.idle();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = engine_.stats();
      stats_.waiting += int32_t(inbox_.size());
      ++stats_version_;
      published_.notify_all();
      if (!step_status.ok()) last_error_ = step_status;
      if (stopping_ && idle && inbox_.empty() && calls_.empty()) {
        // Requests that raced shutdown (none: submit refuses once stopping_) would be here.
        exited_ = true;
        break;
      }
    }
  }
}

}  // namespace tessera
