// `tessera-bench contention MODEL`: prefill and decode tokens/s at batch 1 while 0, 1, 2 ...
// busy processes (children of the bench, spinning on one core each) compete for the CPUs: for
// the default settings (adaptive width, physical cores), for each fixed thread count
// (TESSERA_CPU_ADAPT=0), and for llama.cpp's llama-bench at its default and each -t when the
// peer is built (bench/peer, /work/shared/peer/llama-cpp.sh). Configurations, llama.cpp's
// included, alternate within each repeat, so a drift of the machine's speed hits them alike.
// The busy children die with the
// bench (PR_SET_PDEATHSIG), at its exit, and after --max-seconds in any case (alarm).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/commands.h"
#include "bench/model_run.h"
#include "core/registry.h"
#include "models/model.h"

namespace tessera::bench {

namespace {

std::vector<pid_t> g_busy;

void stop_busy() {
  for (pid_t p : g_busy) kill(p, SIGKILL);
  for (pid_t p : g_busy) waitpid(p, nullptr, 0);
  g_busy.clear();
}

void on_signal(int sig) {
  for (pid_t p : g_busy) kill(p, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

// Starts |n| processes that spin until killed (or |max_seconds| pass: SIGALRM ends them).
bool start_busy(int n, int max_seconds) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(unsigned(max_seconds));
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    g_busy.push_back(pid);
  }
  usleep(200000);  // let the scheduler see them
  return true;
}

struct Config {
  std::string name;
  int threads = 0;        // 0: the default
  bool adaptive = true;
  std::unique_ptr<Model> model;
};

struct Figures {
  std::vector<double> prefill, decode;
};

// llama-bench's pp and tg tok/s, from its csv output.
bool run_llama_bench(const std::string& bin, const std::string& model, int prompt, int decode, int threads,
                     double* pp, double* tg) {
  std::string cmd = bin + " -m '" + model + "' -p " + std::to_string(prompt) + " -n " + std::to_string(decode) +
                    " -r 1 -o csv";
  if (threads > 0) cmd += " -t " + std::to_string(threads);
  cmd += " 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return false;
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), int(buf.size()), f)) out += buf.data();
  if (pclose(f) != 0) return false;
  // Columns by the header's names (n_prompt, n_gen, avg_ts); cells may be quoted.
  auto split = [](const std::string& line) {
    std::vector<std::string> cols;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) cols.push_back(cell), cell.clear();
      else cell += c;
    }
    cols.push_back(cell);
    return cols;
  };
  std::istringstream lines(out);
  std::string line;
  int c_prompt = -1, c_gen = -1, c_ts = -1;
  bool any = false;
  while (std::getline(lines, line)) {
    const std::vector<std::string> cols = split(line);
    if (c_ts < 0) {
      for (int i = 0; i < int(cols.size()); ++i) {
        if (cols[size_t(i)] == "n_prompt") c_prompt = i;
        if (cols[size_t(i)] == "n_gen") c_gen = i;
        if (cols[size_t(i)] == "avg_ts") c_ts = i;
      }
      if (c_prompt < 0 || c_gen < 0) c_ts = -1;
      continue;
    }
    if (int(cols.size()) <= std::max({c_prompt, c_gen, c_ts})) continue;
    const int n_prompt = std::atoi(cols[size_t(c_prompt)].c_str()), n_gen = std::atoi(cols[size_t(c_gen)].c_str());
    const double tps = std::atof(cols[size_t(c_ts)].c_str());
    if (n_prompt == prompt && n_gen == 0) *pp = tps, any = true;
    if (n_prompt == 0 && n_gen == decode) *tg = tps, any = true;
  }
  return any;
}

std::string find_peer(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!given.empty()) return fs::exists(given, ec) ? given : "";
  const char* home = std::getenv("HOME");
  const std::string dir = std::string(home ? home : "") + "/.cache/tessera-peer";
  if (!fs::exists(dir, ec)) return "";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path bin = e.path() / "build/bin/llama-bench";
    if (fs::exists(bin, ec)) return bin.string();
  }
  return "";
}

}  // namespace

