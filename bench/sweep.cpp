#include "bench/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>

#include "bench/device_clock.h"
#include "bench/inputs.h"
#include "bench/timing.h"

namespace tessera::bench {

std::vector<ModelShape> sweep_models(bool quick) {
  std::vector<ModelShape> m = {
      {"smollm2-135m", 576, 9, 3, 64, 1536, 49152},
      // A synthetic 8-expert MoE layer (Mixtral-style routing, top-2) small enough for f32 weights.
      {"moe-8x", 2048, 16, 4, 128, 2816, 32000, 8, 2},
      {"llama-1b", 2048, 32, 8, 64, 8192, 32000},
      {"llama-8b", 4096, 32, 8, 128, 14336, 128256},
  };
  if (quick) m.resize(2);
  return m;
}

std::vector<Phase> sweep_phases(bool quick) {
  if (quick) return {{"decode-b1", 1, 1, 256}, {"decode-b8", 8, 1, 256}};
  return {{"decode-b1", 1, 1, 1024}, {"decode-b8", 8, 1, 1024}, {"decode-b32", 32, 1, 1024},
          {"prefill-512", 1, 512, 512}};
}

namespace {

// Weight dtypes |device| runs |op| with for an f32 activation, from the dtype table (so a new
// format appears here by itself), whose blocks divide |k|.
std::vector<DType> weight_dtypes(const Device& device, OpKind op, int64_t k) {
  std::vector<DType> out;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeTraits& t = dtype_table()[i];
    if (!(t.is_float || t.is_quantized) || !t.quantize_row) continue;
    if (!dtype_row_check(t.dtype, k).empty()) continue;
    if (device.supports(op, DType::kF32, t.dtype)) out.push_back(t.dtype);
  }
  return out;
}

void add_model_phase(const Device& dev, const ModelShape& ms, const Phase& ph, std::vector<KernelCase>& out) {
  const int64_t T = ph.seqs * ph.new_tokens;
  auto base = [&](const char* name, OpKind op) {
    KernelCase c;
    c.model = ms.name;
    c.phase = ph.name;
    c.name = name;
    c.op = op;
    return c;
  };
  auto matmuls = [&](const char* name, int64_t m, int64_t n, int64_t k) {
    for (DType w : weight_dtypes(dev, OpKind::kMatmul, k)) {
      KernelCase c = base(name, OpKind::kMatmul);
      c.weight = w, c.m = m, c.n = n, c.k = k;
      out.push_back(c);
    }
  };
  if (ms.experts > 0) {
    KernelCase router = base("moe_router", OpKind::kMatmul);
    router.m = T, router.n = ms.experts, router.k = ms.dim;
    out.push_back(router);
    for (auto [name, n, k] : {std::tuple{"moe_up", ms.ffn, ms.dim}, std::tuple{"moe_down", ms.dim, ms.ffn}})
      for (DType w : weight_dtypes(dev, OpKind::kMatmulId, k)) {
        KernelCase c = base(name, OpKind::kMatmulId);
        c.weight = w, c.m = T, c.n = n, c.k = k, c.experts = ms.experts, c.slots = ms.experts_used;
        out.push_back(c);
      }
    return;
  }
  matmuls("attn_q", T, ms.q_heads * ms.head_dim, ms.dim);   // also attn_o (same shape, transposed roles)
  matmuls("attn_kv", T, ms.kv_heads * ms.head_dim, ms.dim);
  matmuls("ffn_up", T, ms.ffn, ms.dim);                     // also ffn_gate
  matmuls("ffn_down", T, ms.dim, ms.ffn);
  matmuls("lm_head", ph.seqs, ms.vocab, ms.dim);            // logits only for each sequence's last row
  for (DType cache : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (!dev.supports(OpKind::kAttention, DType::kF32, cache)) continue;
    KernelCase c = base("attention", OpKind::kAttention);
    c.weight = cache;
    c.attn = {ph.seqs, ph.new_tokens, ph.context, ms.q_heads, ms.kv_heads, ms.head_dim, 16, DType::kF32, cache};
    out.push_back(c);
  }
  KernelCase norm = base("rms_norm", OpKind::kRmsNorm);
  norm.m = T, norm.n = ms.dim;
  KernelCase rope = base("rope_q", OpKind::kRope);
  rope.m = T, rope.heads = ms.q_heads, rope.head_dim = ms.head_dim;
  KernelCase glu = base("swiglu", OpKind::kGlu);
  glu.m = T, glu.n = ms.ffn;
  KernelCase add = base("residual_add", OpKind::kAdd);
  add.m = T, add.n = ms.dim;
  for (const KernelCase& c : {norm, rope, glu, add})
    if (dev.supports(c.op, DType::kF32, DType::kF32)) out.push_back(c);
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType w = dtype_table()[i].dtype;
    if (!dtype_table()[i].quantize_row || !dtype_row_check(w, ms.dim).empty()) continue;
    if (!dev.supports(OpKind::kEmbed, DType::kF32, w)) continue;
    KernelCase c = base("embed", OpKind::kEmbed);
    // A gather reads T rows: a table of up to 256 MiB (beyond the last-level cache) measures the
    // same thing as the full vocabulary without generating gigabytes of random weights.
    const int64_t rows_cap = std::max<int64_t>(1024, (int64_t(256) << 20) / dtype_row_bytes(w, ms.dim));
    c.weight = w, c.m = T, c.n = ms.dim, c.vocab = std::min(ms.vocab, rows_cap);
    out.push_back(c);
  }
}

}  // namespace

