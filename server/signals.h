// SIGTERM/SIGINT, waited for on a thread of their own (so a handler may take locks and join
// threads, which a signal handler may not).
#pragma once
#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace tessera::server {

class SignalWatcher {
 public:
  // Blocks SIGTERM and SIGINT in the calling thread; construct it before starting any thread, so
  // they all inherit the mask. Also ignores SIGPIPE: a client gone mid-write is an error return.
  SignalWatcher();
  // Calls |on_signal| (on the watcher's thread) with each signal that arrives and how many have
  // arrived so far (1 for the first).
  void start(std::function<void(int sig, int count)> on_signal);
  // Ends the watcher; call before what on_signal refers to goes away. Idempotent.
  void stop();
  ~SignalWatcher() { stop(); }

 private:
  std::atomic<bool> done_{false};
  sigset_t set_;
  std::thread thread_;
};

}  // namespace tessera::server
