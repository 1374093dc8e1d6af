// Conformance cases for embed, matmul and matmul_id.
#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

namespace {
std::string dims(const char* fmt, int64_t a, int64_t b, int64_t c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, fmt, (long long)a, (long long)b, (long long)c);
  return buf;
}
bool quantized(DType t) { return dtype_traits(t).is_quantized; }
}  // namespace

std::vector<Case> linear_cases() {
  std::vector<Case> cases;
  uint64_t seed = 100;
  // Shapes name K for the 32-element formats (multiples of 32, not of 64 or 256, where legal);
  // fit_k rounds them up to whole blocks of the others (K = 256 n for the K-quants).
  for (DType w : all_weight_dtypes()) {
    for (DType a : activation_dtypes()) {
      const std::string tag = std::string("w=") + dtype_name(w) + "/a=" + dtype_name(a);
      // embed: the first and last rows are always among the ids.
      for (int64_t V : {int64_t(5), int64_t(300)}) {
        const int64_t D = quantized(w) ? fit_k(w, 96) : 33;
        cases.push_back({"embed/" + tag + dims("/V=%lld,D=%lld,T=%lld", V, D, 7), OpKind::kEmbed, a, w, ++seed,
                         [=](CaseContext& c) {
                           const ValueId table = c.input(w, {V, D});
                           std::vector<int32_t> ids = {0, int32_t(V - 1), 2, 1, int32_t(V / 2), 3, int32_t(V - 2)};
                           return std::vector<ValueId>{c.graph().embed(table, c.i32_values({7}, ids), a)};
                         }});
      }
      // matmul: single row (decode), odd N, a K that is not a multiple of anything, long K, bias.
      struct Shape { int64_t M, N, K; bool bias; };
      std::vector<Shape> shapes = quantized(w)
          ? std::vector<Shape>{{1, 33, 96, false}, {7, 64, 32, true}, {3, 17, 4096, false}, {33, 40, 160, false},
                               {130, 19, 288, false}}
          : std::vector<Shape>{{1, 33, 17, false}, {7, 64, 64, true}, {3, 17, 4096, false}, {33, 40, 31, false}};
      for (Shape s : shapes) {
        if (quantized(w)) s.K = fit_k(w, s.K);
        cases.push_back({"matmul/" + tag + dims("/M=%lld,N=%lld,K=%lld", s.M, s.N, s.K) + (s.bias ? "+bias" : ""),
                         OpKind::kMatmul, a, w, ++seed, [=](CaseContext& c) {
                           const ValueId x = c.input(a, {s.M, s.K});
                           const ValueId wt = c.input(w, {s.N, s.K});
                           const ValueId b = s.bias ? c.input(DType::kF32, {s.N}) : kNoValue;
                           return std::vector<ValueId>{c.graph().matmul(x, wt, b)};
                         }});
      }
      // matmul with the weight in the device's own layout (Device::prepare_weight): decode, a
      // few rows, tile-sized and odd prefill M, an N that is not a multiple of a 16-row tile
      // (kept in rows), and a 3-D activation. The layout does not depend on the activation dtype.
      if (a == DType::kF32) {
        struct PShape { int64_t M, N, K; };
        for (PShape s : {PShape{1, 64, 96}, PShape{2, 48, 256}, PShape{7, 32, 64}, PShape{8, 80, 160},
                         PShape{33, 64, 96}, PShape{128, 48, 64}, PShape{1, 40, 96}, PShape{9, 24, 64}}) {
          if (quantized(w)) s.K = fit_k(w, s.K);
          cases.push_back({"matmul/" + tag + dims("/prepared weight M=%lld,N=%lld,K=%lld", s.M, s.N, s.K),
                           OpKind::kMatmul, a, w, ++seed, [=](CaseContext& c) {
                             return std::vector<ValueId>{
                                 c.graph().matmul(c.input(a, {s.M, s.K}), c.prepared_weight(w, {s.N, s.K}))};
                           }});
        }
        const int64_t Kp = quantized(w) ? fit_k(w, 128) : 24;
        cases.push_back({"matmul/" + tag + dims("/prepared weight 3d [%lld,%lld,K=%lld]", 3, 17, Kp), OpKind::kMatmul, a, w,
                         ++seed, [=](CaseContext& c) {
                           return std::vector<ValueId>{
                               c.graph().matmul(c.input(a, {3, 17, Kp}), c.prepared_weight(w, {32, Kp}))};
                         }});
      }
      // matmul of a strided (non-contiguous) activation, and a 3-D activation.
      const int64_t K = quantized(w) ? fit_k(w, 64) : 24;
      cases.push_back({"matmul/" + tag + dims("/strided M=%lld,N=%lld,K=%lld", 5, 9, K), OpKind::kMatmul, a, w, ++seed,
                       [=](CaseContext& c) {
                         const ValueId x = c.strided_rows(a, 5, K, 8);
                         return std::vector<ValueId>{c.graph().matmul(x, c.input(w, {9, K}))};
                       }});
      cases.push_back({"matmul/" + tag + dims("/3d [%lld,%lld,K=%lld]", 2, 3, K), OpKind::kMatmul, a, w, ++seed,
                       [=](CaseContext& c) {
                         return std::vector<ValueId>{c.graph().matmul(c.input(a, {2, 3, K}), c.input(w, {11, K}))};
                       }});
      // matmul over a weight view whose rows are further apart than their size (every other
      // row of a bigger matrix), one decode row and a prefill-sized one.
      for (int64_t M : {int64_t(1), int64_t(37)}) {
        cases.push_back({"matmul/" + tag + dims("/weight rows strided M=%lld,N=%lld,K=%lld", M, 13, K), OpKind::kMatmul, a,
                         w, ++seed, [=](CaseContext& c) {
                           const ValueId big = c.input(w, {26, K});
                           if (big == kNoValue) return std::vector<ValueId>{kNoValue};
                           const Tensor& t = c.graph().tensor(big);
                           const ValueId wv = c.graph().view(big, {13, K}, {2 * t.stride[0], t.stride[1]}, t.stride[0]);
                           return std::vector<ValueId>{c.graph().matmul(c.input(a, {M, K}), wv)};
                         }});
      }
      // matmul_id: uneven expert loads, experts with no tokens, k = 1, 2, 8, shared and per-slot x,
      // with and without the weighted sum, with and without per-expert biases (gpt-oss).
      struct IdShape {
        int64_t T, E, k, N;
        bool per_slot, weighted, biased = false;
      };
      for (const IdShape& s : {IdShape{5, 4, 1, 9, false, false}, IdShape{6, 8, 2, 16, false, true},
                               IdShape{3, 8, 8, 7, true, true}, IdShape{9, 6, 2, 5, true, false},
                               IdShape{7, 8, 4, 24, false, false, true}, IdShape{6, 8, 4, 19, true, true, true}}) {
        const int64_t Kd = quantized(w) ? fit_k(w, 64) : 19;
        cases.push_back(
            {"matmul_id/" + tag + dims("/T=%lld,E=%lld,k=%lld", s.T, s.E, s.k) +
                 (s.per_slot ? ",x[T,k,K]" : ",x[T,K]") + (s.weighted ? ",weighted" : "") + (s.biased ? ",bias" : ""),
             OpKind::kMatmulId, a, w, ++seed, [=](CaseContext& c) {
               // Route most rows to expert 1 (uneven), never use the last expert (zero tokens), unless
               // k == E (then every expert appears once per row).
               std::vector<int32_t> ids;
               for (int64_t t = 0; t < s.T; ++t)
                 for (int64_t j = 0; j < s.k; ++j)
                   ids.push_back(s.k == s.E ? int32_t((t + j) % s.E)
                                            : int32_t(j == 0 ? (t % 3 == 2 ? 0 : 1) : (1 + j + t) % (s.E - 1)));
               const ValueId x = s.per_slot ? c.input(a, {s.T, s.k, Kd}) : c.input(a, {s.T, Kd});
               const ValueId wt = c.input(w, {s.E, s.N, Kd});
               const ValueId id = c.i32_values({s.T, s.k}, ids);
               const ValueId weights = s.weighted ? c.input(DType::kF32, {s.T, s.k}, 0.1f, 1.0f) : kNoValue;
               const ValueId bias = s.biased ? c.input(DType::kF32, {s.E, s.N}, -2.0f, 2.0f) : kNoValue;
               return std::vector<ValueId>{c.graph().matmul_id(x, wt, id, weights, bias)};
             }});
      }
    }
  }
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Linear, linear_cases);

}  // namespace tessera::conformance
