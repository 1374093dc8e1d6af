// The scheduler under a LoRA device-slot limit (SchedulerConfig::max_loras, vLLM's --max-loras):
// the running sequences never use more distinct adapters than there are slots, a request whose
// adapter finds no slot waits (the base model's and those of running adapters go past it), and
// every request completes. No model, no clock: steps are planned, committed and given a token.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/sched/scheduler.h"

namespace tessera {
namespace {

struct LoraSim {
  LoraSim(int32_t slots, uint32_t seed) : max_loras(slots), sched(config(slots), pool), rng(seed) {}
  static SchedulerConfig config(int32_t slots) {
    SchedulerConfig c;
    c.max_loras = slots;
    c.itl_factor = 0;  // plans independent of timing
    return c;
  }
  void add(RequestId id, int32_t lora, int32_t prompt, int32_t gen) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->arrival = uint64_t(id);
    for (int32_t i = 0; i < prompt; ++i) s->tokens.push_back(int32_t(rng() % 1000));
    s->n_prompt = prompt;
    s->lora = {lora, lora + 1};
    want[id] = gen;
    sched.add(std::move(s));
  }
  // One step: plans, checks the slot limit over the running set, commits, samples; finishes the
  // requests that have all their tokens. Returns the ids scheduled.
  std::vector<RequestId> step() {
    const auto sc = sched.plan(&plan);
    EXPECT_EQ(plan.lora_slots.size(), sc.size());
    for (size_t i = 0; i < sc.size(); ++i) EXPECT_EQ(plan.lora_slots[i], sc[i].seq->lora.slot);
    std::vector<int32_t> running, waiting;
    sched.count_loras(16, &running, &waiting);
    const auto used = std::count_if(running.begin(), running.end(), [](int32_t n) { return n > 0; });
    EXPECT_LE(used, max_loras) << "running adapters beyond the device slots";
    max_used = std::max<int64_t>(max_used, used);
    sched.commit(sc);
    std::vector<RequestId> ids;
    for (const auto& x : sc) {
      ids.push_back(x.seq->id);
      if (x.samples) x.seq->tokens.push_back(int32_t(rng() % 1000));
    }
    for (const auto& x : sc)
      if (x.samples && x.seq->n_generated() >= want[x.seq->id]) {
        done.insert(x.seq->id);
        sched.finish(x.seq->id);
      }
    return ids;
  }
  BlockPool pool{4096};
  int32_t max_loras;
  Scheduler sched;
  std::mt19937 rng;
  StepPlan plan;
  std::map<RequestId, int32_t> want;
  std::set<RequestId> done;
  int64_t max_used = 0;
};

TEST(LoraScheduling, ARequestWithoutASlotWaitsAndOthersGoPast) {
  LoraSim sim(2, 3);
  sim.add(1, 0, 20, 3);   // adapter 0
  sim.add(2, 1, 20, 8);   // adapter 1: the two slots are taken
  sim.add(3, 2, 20, 2);   // adapter 2: waits
  sim.add(4, -1, 20, 2);  // the base model needs no slot
  sim.add(5, 0, 20, 2);   // adapter 0 is running: it joins
  const auto first = sim.step();
  EXPECT_EQ(first, (std::vector<RequestId>{1, 2, 4, 5}));
  ASSERT_NE(sim.sched.find(3), nullptr);
  std::vector<int32_t> running, waiting;
  sim.sched.count_loras(3, &running, &waiting);
  EXPECT_EQ(waiting, (std::vector<int32_t>{0, 0, 1})) << "adapter 2's request waits, counted as waiting";
  // It stays out while adapter 0's requests run, and enters once they are done.
  bool entered = false;
  for (int i = 0; i < 20 && !entered; ++i) {
    const auto ids = sim.step();
    entered = std::find(ids.begin(), ids.end(), RequestId(3)) != ids.end();
    if (entered) { EXPECT_TRUE(sim.done.count(1) && sim.done.count(5)) << "entered while adapter 0 held its slot"; }
  }
  EXPECT_TRUE(entered);
  for (int i = 0; i < 40 && !sim.sched.idle(); ++i) sim.step();
  EXPECT_TRUE(sim.sched.idle());
  EXPECT_EQ(sim.done.size(), 5u);
}

// Random adapters, lengths and arrivals against 1 to 3 slots: the limit always holds, every
// request completes (none is dropped), and with several slots they are used together.
TEST(LoraScheduling, RandomLoadNeverExceedsTheSlotsAndCompletesEveryRequest) {
  for (int32_t slots = 1; slots <= 3; ++slots)
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE("slots " + std::to_string(slots) + ", seed " + std::to_string(seed));
      LoraSim sim(slots, seed);
      std::mt19937 rng(seed * 77u);
      RequestId next = 1;
      const int n = 40;
      for (int step = 0; step < 2000 && (next <= n || !sim.sched.idle()); ++step) {
        while (next <= n && rng() % 3 == 0) {
          const int32_t lora = int32_t(rng() % 6) - 1;  // -1: the base model
          sim.add(next++, lora, 5 + int32_t(rng() % 60), 1 + int32_t(rng() % 12));
        }
        sim.step();
      }
      EXPECT_TRUE(sim.sched.idle());
      EXPECT_EQ(sim.done.size(), size_t(n));
      EXPECT_EQ(sim.max_used, slots) << "the slots fill under this load";
    }
}

}  // namespace
}  // namespace tessera