std::vector<KernelCase> sweep_cases(const Device& device, bool quick) {
  std::vector<KernelCase> out;
  for (const auto& m : sweep_models(quick))
    for (const auto& p : sweep_phases(quick)) add_model_phase(device, m, p, out);
  return out;
}

Cost case_cost(const KernelCase& c) {
  switch (c.op) {
    case OpKind::kMatmul: return matmul_cost(c.m, c.n, c.k, c.act, c.weight);
    case OpKind::kMatmulId: return matmul_id_cost(c.m, c.slots, c.experts, c.n, c.k, c.act, c.weight);
    case OpKind::kAttention: return attention_cost(c.attn);
    case OpKind::kRmsNorm: return rms_norm_cost(c.m, c.n, c.act);
    case OpKind::kRope: return rope_cost(c.m, c.heads, c.head_dim, c.head_dim, c.act);
    case OpKind::kGlu: return glu_cost(c.m, c.n, c.act);
    case OpKind::kAdd: return binary_cost(c.m, c.n, c.m, c.act);
    case OpKind::kEmbed: return embed_cost(c.m, c.n, c.weight, c.act);
    case OpKind::kCopy: return {2.0 * dtype_bytes(c.act, c.m * c.n), 0.0};
    default: return {};
  }
}

double case_set_bytes(const KernelCase& c) {
  switch (c.op) {
    case OpKind::kMatmulId:
      return case_cost(c).bytes + double(c.experts - std::min(c.experts, c.m * c.slots)) * double(c.n) *
                                      dtype_bytes(c.weight, c.k);
    case OpKind::kEmbed: return double(c.vocab) * dtype_bytes(c.weight, c.n) + case_cost(c).bytes;
    default: return case_cost(c).bytes;
  }
}

std::string case_shape(const KernelCase& c) {
  char buf[160];
  switch (c.op) {
    case OpKind::kMatmul:
      std::snprintf(buf, sizeof buf, "M=%lld N=%lld K=%lld", (long long)c.m, (long long)c.n, (long long)c.k);
      break;
    case OpKind::kMatmulId:
      std::snprintf(buf, sizeof buf, "T=%lld top%lld of E=%lld N=%lld K=%lld", (long long)c.m, (long long)c.slots,
                    (long long)c.experts, (long long)c.n, (long long)c.k);
      break;
    case OpKind::kAttention:
      std::snprintf(buf, sizeof buf, "seqs=%lld new=%lld ctx=%lld Hq=%lld Hkv=%lld D=%lld", (long long)c.attn.n_seqs,
                    (long long)c.attn.new_tokens, (long long)c.attn.context, (long long)c.attn.q_heads,
                    (long long)c.attn.kv_heads, (long long)c.attn.head_dim);
      break;
    case OpKind::kRope:
      std::snprintf(buf, sizeof buf, "T=%lld H=%lld D=%lld", (long long)c.m, (long long)c.heads, (long long)c.head_dim);
      break;
    case OpKind::kEmbed:
      std::snprintf(buf, sizeof buf, "T=%lld of [%lld, %lld]", (long long)c.m, (long long)c.vocab, (long long)c.n);
      break;
    default: std::snprintf(buf, sizeof buf, "[%lld, %lld]", (long long)c.m, (long long)c.n);
  }
  return buf;
}

