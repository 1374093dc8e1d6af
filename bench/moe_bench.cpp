// `tessera-bench moe --moe MOE.gguf --dense DENSE.gguf`: prefill and decode tokens/s of a
// mixture-of-experts model against a dense model of equal active parameters, alternating the two
// in one run (so machine noise hits both alike), then the MoE's expert load per layer.
// The target of issue #7: MoE decode costs no more than 1.3x the dense model's.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/commands.h"
#include "bench/model_run.h"
#include "core/registry.h"
#include "models/gguf/gguf.h"
#include "models/model.h"

namespace tessera::bench {

namespace {

// Whether |name| is a routed-expert weight: merged blk.N.ffn_gate_exps.weight or per-expert
// blk.N.ffn_gate.E.weight.
bool is_expert_tensor(const std::string& name) {
  if (name.find("_exps.weight") != std::string::npos) return true;
  for (const char* kind : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
    const size_t at = name.find(kind);
    if (at == std::string::npos) continue;
    const size_t digits = at + std::strlen(kind);
    return digits < name.size() && name[digits] >= '0' && name[digits] <= '9';
  }
  return false;
}

// Weight bytes one decode token reads: the dense figure with only k of E experts per layer.
double active_bytes_per_token(const Model& m) {
  const ModelConfig& c = m.config();
  double bytes = weight_bytes_per_token(m);
  if (!c.is_moe()) return bytes;
  for (const Tensor* t : m.weight_tensors())
    if (is_expert_tensor(t->name)) bytes -= double(t->nbytes()) * (1.0 - double(c.n_experts_used) / c.n_experts);
  return bytes;
}

struct Figures {
  std::vector<double> prefill, decode;
};

Status measure(Model& m, const MoeBenchArgs& a, Figures* f) {
  TS_ASSIGN_OR_RETURN(RunResult r, run_requests(m, 1, a.prompt, a.decode));
  f->prefill.push_back(r.prefill_tps);
  f->decode.push_back(r.decode_tps);
  return OkStatus();
}

int fail(const Status& s) {
  std::fprintf(stderr, "tessera-bench moe: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int run_moe_bench(const MoeBenchArgs& a) {
  auto dev = make_cpu_device(a.threads);
  auto moe = Model::load(a.moe, dev);
  if (!moe.ok()) return fail(moe.status());
  auto dense = Model::load(a.dense, dev);
  if (!dense.ok()) return fail(dense.status());
  const ModelConfig& mc = (*moe)->config();
  if (!mc.is_moe()) return fail(InvalidArgument(a.moe + ": not a mixture-of-experts model"));
  std::printf("threads %d, batch 1, prompt %d tokens, decode %d tokens, %d alternating repeats (medians)\n", a.threads,
              a.prompt, a.decode, a.repeats);
  for (const auto& [m, path] : {std::pair<const Model*, std::string>{moe->get(), a.moe}, {dense->get(), a.dense}}) {
    const ModelConfig& c = m->config();
    const std::string ffn = c.is_moe() ? std::to_string(c.n_experts) + " experts top-" + std::to_string(c.n_experts_used) +
                                             " of FFN " + std::to_string(c.n_ff_exp)
                                       : "FFN " + std::to_string(c.n_ff);
    std::printf("%-5s %s: %d layers, dim %d, %s, %.1f M parameters, %.1f MB of weights read per decode token\n",
                c.is_moe() ? "moe" : "dense", path.c_str(), c.n_layers, c.n_embd, ffn.c_str(), parameters(*m) / 1e6,
                active_bytes_per_token(*m) / 1e6);
  }
  Figures fm, fd;
  for (int rep = 0; rep < a.repeats; ++rep) {
    if (Status s = measure(**dense, a, &fd); !s.ok()) return fail(s);
    if (Status s = measure(**moe, a, &fm); !s.ok()) return fail(s);
  }
  const double pm = median_of(fm.prefill), pd = median_of(fd.prefill);
  const double dm = median_of(fm.decode), dd = median_of(fd.decode);
  std::printf("%-6s %12s %12s\n", "", "prefill t/s", "decode t/s");
  std::printf("%-6s %12.1f %12.1f\n", "moe", pm, dm);
  std::printf("%-6s %12.1f %12.1f\n", "dense", pd, dd);
  const double decode_cost = dm > 0 ? dd / dm : 0.0, prefill_cost = pm > 0 ? pd / pm : 0.0;
  std::printf("MoE cost relative to dense: decode %.2fx, prefill %.2fx (decode target <= 1.30x: %s)\n", decode_cost,
              prefill_cost, decode_cost <= 1.3 ? "met" : "missed");
  // The expert load of one more (untimed) run: collection downloads the routes every step.
  (*moe)->set_collect_expert_stats(true);
  if (auto r = run_requests(**moe, 1, a.prompt, a.decode); !r.ok()) return fail(r.status());
  std::fputs(expert_stats_table((*moe)->expert_stats()).c_str(), stdout);
  return 0;
}

}  // namespace tessera::bench