namespace {
// |c|'s model on a CPU device with its thread count (and adaptivity); errors printed.
bool load_config(const std::string& model, Config* c) {
  // The pool reads TESSERA_CPU_ADAPT when it is made.
  if (!c->adaptive) setenv("TESSERA_CPU_ADAPT", "0", 1);
  auto t = resolve_cpu_threads({c->threads, 0});
  if (!t.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", t.status().to_string().c_str());
    return false;
  }
  auto m = Model::load(model, make_cpu_device(*t), LoadOptions{});
  unsetenv("TESSERA_CPU_ADAPT");
  if (!m.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", m.status().to_string().c_str());
    return false;
  }
  if (c->threads == 0) c->name = "default (" + std::to_string(t->threads) + ", adaptive)";
  c->model = std::move(m).value();
  return true;
}

// The rows of one load level: each configuration against the best fixed thread count, then llama.cpp's.
void print_busy_rows(int busy, const std::vector<Config>& configs, const std::vector<Figures>& figs,
                     const std::vector<int>& peer_threads, const std::vector<Figures>& peer_figs) {
  double best_p = 0, best_d = 0;
  for (size_t i = 1; i < configs.size(); ++i) {
    best_p = std::max(best_p, median_of(figs[i].prefill));
    best_d = std::max(best_d, median_of(figs[i].decode));
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const double p = median_of(figs[i].prefill), d = median_of(figs[i].decode);
    std::printf("%-5d %-26s %12.1f %12.1f %13.2fx %13.2fx\n", busy, configs[i].name.c_str(), p, d,
                best_p > 0 ? p / best_p : 0.0, best_d > 0 ? d / best_d : 0.0);
    if (i == 0) {
      const std::string s = cpu_thread_summary(configs[i].model->device());
      if (!s.empty()) std::printf("      (%s)\n", s.c_str());
    }
  }
  for (size_t i = 0; i < peer_threads.size(); ++i) {
    const int t = peer_threads[i];
    const Figures& f = peer_figs[i];
    const std::string name = t == 0 ? "llama.cpp default" : "llama.cpp -t " + std::to_string(t);
    if (f.prefill.empty()) {
      std::printf("%-5d %-26s %12s %12s\n", busy, name.c_str(), "failed", "failed");
      continue;
    }
    const double p = median_of(f.prefill), d = median_of(f.decode);
    std::printf("%-5d %-26s %12.1f %12.1f %13.2fx %13.2fx\n", busy, name.c_str(), p, d, best_p > 0 ? p / best_p : 0.0,
                best_d > 0 ? d / best_d : 0.0);
  }
}
}  // namespace

int run_contention_bench(const ContentionBenchArgs& a) {
  std::atexit(stop_busy);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const int logical = int(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<Config> configs;
  configs.push_back({"default", 0, true, nullptr});
  for (int t : a.threads) configs.push_back({"-t " + std::to_string(t) + " fixed", t, false, nullptr});
  for (Config& c : configs)
    if (!load_config(a.model, &c)) return 1;
  const std::string peer = a.no_peer ? "" : find_peer(a.peer);
  std::printf("model: %s; %d CPUs; prompt %d, decode %d tokens; %d repeats (median)\n", a.model.c_str(), logical,
              a.prompt, a.decode, a.repeats);
  if (peer.empty())
    std::printf("llama.cpp: skipped (%s)\n", a.no_peer ? "--no-peer"
                                                       : "no llama-bench under ~/.cache/tessera-peer; build it with "
                                                         "/work/shared/peer/llama-cpp.sh or pass --peer");
  std::printf("%-5s %-26s %12s %12s %14s %14s\n", "busy", "config", "prefill t/s", "decode t/s", "prefill/best", "decode/best");
  for (int busy : a.busy) {
    if (!start_busy(busy, a.max_seconds)) {
      std::fprintf(stderr, "tessera-bench: fork failed\n");
      return 1;
    }
    std::vector<Figures> figs(configs.size());
    // llama.cpp at its default and each -t, when built: one llama-bench process per run.
    std::vector<int> peer_threads;
    if (!peer.empty()) {
      peer_threads.push_back(0);
      peer_threads.insert(peer_threads.end(), a.threads.begin(), a.threads.end());
    }
    std::vector<Figures> peer_figs(peer_threads.size());
    // One warm-up run each (the adaptive pool settles on the new load), then alternate: every
    // repeat runs each Tessera configuration and then each llama.cpp one.
    for (Config& c : configs) (void)run_requests(*c.model, 1, a.prompt, std::min(a.decode, 16));
    for (int rep = 0; rep < a.repeats; ++rep) {
      for (size_t i = 0; i < configs.size(); ++i) {
        auto r = run_requests(*configs[i].model, 1, a.prompt, a.decode);
        if (!r.ok()) {
          std::fprintf(stderr, "tessera-bench: %s\n", r.status().to_string().c_str());
          return 1;
        }
        figs[i].prefill.push_back(r->prefill_tps);
        figs[i].decode.push_back(r->decode_tps);
      }
      for (size_t i = 0; i < peer_threads.size(); ++i) {
        double p = 0, g = 0;
        if (run_llama_bench(peer, a.model, a.prompt, a.decode, peer_threads[i], &p, &g))
          peer_figs[i].prefill.push_back(p), peer_figs[i].decode.push_back(g);
      }
    }
    print_busy_rows(busy, configs, figs, peer_threads, peer_figs);
    std::fflush(stdout);
    stop_busy();
  }
  std::printf("(x/best: against the best fixed Tessera thread count under the same load)\n");
  return 0;
}

}  // namespace tessera::bench