std::string case_key(const KernelCase& c) {
  return c.model + "/" + c.phase + "/" + c.name + "/" + dtype_name(c.weight);
}

namespace {

Result<ValueId> build_attention(const KernelCase& c, InputPlacer& p, Graph& g) {
  const AttentionShape& a = c.attn;
  const int64_t T = a.n_seqs * a.new_tokens, bps = (a.context + a.block_size - 1) / a.block_size;
  std::vector<int32_t> slots, starts, lens, tables;
  for (int64_t s = 0; s < a.n_seqs; ++s) {
    for (int64_t i = 0; i < a.new_tokens; ++i) {
      const int64_t pos = a.context - a.new_tokens + i;
      slots.push_back(int32_t((s * bps + pos / a.block_size) * a.block_size + pos % a.block_size));
    }
    starts.push_back(int32_t(s * a.new_tokens));
    lens.push_back(int32_t(a.context));
    for (int64_t b = 0; b < bps; ++b) tables.push_back(int32_t(s * bps + b));
  }
  starts.push_back(int32_t(T));
  Graph::AttentionInputs in{};
  TS_ASSIGN_OR_RETURN(in.q, p.random(g, Tensor::make(a.act, {T, a.q_heads, a.head_dim})));
  TS_ASSIGN_OR_RETURN(in.k, p.random(g, Tensor::make(a.act, {T, a.kv_heads, a.head_dim})));
  TS_ASSIGN_OR_RETURN(in.v, p.random(g, Tensor::make(a.act, {T, a.kv_heads, a.head_dim})));
  const Tensor cache = Tensor::make(a.cache, {a.n_seqs * bps, a.block_size, a.kv_heads, a.head_dim});
  TS_ASSIGN_OR_RETURN(in.k_cache, p.random(g, cache));
  TS_ASSIGN_OR_RETURN(in.v_cache, p.random(g, cache));
  TS_ASSIGN_OR_RETURN(in.slot_mapping, p.i32(g, Tensor::make(DType::kI32, {T}), slots));
  TS_ASSIGN_OR_RETURN(in.query_start, p.i32(g, Tensor::make(DType::kI32, {a.n_seqs + 1}), starts));
  TS_ASSIGN_OR_RETURN(in.seq_lens, p.i32(g, Tensor::make(DType::kI32, {a.n_seqs}), lens));
  TS_ASSIGN_OR_RETURN(in.block_tables, p.i32(g, Tensor::make(DType::kI32, {a.n_seqs, bps}), tables));
  return g.attention(in, AttentionParams{});
}

Result<ValueId> build_matmul_id(const KernelCase& c, InputPlacer& p, Graph& g) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < c.m * c.slots; ++i) ids.push_back(int32_t(i % c.experts));  // balanced routing
  TS_ASSIGN_OR_RETURN(ValueId x, p.random(g, Tensor::make(c.act, {c.m, c.k})));
  TS_ASSIGN_OR_RETURN(ValueId w, p.random(g, Tensor::make(c.weight, {c.experts, c.n, c.k})));
  TS_ASSIGN_OR_RETURN(ValueId r, p.i32(g, Tensor::make(DType::kI32, {c.m, c.slots}), ids));
  TS_ASSIGN_OR_RETURN(ValueId wt, p.random(g, Tensor::make(DType::kF32, {c.m, c.slots})));
  return g.matmul_id(x, w, r, wt);
}

