#include "server/signals.h"

#include <pthread.h>

#include <csignal>

namespace tessera::server {

SignalWatcher::SignalWatcher() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

void SignalWatcher::start(std::function<void(int, int)> on_signal) {
  thread_ = std::thread([this, on_signal] {
    int count = 0;
    while (!done_) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0 || done_) break;
      on_signal(sig, ++count);
    }
  });
}

void SignalWatcher::stop() {
  if (!thread_.joinable()) return;
  done_ = true;
  pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait when no signal came
  thread_.join();
}

}  // namespace tessera::server
