#include "core/sched/step_plan_codec.h"

#include <bit>

namespace tessera {

namespace {

class PlanWriter {
 public:
  void vec(const std::vector<int32_t>& v) {
    w_.push_back(int32_t(v.size()));
    w_.insert(w_.end(), v.begin(), v.end());
  }
  void floats(const std::vector<float>& v) {
    w_.push_back(int32_t(v.size()));
    for (float f : v) w_.push_back(std::bit_cast<int32_t>(f));
  }
  void pairs(const std::vector<std::pair<int32_t, int32_t>>& v) {  // read back as one vec of 2 words each
    w_.push_back(int32_t(2 * v.size()));
    for (const auto& [a, b] : v) w_.insert(w_.end(), {a, b});
  }
  void one(int32_t x) { w_.push_back(x); }
  std::vector<int32_t>& words() { return w_; }

 private:
  std::vector<int32_t> w_;
};

class PlanReader {
 public:
  explicit PlanReader(const std::vector<int32_t>& w) : w_(w) {}
  bool one(int32_t* x) {
    if (at_ >= w_.size()) return false;
    *x = w_[at_++];
    return true;
  }
  bool vec(std::vector<int32_t>* v) {
    int32_t n = 0;
    if (!one(&n) || n < 0 || size_t(n) > w_.size() - at_) return false;
    v->assign(w_.begin() + long(at_), w_.begin() + long(at_) + n);
    at_ += size_t(n);
    return true;
  }
  bool floats(std::vector<float>* v) {
    std::vector<int32_t> bits;
    if (!vec(&bits)) return false;
    v->clear();
    for (int32_t b : bits) v->push_back(std::bit_cast<float>(b));
    return true;
  }
  bool pairs(std::vector<std::pair<int32_t, int32_t>>* v) {
    std::vector<int32_t> flat;
    if (!vec(&flat) || flat.size() % 2) return false;
    v->clear();
    for (size_t i = 0; i < flat.size(); i += 2) v->push_back({flat[i], flat[i + 1]});
    return true;
  }
  bool done() const { return at_ == w_.size(); }

 private:
  const std::vector<int32_t>& w_;
  size_t at_ = 0;
};

// Every field of a step plan, in one order, for both directions.
template <class IO, class Plan>
bool plan_fields(IO& io, Plan& p) {
  return io.vec(&p.tokens) && io.vec(&p.positions) && io.vec(&p.slot_mapping) && io.vec(&p.query_start) &&
         io.vec(&p.seq_lens) && io.vec(&p.block_tables) && io.one(&p.max_blocks) && io.vec(&p.window_slot_mapping) &&
         io.vec(&p.window_block_tables) && io.one(&p.window_max_blocks) && io.vec(&p.state_slots) &&
         io.vec(&p.lora_slots) && io.floats(&p.lora_scales) && io.vec(&p.logit_rows) && io.vec(&p.pool_seqs) &&
         io.pairs(&p.block_copies) && io.pairs(&p.window_block_copies) && io.pairs(&p.swap_out) && io.pairs(&p.swap_in);
}

// The writer takes the fields by value through the same template.
struct PlanWriterIO {
  PlanWriter& w;
  bool vec(const std::vector<int32_t>* v) { return w.vec(*v), true; }
  bool floats(const std::vector<float>* v) { return w.floats(*v), true; }
  bool pairs(const std::vector<std::pair<int32_t, int32_t>>* v) { return w.pairs(*v), true; }
  bool one(const int32_t* x) { return w.one(*x), true; }
};

}  // namespace

std::vector<int32_t> encode_step_plan(const StepPlan& plan) {
  PlanWriter w;
  PlanWriterIO io{w};
  plan_fields(io, plan);
  return std::move(w.words());
}

Result<StepPlan> decode_step_plan(const std::vector<int32_t>& words) {
  StepPlan plan;
  PlanReader r(words);
  if (!plan_fields(r, plan) || !r.done())
    return DataLoss("a step plan of " + std::to_string(words.size()) +
                    " words did not parse (a field runs past the end, "
                    "a count is negative or odd where pairs are due, or words are left over)");
  return plan;
}

}  // namespace tessera