Result<ValueId> build_node(const KernelCase& c, InputPlacer& p, Graph& g) {
  switch (c.op) {
    case OpKind::kMatmul: {
      TS_ASSIGN_OR_RETURN(ValueId x, p.random(g, Tensor::make(c.act, {c.m, c.k})));
      TS_ASSIGN_OR_RETURN(ValueId w, p.random(g, Tensor::make(c.weight, {c.n, c.k})));
      return g.matmul(x, w);
    }
    case OpKind::kMatmulId: return build_matmul_id(c, p, g);
    case OpKind::kAttention: return build_attention(c, p, g);
    case OpKind::kRmsNorm: {
      TS_ASSIGN_OR_RETURN(ValueId x, p.random(g, Tensor::make(c.act, {c.m, c.n})));
      TS_ASSIGN_OR_RETURN(ValueId w, p.random(g, Tensor::make(c.act, {c.n})));
      return g.rms_norm(x, w, 1e-5f);
    }
    case OpKind::kRope: {
      TS_ASSIGN_OR_RETURN(ValueId x, p.random(g, Tensor::make(c.act, {c.m, c.heads, c.head_dim})));
      std::vector<int32_t> pos(size_t(c.m));
      std::iota(pos.begin(), pos.end(), 100);
      TS_ASSIGN_OR_RETURN(ValueId ps, p.i32(g, Tensor::make(DType::kI32, {c.m}), pos));
      RopeParams rp;
      rp.n_dims = int(c.head_dim);
      return g.rope(x, ps, rp);
    }
    case OpKind::kGlu:
    case OpKind::kAdd: {
      TS_ASSIGN_OR_RETURN(ValueId a, p.random(g, Tensor::make(c.act, {c.m, c.n})));
      TS_ASSIGN_OR_RETURN(ValueId b, p.random(g, Tensor::make(c.act, {c.m, c.n})));
      return c.op == OpKind::kGlu ? g.swiglu(a, b) : g.add(a, b);
    }
    case OpKind::kEmbed: {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < c.m; ++i) ids.push_back(int32_t((i * 7919 + 13) % c.vocab));  // scattered rows
      TS_ASSIGN_OR_RETURN(ValueId w, p.random(g, Tensor::make(c.weight, {c.vocab, c.n})));
      TS_ASSIGN_OR_RETURN(ValueId r, p.i32(g, Tensor::make(DType::kI32, {c.m}), ids));
      return g.embed(w, r, c.act);
    }
    case OpKind::kCopy: {
      TS_ASSIGN_OR_RETURN(ValueId x, p.random(g, Tensor::make(c.act, {c.m, c.n})));
      return g.copy(x);
    }
    default: return Unimplemented(std::string("bench: no case builder for op ") + op_name(c.op));
  }
}

}  // namespace

Result<Graph> build_case(const KernelCase& c, InputPlacer& placer) {
  Graph g;
  placer.begin_set();
  TS_ASSIGN_OR_RETURN(ValueId out, build_node(c, placer, g));
  if (!g.status().ok()) return g.status();
  g.mark_output(out);
  return g;
}

int64_t last_level_cache_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (!(f >> s) || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    if (s.back() == 'K') v <<= 10;
    if (s.back() == 'M') v <<= 20;
    best = std::max(best, v);
  }
  return best > 0 ? best : int64_t(32) << 20;
}

