#include "core/sched/engine.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/sched/engine_active.h"

namespace tessera {

using Clock = std::chrono::steady_clock;

namespace {
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kGrammarDeadEnd: return "grammar_dead_end";
  }
  return "unknown";
}

Engine::Engine(ModelRunner& model, KvCache& kv, TextCodec codec, EngineConfig cfg)
    : model_(model), kv_(kv), codec_(std::move(codec)), cfg_(cfg),
      scheduler_(
          [&] {
            SchedulerConfig s = cfg.scheduler;
            s.block_size = kv.config().block_size;
            if (kv.has_window()) {
              // One prefill chunk must fit the window pool beside its window (and a partial block at
              // each end); a larger budget could never be allocated for a lone sequence. Window groups
              // recompute rather than swap (HybridKv), so no host slots are kept for them.
              const int32_t fit = (kv.config().n_window_blocks - 2) * s.block_size - kv.config().window;
              s.max_batch_tokens = std::max(1, std::min(s.max_batch_tokens, fit));
              s.swap = false;
            }
            if (s.cost_prior.c0_ms <= 0) s.cost_prior = model.cost_prior();
            return s;
          }(),
          kv.pool(), kv.window_pool(), kv.has_window() ? kv.config().window : 0, kv.states()),
      spec_gate_(cfg.spec) {
  // Swap preemption needs host slots: reserve them in the cache (host-pinned memory, not device).
  // Without them every request is refused, naming why (validate()).
  if (cfg.scheduler.swap && !kv_.has_window() && kv_.swap_slots() < cfg.scheduler.swap_blocks)
    swap_status_ = kv_.reserve_swap(cfg.scheduler.swap_blocks);
  // A swapped-out sequence's recurrent state waits in a host slot of its own: one per live slot
  // (more swapped sequences than that recompute instead).
  if (cfg.scheduler.swap && !kv_.has_window() && kv_.states() && swap_status_.ok() &&
      kv_.states()->swap_slots() < kv_.states()->config().n_slots)
    swap_status_ = kv_.states()->reserve_swap(kv_.states()->config().n_slots);
}

Engine::~Engine() = default;

Status Engine::validate(const GenerationRequest& req) const {
  TS_RETURN_IF_ERROR(swap_status_);
  if (req.prompt.empty()) return InvalidArgument("the prompt is empty (at least one token is needed)");
  if (req.embed) return validate_embed(req);
  if (!model_.generates())
    return InvalidArgument("the model is an encoder: it produces embeddings (/v1/embeddings, tessera embed), not text");
  const int32_t ctx = model_.context_length();
  if (int32_t(req.prompt.size()) >= ctx)
    return InvalidArgument("the prompt has " + std::to_string(req.prompt.size()) + " tokens, the context holds " +
                           std::to_string(ctx) + " (including at least one generated token)");
  const int64_t capacity = int64_t(kv_.config().n_blocks) * kv_.config().block_size;
  if (int64_t(req.prompt.size()) >= capacity)
    return ResourceExhausted("the prompt has " + std::to_string(req.prompt.size()) + " tokens but the whole KV cache holds " +
                             std::to_string(capacity));
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_.vocab_size())
      return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary [0, " +
                             std::to_string(model_.vocab_size()) + ")");
  if (req.max_tokens <= 0) return InvalidArgument("max_tokens must be positive, got " + std::to_string(req.max_tokens));
  if (req.n < 1 || req.n > 128) return InvalidArgument("n must be in [1, 128], got " + std::to_string(req.n));
  if (req.lora != GenerationRequest::kDefaultLora && (req.lora < -1 || req.lora >= model_.n_loras()))
    return InvalidArgument("LoRA adapter slot " + std::to_string(req.lora) + " is not loaded (the model has " +
                           std::to_string(model_.n_loras()) + " adapters)");
  if (!std::isfinite(req.lora_scale))
    return InvalidArgument("the LoRA scale must be a finite number, got " + std::to_string(req.lora_scale));
  if (req.grammar && req.grammar->vocab_size() != model_.vocab_size())
    return InvalidArgument("the grammar covers " + std::to_string(req.grammar->vocab_size()) + " tokens, the model's vocabulary " +
                           std::to_string(model_.vocab_size()));
  return req.sampling.validate();
}

