#include "tests/sched/spec_fake_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace tessera::spec_test {

MarkovModel::MarkovModel(uint32_t seed, float noise, uint32_t noise_seed) : table_(size_t(kPhases * kVocab * kVocab * kVocab)) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : table_) v = u(rng);
  if (noise <= 0) return;
  std::mt19937 nrng(noise_seed);
  std::uniform_real_distribution<float> n(-noise, noise);
  for (float& v : table_) v += n(nrng);
}

void OracleProposer::propose(std::span<DraftRequest> batch) {
  for (DraftRequest& r : batch) {
    std::vector<int32_t> t(r.tokens.begin(), r.tokens.end());
    r.draft.clear();
    for (int32_t i = 0; i < r.k; ++i) {
      const int32_t pos = int32_t(t.size()) - 1;
      const float* l = m_.row(pos, pos > 0 ? t[t.size() - 2] : 0, t.back());
      t.push_back(int32_t(std::max_element(l, l + kVocab) - l));
      r.draft.push_back(t.back());
    }
    drafted += int64_t(r.draft.size());
  }
}

std::unique_ptr<KvCache> markov_kv(Device& dev, int n_blocks) {
  KvCacheConfig c;
  c.n_layers = 1; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = n_blocks; c.dtype = DType::kF32;
  return std::move(KvCache::create(dev, c)).value();
}

std::shared_ptr<DraftModelProposer> markov_draft(std::shared_ptr<ModelRunner> draft, int n_blocks) {
  static ref::ReferenceDevice dev;  // outlives every proposer of the test binary
  const int32_t vocab = draft->vocab_size();
  auto p = DraftModelProposer::create(std::move(draft), markov_kv(dev, n_blocks), vocab);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::shared_ptr<DraftModelProposer>(std::move(p).value()) : nullptr;
}

Status MarkovModel::forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) {
  const int32_t bs = kv.config().block_size;
  // K cache [n_blocks, bs, 1, 2] f32: element 0 of a slot holds its token. Every row's K is
  // written before any is read, as attention over the paged cache does.
  float* k = static_cast<float*>(kv.k(0).host_data());
  for (int32_t r = 0; r < p.n_tokens(); ++r) k[size_t(p.slot_mapping[size_t(r)]) * 2] = float(p.tokens[size_t(r)]);
  std::vector<int32_t> seq_of(size_t(p.n_tokens()));
  for (int32_t s = 0; s < p.n_seqs(); ++s)
    for (int32_t r = p.query_start[size_t(s)]; r < p.query_start[size_t(s + 1)]; ++r) seq_of[size_t(r)] = s;
  logits->clear();
  for (int32_t r : p.logit_rows) {
    const int32_t s = seq_of[size_t(r)], pos = p.positions[size_t(r)];
    int32_t before = 0;
    if (pos > 0) {
      const int32_t block = p.block_tables[size_t(s * p.max_blocks + (pos - 1) / bs)];
      before = int32_t(k[size_t(block * bs + (pos - 1) % bs) * 2]);
    }
    const float* l = row(pos, before, p.tokens[size_t(r)]);
    logits->insert(logits->end(), l, l + kVocab);
    ++rows_scored;
  }
  return OkStatus();
}

TextCodec letter_codec(int32_t eog) {
  TextCodec codec;
  codec.piece = [](int32_t t) { return std::string(1, char('a' + t)); };
  if (eog >= 0) codec.is_eog = [eog](int32_t t) { return t == eog; };
  return codec;
}

EngineConfig spec_config(std::shared_ptr<Proposer> proposer, int32_t k) {
  EngineConfig ec;
  ec.scheduler.max_batch_tokens = 512;
  ec.spec.proposer = std::move(proposer);
  ec.spec.k = k;
  ec.spec.max_batch = 1 << 20;  // the tests decide when to speculate, not the auto-off rules
  ec.spec.cost_gate = false;
  return ec;
}

SpecHarness::SpecHarness(std::shared_ptr<Proposer> proposer, int32_t k_draft, int n_blocks, int32_t eog) {
  kv = markov_kv(dev, n_blocks);
  engine = std::make_unique<Engine>(model, *kv, letter_codec(eog), spec_config(std::move(proposer), k_draft));
}

RequestId SpecHarness::submit(const std::vector<int32_t>& prompt, int max_tokens, SamplingParams sp, std::vector<std::string> stop,
                              int32_t spec_k) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling = sp;
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  r.spec_k = spec_k;
  r.grammar = grammar;
  r.on_token = [this](const TokenEvent& ev) {
    Output& o = out[ev.id];
    if (ev.token >= 0) o.tokens.push_back(ev.token);
    o.text += ev.text;
    if (ev.finish != FinishReason::kNone) o.finish = ev.finish;
  };
  auto id = engine->submit(std::move(r));
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  return id.ok() ? *id : -1;
}

std::vector<int32_t> random_prompt(int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % kVocab));
  return p;
}

std::vector<std::vector<int32_t>> random_prompts(int n, int len, uint32_t first_seed) {
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < n; ++i) ps.push_back(random_prompt(len + i, first_seed + uint32_t(i)));
  return ps;
}

std::vector<SpecHarness::Output> SpecHarness::run(const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                                                  SamplingParams sp, const std::vector<std::string>& stop) {
  std::vector<RequestId> ids;
  for (const auto& p : prompts) ids.push_back(submit(p, max_tokens, sp, stop));
  EXPECT_TRUE(engine->run_until_idle().ok());
  std::vector<Output> outs;
  for (RequestId id : ids) outs.push_back(out[id]);
  return outs;
}

bool NoRepeatGrammar::allows(int32_t token) const {
  if (token < 0 || token >= kVocab) return false;
  if (limit_ >= 0 && int32_t(accepted_.size()) >= limit_) return false;
  return accepted_.empty() || accepted_.back() != token;
}

int32_t NoRepeatGrammar::fill_mask(uint32_t* mask) {
  std::fill(mask, mask + mask_words(kVocab), 0u);
  int32_t n = 0;
  for (int32_t t = 0; t < kVocab; ++t)
    if (allows(t)) {
      mask[t >> 5] |= 1u << (t & 31);
      ++n;
    }
  return n;
}

bool NoRepeatGrammar::accept(int32_t token) {
  if (!allows(token)) return false;
  accepted_.push_back(token);
  return true;
}

}  // namespace tessera::spec_test