namespace {

// What each (op, weight dtype) class has achieved so far, to skip kernels that would take too
// long (the scalar reference at 8B prefill shapes would take minutes per call).
struct RateTracker {
  std::map<std::string, std::pair<double, double>> best;  // class -> (bytes/s, flop/s)
  static std::string cls(const KernelCase& c) { return std::string(op_name(c.op)) + "/" + dtype_name(c.weight); }
  // A lower bound of the seconds per call; 0 when nothing of this class was measured yet.
  double predict(const KernelCase& c, const Cost& cost) const {
    auto it = best.find(cls(c));
    if (it == best.end()) return 0.0;
    const double tb = it->second.first > 0 ? cost.bytes / it->second.first : 0.0;
    const double tf = it->second.second > 0 ? cost.flops / it->second.second : 0.0;
    return std::max(tb, tf);
  }
  void record(const KernelCase& c, const Cost& cost, double seconds) {
    auto& b = best[cls(c)];
    b.first = std::max(b.first, cost.bytes / seconds);
    b.second = std::max(b.second, cost.flops / seconds);
  }
};

Status measure_case(Device& device, const KernelCase& c, const BufferPtr& slab, ImageCache& cache,
                    const SweepOptions& o, KernelResult& r) {
  InputPlacer placer(device, slab, &cache);
  std::vector<Graph> graphs;
  TS_ASSIGN_OR_RETURN(Graph first, build_case(c, placer));
  const double set = double(std::max<int64_t>(placer.set_bytes(), 1));
  graphs.push_back(std::move(first));
  const int copies = int(std::clamp(std::ceil(o.working_set_bytes / set), 1.0, 4096.0));
  // Past the slab, more copies would each allocate: stop at twice the working-set target.
  while (int(graphs.size()) < copies && double(placer.total_bytes()) + set <= 2 * o.working_set_bytes) {
    TS_ASSIGN_OR_RETURN(Graph g, build_case(c, placer));
    graphs.push_back(std::move(g));
  }
  r.copies = int(graphs.size());
  r.working_set_bytes = double(placer.total_bytes());
  TimingBudget budget;
  budget.budget_s = o.budget_s;
  budget.max_samples = o.quick ? 5 : 9;
  budget.min_sample_s = o.quick ? 0.002 : 0.01;  // longer samples average over scheduler noise
  std::string note;
  TS_ASSIGN_OR_RETURN(r.seconds, time_graphs(device, graphs, budget, &note));
  r.status = "ok";
  r.note = note;
  return OkStatus();
}

}  // namespace

std::vector<KernelResult> run_sweep(Device& device, const DeviceReport& ceilings, const std::vector<KernelCase>& cases,
                                    const SweepOptions& o) {
  std::vector<KernelResult> results(cases.size());
  // Cheapest first, so every class is first measured at its smallest shape and the rate tracker
  // can skip the shapes that would take far too long.
  std::vector<size_t> order(cases.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<Cost> costs;
  for (const auto& c : cases) costs.push_back(case_cost(c));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return costs[a].flops + costs[a].bytes < costs[b].flops + costs[b].bytes;
  });
  auto slab = device.alloc(size_t(o.working_set_bytes) + (16 << 20));
  BufferPtr slab_ptr = slab.ok() ? *slab : nullptr;
  RateTracker rates;
  ImageCache cache;
  int done = 0;
  for (size_t i : order) {
    const KernelCase& c = cases[i];
    KernelResult& r = results[i];
    r.key = case_key(c), r.model = c.model, r.phase = c.phase, r.name = c.name, r.op = op_name(c.op);
    r.act_dtype = dtype_name(c.act), r.weight_dtype = dtype_name(c.weight), r.shape = case_shape(c);
    r.cost = costs[i];
    const double predicted = rates.predict(c, r.cost);
    if (case_set_bytes(c) > o.max_set_bytes) {
      r.status = "skipped";
      r.note = "input set of " + std::to_string(int64_t(case_set_bytes(c) / 1e6)) + " MB exceeds the limit";
    } else if (predicted > o.skip_s) {
      r.status = "skipped";
      char buf[160];
      std::snprintf(buf, sizeof buf, "predicted >= %.1f s per call from this op/dtype's measured rates", predicted);
      r.note = buf;
    } else {
      Status s = measure_case(device, c, slab_ptr, cache, o, r);
      if (!s.ok()) {
        r.status = "failed";
        r.note = s.to_string();
      } else {
        rates.record(c, r.cost, r.seconds.median);
      }
    }
    finish_kernel(ceilings, r);
    ++done;
    if (o.verbose)
      std::fprintf(stderr, "\r[%d/%zu] %-60s", done, cases.size(), r.key.c_str());
  }
  if (o.verbose) std::fprintf(stderr, "\n");
  return results;
}

}  // namespace tessera::bench