Status Engine::validate_embed(const GenerationRequest& req) const {
  if (model_.embedding_dim() <= 0) return InvalidArgument(model_.why_no_embeddings());
  const int64_t n = int64_t(req.prompt.size());
  if (n > model_.context_length())
    return InvalidArgument("the input has " + std::to_string(n) + " tokens, the model's context holds " +
                           std::to_string(model_.context_length()));
  if (n > cfg_.scheduler.max_batch_tokens)
    return InvalidArgument("the input has " + std::to_string(n) + " tokens but an embedding runs in one step of at most " +
                           std::to_string(cfg_.scheduler.max_batch_tokens) + " (max_batch_tokens)");
  const int64_t capacity = int64_t(kv_.config().n_blocks) * kv_.config().block_size;
  if (n > capacity)
    return ResourceExhausted("the input has " + std::to_string(n) + " tokens but the whole KV cache holds " +
                             std::to_string(capacity));
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_.vocab_size())
      return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary [0, " +
                             std::to_string(model_.vocab_size()) + ")");
  return OkStatus();
}

Result<RequestId> Engine::submit(GenerationRequest req) {
  const RequestId id = reserve_id();
  TS_RETURN_IF_ERROR(submit_as(id, std::move(req)));
  return id;
}

Status Engine::submit_as(RequestId id, GenerationRequest req) {
  TS_RETURN_IF_ERROR(model_.health());
  TS_RETURN_IF_ERROR(validate(req));
  auto a = std::make_unique<Active>();
  a->id = a->request = id;
  a->forks_pending = req.n - 1;
  a->submitted = Clock::now();
  a->sampler = std::make_unique<Sampler>(req.sampling);
  if (req.grammar) a->grammar = req.grammar->fork();
  a->metrics.prompt_tokens = int32_t(req.prompt.size());
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->priority = req.priority;
  seq->arrival = arrivals_++;
  seq->tokens = req.prompt;
  seq->n_prompt = int32_t(req.prompt.size());
  seq->embed = req.embed;
  seq->lora = req.lora == GenerationRequest::kDefaultLora ? model_.default_lora()
              : req.lora < 0                              ? LoraRef{}
                                                          : model_.lora(req.lora);
  if (seq->lora.slot >= 0 && seq->lora.id == 0)  // validated on another thread, then unloaded
    return NotFound("LoRA adapter slot " + std::to_string(seq->lora.slot) + " holds no adapter (it was unloaded)");
  // An adapter at another scale (the request's, or the model default's) is a variant of its
  // own: K/V of its own. The id is the adapter's (ModelRunner::lora), hashed with the scale.
  if (const float scale = seq->lora.scale * req.lora_scale; seq->lora.slot >= 0 && scale != 1.0f)
    seq->lora = scale == 0.0f ? LoraRef{} : LoraRef{seq->lora.slot, model_.lora_variant(seq->lora, scale), scale};
  a->req = std::move(req);
  active_[id] = std::move(a);
  scheduler_.add(std::move(seq));
  return OkStatus();
}

Status Engine::step() {
  propose_drafts();
  scheduler_.set_max_loras(model_.lora_device_slots());  // run-time loads change it
  const auto scheduled = scheduler_.plan(&plan_);
  if (!scheduled.empty()) record_kv_use();
  // A preempted sequence's draft-side state goes too: its memory is what the pool was short of
  // (the draft's KV mirrors the target's), and a recomputed sequence catches the draft up again.
  for (RequestId id : scheduler_.take_preempted())
    if (cfg_.spec.proposer) cfg_.spec.proposer->release(id);
  // Swaps first, even in a step that schedules nothing: a swapped-out block may be reused at once.
  // Each list is one batched device copy, queued before the step's compute (stream order).
  Status swapped = kv_.swap_out(plan_.swap_out);
  if (swapped.ok()) swapped = kv_.swap_in(plan_.swap_in);
  if (scheduled.empty()) {
    // Work left but nothing could be scheduled: a lone sequence outgrew the whole KV pool. It
    // ends as if it reached its length limit (its text so far is kept).
    if (!scheduler_.idle()) {
      auto it = active_.find(scheduler_.blocked());
      if (it != active_.end()) finish(*it->second, FinishReason::kLength);
      else scheduler_.finish(scheduler_.blocked());  // no owner: never expected, but never spin
    }
    return OkStatus();
  }
  std::vector<RequestId> ids;
  for (const auto& sc : scheduled) ids.push_back(sc.seq->id);
  // NOTE: a failed swap (device copies; not expected) fails the step's requests like any error.
  // The step is timed from its copies to its last sample: what the decodes wait for.
  const auto t0 = Clock::now();
  const double cpu0 = cfg_.cost_cpu_threads > 0 ? process_cpu_ms() : 0.0;
  Status s = swapped;
  if (s.ok() && scheduler_.states()) s = scheduler_.states()->status();  // the plan's state copies
  if (s.ok()) s = kv_.copy_blocks(plan_.block_copies);
  if (s.ok()) s = kv_.copy_window_blocks(plan_.window_block_copies);
  // The step is queued whole (inputs, compute, the logits' copy to host memory) before the host
  // waits for it: host work that does not need this step's logits belongs between the two. The
  // grammar masks of the rows it samples depend only on the tokens accepted so far.
  if (s.ok()) s = model_.submit(plan_, kv_);
  if (s.ok()) {
    for (size_t i = 0; i < scheduled.size(); ++i)
      if (scheduled[i].samples) {
        if (scheduled[i].n_draft == 0) prepare_mask(ids[i]);
        else prepare_draft_masks(ids[i], scheduled[i].n_draft);
      }
    s = model_.collect(&logits_);
  }
  if (!s.ok()) {
    // A failed step fails the requests in it (the error names why), never silently.
    for (RequestId id : ids)
      if (active_.count(id)) finish(*active_[id], FinishReason::kError, s.to_string());
    return s;
  }
  scheduler_.commit(scheduled);
  emit_step(scheduled, ids);
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  scheduler_.observe(cfg_.step_ms_for_test       ? cfg_.step_ms_for_test(plan_)
                     : cfg_.cost_cpu_threads > 0 ? (process_cpu_ms() - cpu0) / cfg_.cost_cpu_threads
                                                 : wall_ms);
  if (cfg_.on_step) {
    const SchedulerStats ss = scheduler_.stats();
    const StepCostStats& c = ss.step;
    cfg_.on_step({ss.steps, int32_t(scheduled.size()), c.last_step_tokens, c.last_prefill_tokens, c.last_limit_ms,
                  c.last_predicted_ms, c.last_step_ms, wall_ms, c.cost});
  }
  return OkStatus();
}

