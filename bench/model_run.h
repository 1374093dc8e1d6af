// Shared by `tessera-bench model` and `tessera-bench moe`: engine runs of a loaded model and the
// weight figures of the rooflines.
#pragma once
#include <vector>

#include "bench/timing.h"
#include "models/model.h"

namespace tessera::bench {

// Weight bytes one decode step reads: every tensor once, except that the token embedding is
// read for one row only (unless it is also the output head). For a MoE model this counts every
// expert (what a dense read of the file costs), not only the k used ones.
double weight_bytes_per_token(const Model& m);
// Parameters, without the token embedding unless it is also the output head.
double parameters(const Model& m);

struct RunResult {
  double prefill_tps = 0, decode_tps = 0, aggregate_tps = 0;
  // Of the decode-only steps' wall time (one step's end to the next's), the share spent outside
  // the device's compute (graph build, key lookup or validation, uploads, sampling, scheduling).
  double host_overhead = 0;
  int64_t executables_built = 0, executables_reused = 0;  // during the run
  int64_t steps = 0;                                      // engine steps of the run
  double wall_s = 0;                                      // its wall time
};
// |n_seqs| requests of |prompt| tokens each generating |decode| tokens, all submitted at once;
// prefill from the median TTFT, decode from the median TPOT.
Result<RunResult> run_requests(Model& m, int n_seqs, int prompt, int decode);

}  // namespace tessera::bench