void Engine::record_kv_use() {
  kv_blocks_last_ = kv_.pool().n_used();
  kv_blocks_peak_ = std::max(kv_blocks_peak_, kv_blocks_last_);
  if (const BlockPool* wp = kv_.window_pool()) {
    kv_window_blocks_last_ = wp->n_used();
    kv_window_blocks_peak_ = std::max(kv_window_blocks_peak_, kv_window_blocks_last_);
  }
}

void Engine::emit_step(const std::vector<ScheduledSeq>& scheduled, const std::vector<RequestId>& ids) {
  const size_t vocab = size_t(model_.vocab_size());
  size_t row = 0;
  bool drafted = false;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    if (!scheduled[i].samples) continue;
    const int32_t d = scheduled[i].n_draft;
    if (d > 0) verify_and_emit(ids[i], logits_.data() + row * vocab, d);
    else sample_and_emit(ids[i], logits_.data() + row * vocab);
    row += size_t(1 + d);
    drafted = drafted || d > 0;
  }
  if (drafted) ++spec_.steps;
  // The pooled embeddings follow the logits rows (ModelRunner::forward), in plan order.
  const size_t dim = size_t(std::max(0, model_.embedding_dim()));
  const float* pooled = logits_.data() + row * vocab;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    if (!scheduled[i].pools) continue;
    auto it = active_.find(ids[i]);
    if (it != active_.end()) finish(*it->second, FinishReason::kStop, {}, std::vector<float>(pooled, pooled + dim));
    pooled += dim;
  }
}

void Engine::sample_and_emit(RequestId seq_id, const float* logits) {
  auto it = active_.find(seq_id);
  if (it == active_.end()) return;
  Active& a = *it->second;
  if (a.forks_pending > 0) fork_choices(a, logits);
  Sequence* seq = scheduler_.find(seq_id);
  const uint32_t* mask = nullptr;
  if (a.grammar) {
    prepare_mask(seq_id);  // normally filled while the device ran the step; a new fork's is not
    const int32_t n_allowed = a.mask_allowed;
    a.mask_allowed = -1;  // used now: the next token needs the grammar's next state
    if (n_allowed == 0) {
      return finish_dead_end(a);
    }
    mask = a.mask.data();
  }
  const SampleResult r = a.sampler->sample(logits, model_.vocab_size(), seq->tokens, mask);
  if (a.grammar && !a.grammar->accept(r.token))  // the mask allowed it: a bug of the grammar's
    return finish(a, FinishReason::kError, "the grammar refused token " + std::to_string(r.token) + " that its mask allowed");
  emit_token(a, *seq, r);
}

void Engine::finish_dead_end(Active& a) {
  ++grammar_stats_.dead_ends;
  finish(a, FinishReason::kGrammarDeadEnd,
         "the grammar allows no next token after " + std::to_string(a.metrics.generated_tokens) + " generated tokens");
}

void Engine::prepare_mask(RequestId seq_id) {
  auto it = active_.find(seq_id);
  if (it == active_.end() || !it->second->grammar || it->second->mask_allowed >= 0) return;
  Active& a = *it->second;
  a.mask.resize(size_t(mask_words(model_.vocab_size())));
  const auto t0 = Clock::now();
  a.mask_allowed = a.grammar->fill_mask(a.mask.data());
  observe_mask_ms(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

void Engine::observe_mask_ms(double ms) {
  if (mask_hist_.empty()) mask_hist_.assign(2000, 0);
  ++grammar_stats_.masks;
  grammar_stats_.mask_ms_sum += ms;
  grammar_stats_.mask_ms_max = std::max(grammar_stats_.mask_ms_max, ms);
  ++mask_hist_[std::min<size_t>(mask_hist_.size() - 1, size_t(ms * 100.0))];
}

void Engine::fork_choices(Active& parent, const float* logits) {
  // The prompt is computed: each further choice shares its blocks and samples its own first
  // token from the same logits row.
  const int n = parent.forks_pending;
  parent.forks_pending = 0;
  for (int k = 1; k <= n; ++k) {
    auto a = std::make_unique<Active>();
    a->id = reserve_id();
    a->request = parent.request;
    a->index = k;
    a->req = parent.req;
    a->req.n = 1;
    if (a->req.sampling.seed != 0) a->req.sampling.seed += uint64_t(k);
    a->sampler = std::make_unique<Sampler>(a->req.sampling);
    if (parent.grammar) a->grammar = parent.grammar->fork();  // the parent has accepted nothing yet
    a->submitted = parent.submitted;
    a->metrics.prompt_tokens = parent.metrics.prompt_tokens;
    auto seq = std::make_unique<Sequence>();
    seq->id = a->id;
    seq->priority = parent.req.priority;
    seq->arrival = arrivals_++;
    if (!scheduler_.fork(parent.id, std::move(seq))) return;
    const RequestId id = a->id;
    active_[id] = std::move(a);
    sample_and_emit(id, logits);
  }
}

bool Engine::emit_token(Active& a, Sequence& s, const SampleResult& r) {
  const auto now = Clock::now();
  const bool first = a.metrics.generated_tokens == 0;
  if (first) {
    a.first_token = now;
    a.metrics.ttft_ms = std::chrono::duration<double, std::milli>(now - a.submitted).count();
  } else {
    a.metrics.max_itl_ms = std::max(a.metrics.max_itl_ms, std::chrono::duration<double, std::milli>(now - a.last_token).count());
  }
  a.last_token = now;
  a.metrics.generated_tokens++;
  a.metrics.preemptions = s.n_preemptions;
  a.metrics.cached_tokens = s.n_cached;
  ++generated_tokens_;
  s.tokens.push_back(r.token);

  // A grammar that accepted an end token has ended: ignore_eos cannot make it go on.
  const bool ended = a.grammar && a.grammar->terminated();
  const bool eog = (!a.req.ignore_eos || ended) && codec_.is_eog && codec_.is_eog(r.token);
  std::string text;
  if (!eog && codec_.piece) a.pending_bytes += codec_.piece(r.token);
  const bool stopped = check_stop(a, &text);
  TokenEvent ev{a.request, a.index, r.token, std::move(text), r.logprob, r.top};
  if (a.req.on_token) a.req.on_token(ev);
  if (eog || stopped) {
    finish(a, FinishReason::kStop);
    return false;
  }
  if (a.metrics.generated_tokens >= a.req.max_tokens || int32_t(s.tokens.size()) >= model_.context_length()) {
    finish(a, FinishReason::kLength);
    return false;
  }
  return true;
}

namespace {
// Length of the longest prefix of |s| that is complete UTF-8.
size_t complete_utf8(const std::string& s) {
  size_t i = s.size();
  for (size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (len > back) i = s.size() - back;
    break;
  }
  return i;
}
}  // namespace

bool Engine::check_stop(Active& a, std::string* text) {
  std::string& buf = a.pending_bytes;
  for (const std::string& stop : a.req.stop) {
    if (stop.empty()) continue;
    const size_t at = buf.find(stop);
    if (at != std::string::npos) {
      *text = buf.substr(0, at);
      buf.clear();
      return true;
    }
  }
  // Hold back any suffix that could begin a stop string, and incomplete UTF-8.
  size_t emit = complete_utf8(buf);
  for (const std::string& stop : a.req.stop)
    for (size_t k = std::min(stop.size() - 1, buf.size()); k > 0; --k)
      if (buf.compare(buf.size() - k, k, stop, 0, k) == 0) { emit = std::min(emit, buf.size() - k); break; }
  *text = buf.substr(0, emit);
  buf.erase(0, emit);
  return false;
}

void Engine::finish(Active& a, FinishReason reason, const std::string& error, std::vector<float> embedding) {
  const auto now = Clock::now();
  a.metrics.e2e_ms = std::chrono::duration<double, std::milli>(now - a.submitted).count();
  if (a.metrics.generated_tokens > 1)
    a.metrics.tpot_ms = std::chrono::duration<double, std::milli>(a.last_token - a.first_token).count() /
                        double(a.metrics.generated_tokens - 1);
  TokenEvent ev{a.request, a.index, -1, {}, 0.0f, {}};
  ev.finish = reason;
  ev.error = error;
  ev.embedding = std::move(embedding);
  ev.metrics = &a.metrics;
  if (reason != FinishReason::kStop) ev.text = std::move(a.pending_bytes);  // flush what was held back
  const RequestId id = a.id;
  auto cb = a.req.on_token;
  scheduler_.finish(id);
  if (cfg_.spec.proposer) cfg_.spec.proposer->release(id);
  ++requests_finished_;
  if (cb) cb(ev);
  // Choices never forked (the request ended before its prompt was computed) finish too, so
  // every choice gets exactly one finish event.
  for (int k = 1; k <= a.forks_pending && cb; ++k) {
    TokenEvent unforked = ev;
    unforked.index = k;
    unforked.text.clear();
    cb(unforked);
  }
  active_.erase(id);
}

void Engine::cancel(RequestId id) {
  std::vector<RequestId> seqs;
  for (const auto& [sid, a] : active_)
    if (a->request == id) seqs.push_back(sid);
  for (RequestId sid : seqs) finish(*active_[sid], FinishReason::kCancelled);
}

void Engine::cancel_all() {
  while (!active_.empty()) finish(*active_.begin()->second, FinishReason::kCancelled);
}

EngineStats Engine::stats() const {
  EngineStats st;
  st.sched = scheduler_.stats();
  st.kv = scheduler_.kv().stats();
  st.kv_usage = scheduler_.kv().usage();
  st.kv_bytes_full = int64_t(st.kv_usage.blocks_used) * kv_.group_block_bytes(false);
  if (const StateManager* sm = scheduler_.states()) {
    st.has_state = true;
    st.state = sm->stats();
    st.state_bytes = int64_t(st.state.pool.slots_used) * st.state.pool.bytes_per_slot;
  }
  if (const KvManager* w = scheduler_.window_kv()) {
    st.window_kv_usage = w->usage();
    st.kv_bytes_window = int64_t(st.window_kv_usage.blocks_used) * kv_.group_block_bytes(true);
    st.kv_window = kv_.config().window;
  }
  st.exec = model_.executor_stats();
  st.spec = spec_;
  if (cfg_.spec.proposer) st.spec.proposer = cfg_.spec.proposer->stats();
  st.kv_blocks_peak = kv_blocks_peak_;
  st.kv_window_blocks_peak = kv_window_blocks_peak_;
  st.kv_blocks_last_step = kv_blocks_last_;
  st.kv_window_blocks_last_step = kv_window_blocks_last_;
  st.generated_tokens = generated_tokens_;
  st.requests_finished = requests_finished_;
  st.grammar = grammar_stats_;
  scheduler_.count_loras(model_.n_loras(), &st.lora_running, &st.lora_waiting);
  // Percentiles from the histogram: the upper edge of the bucket that holds them.
  auto percentile = [&](double q) {
    const int64_t want = int64_t(std::ceil(q * double(grammar_stats_.masks)));
    int64_t seen = 0;
    for (size_t i = 0; i < mask_hist_.size(); ++i)
      if ((seen += mask_hist_[i]) >= want) return double(i + 1) / 100.0;
    return 0.0;
  };
  if (grammar_stats_.masks > 0) {
    st.grammar.mask_ms_p50 = percentile(0.50);
    st.grammar.mask_ms_p99 = percentile(0.99);
  }
  st.running = int32_t(scheduler_.n_running());
  st.waiting = int32_t(scheduler_.n_waiting());
  return st;
}

Status Engine::run_until_idle() {
  while (!scheduler_.idle()) TS_RETURN_IF_ERROR(step());
  return OkStatus();
}

}  // namespace tessera
