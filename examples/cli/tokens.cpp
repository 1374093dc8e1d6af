// `tessera tokenize`, `tessera eval` (token ids -> logits .npy) and `tessera perplexity`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "examples/cli/commands.h"
#include "examples/cli/common.h"
#include "models/mapped_file.h"
#include "models/quantize/logit_file.h"
#include "models/scoring.h"

namespace tessera::cli {

namespace {

struct TokenOptions {
  ModelOptions model;
  std::string text, file, tokens, out = "logits.npy", format = "lines";
  std::string save_logits, kl_base;  // perplexity: write / compare against a baseline logit file
  bool no_special = false;
  int ctx = 512;
  int64_t last = 0;  // eval: write only the last this many rows (0: all)
  int chunk = 512;   // eval: tokens per step
};

Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::string cur;
  for (size_t i = 0; i <= s.size(); ++i) {
    const char c = i < s.size() ? s[i] : ',';
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (cur.empty()) continue;
      char* end = nullptr;
      const long v = std::strtol(cur.c_str(), &end, 10);
      if (*end != '\0' || v < 0 || v > INT32_MAX) return InvalidArgument("not a token id: '" + cur + "'");
      ids.push_back(int32_t(v));
      cur.clear();
    } else {
      cur += c;
    }
  }
  return ids;
}

// A .npy (version 1.0) file of float32 [rows, cols].
Status write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(path + ": cannot write");
  const uint16_t len = uint16_t(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * 4));
  return f ? OkStatus() : DataLoss(path + ": write failed");
}

// Reads only the vocabulary (no weights, no device), so a vocab-only GGUF works.
void tokenize_command(const TokenOptions& o) {
  auto tok = load_tokenizer(o.model.model);
  if (!tok.ok()) return fail(tok.status());
  std::string text = o.text;
  if (!o.file.empty()) {
    auto r = read_file(o.file);
    if (!r.ok()) return fail(r.status());
    text = *r;
  }
  const auto ids = (*tok)->encode(text, !o.no_special, !o.no_special);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (o.format == "csv") std::printf("%s%d", i ? "," : "", ids[i]);
    else std::printf("%d\n", ids[i]);
  }
  if (o.format == "csv") std::printf("\n");
}

void eval_command(const TokenOptions& o) {
  std::string src = o.tokens;
  if (!o.file.empty()) {
    auto r = read_file(o.file);
    if (!r.ok()) return fail(r.status());
    src = *r;
  }
  auto ids = parse_ids(src);
  if (!ids.ok()) return fail(ids.status());
  if (ids->empty()) return fail(InvalidArgument("eval: no token ids given (--tokens or --file)"));
  LoadOptions lo;
  lo.max_batch_tokens = 512;
  auto model = load_model(o.model, lo);
  if (!model) return;
  std::vector<float> logits;
  const auto kvt = dtype_from_name(o.model.kv_dtype);
  if (!kvt) return fail(InvalidArgument("unknown --kv-dtype '" + o.model.kv_dtype + "'"));
  const int64_t rows = o.last > 0 ? std::min<int64_t>(o.last, int64_t(ids->size())) : int64_t(ids->size());
  const Status s = eval_logits(*model, *ids, o.chunk, &logits, *kvt, int64_t(ids->size()) - rows);
  if (!s.ok()) return fail(s);
  const Status w = write_npy(o.out, logits, rows, model->vocab_size());
  if (!w.ok()) return fail(w);
  if (!o.model.quiet) std::fprintf(stderr, "eval: wrote %lld x %d logits to %s\n", (long long)rows, model->vocab_size(), o.out.c_str());
}

// Streams each scored row into the baseline file being written and/or the KL comparison.
struct KlSession {
  std::unique_ptr<LogitWriter> writer;
  std::unique_ptr<LogitReader> base;
  KlAccumulator kl;
  std::vector<float> base_row;
  size_t vocab = 0;
  Status on_row(const float* logits) {
    if (writer) {
      TS_RETURN_IF_ERROR(writer->add_row(logits));
    }
    if (base) {
      TS_RETURN_IF_ERROR(base->next_row(&base_row));
      kl.add(base_row.data(), logits, vocab);
    }
    return OkStatus();
  }
};

Result<KlSession> open_kl_session(const TokenOptions& o, const LogitRunInfo& run) {
  KlSession k;
  k.vocab = run.vocab;
  if (!o.kl_base.empty()) {
    TS_ASSIGN_OR_RETURN(k.base, LogitReader::open(o.kl_base));
    TS_RETURN_IF_ERROR(k.base->check_matches(run));
  }
  if (!o.save_logits.empty()) {
    TS_ASSIGN_OR_RETURN(k.writer, LogitWriter::create(o.save_logits, run));
  }
  return k;
}

void print_kl(const KlSession& k, const PerplexityResult& r) {
  const double base_ppl = std::exp(k.base->mean_nll());
  std::printf("kl divergence: mean %.6g +/- %.3g, median %.6g, p99 %.6g, max %.6g over %lld positions\n", k.kl.mean(),
              k.kl.stderr_mean(), k.kl.quantile(0.5), k.kl.quantile(0.99), k.kl.max(), (long long)k.kl.count());
  std::printf("top-1 agreement: %.2f %%\n", 100.0 * k.kl.top1_agreement());
  std::printf("perplexity change: %.4f -> %.4f (%+.3f %%)\n", base_ppl, r.perplexity, 100.0 * (r.perplexity / base_ppl - 1.0));
}

void perplexity_command(const TokenOptions& o) {
  auto text = read_file(o.file);
  if (!text.ok()) return fail(text.status());
  auto model = load_model(o.model);
  if (!model) return;
  const auto ids = model->tokenizer().encode(*text, true, false);
  LogitRunInfo run;
  run.vocab = uint32_t(model->vocab_size());
  run.window = uint32_t(o.ctx);
  run.n_tokens = ids.size();
  run.n_scored = uint64_t(perplexity_scored_positions(int64_t(ids.size()), o.ctx));
  run.text_hash = fnv1a64(text->data(), text->size());
  run.tokens_hash = fnv1a64(ids.data(), ids.size() * sizeof(int32_t));
  auto session = open_kl_session(o, run);
  if (!session.ok()) return fail(session.status());
  KlSession& k = *session;
  ScoredRowFn on_row;
  if (k.writer || k.base) on_row = [&k](const float* logits, int32_t) { return k.on_row(logits); };
  auto r = perplexity(*model, ids, o.ctx, [&](int w, int n, double ppl) {
    if (!o.model.quiet) std::fprintf(stderr, "\rperplexity: window %d/%d, running ppl %.4f", w, n, ppl);
  }, on_row);
  if (!o.model.quiet) std::fprintf(stderr, "\n");
  if (!r.ok()) return fail(r.status());
  std::printf("perplexity %.4f over %lld tokens in %d windows of %d (mean nll %.5f)\n", r->perplexity,
              (long long)r->scored_tokens, r->windows, o.ctx, r->mean_nll);
  if (k.writer) {
    const Status s = k.writer->finish(r->mean_nll);
    if (!s.ok()) return fail(s);
    if (!o.model.quiet) std::fprintf(stderr, "saved %lld rows of logits to %s\n", (long long)run.n_scored, o.save_logits.c_str());
  }
  if (k.base) print_kl(k, *r);
}

}  // namespace

void add_token_commands(CLI::App& app) {
  auto t = std::make_shared<TokenOptions>();
  auto* tok = app.add_subcommand("tokenize", "Print the token ids of a text");
  add_model_options(tok, &t->model);
  tok->add_option("-p,--prompt", t->text, "text to tokenize");
  tok->add_option("-f,--file", t->file, "read the text from a file");
  tok->add_option("--format", t->format, "lines (one id per line) or csv")->check(CLI::IsMember({"lines", "csv"}));
  tok->add_flag("--no-special", t->no_special, "no BOS/EOS, and special-token text stays text");
  tok->callback([t] { tokenize_command(*t); });

  auto e = std::make_shared<TokenOptions>();
  auto* ev = app.add_subcommand("eval", "Compute the logits of every position of a prompt given as token ids (.npy)");
  add_model_options(ev, &e->model);
  ev->add_option("-t,--tokens", e->tokens, "token ids, comma or space separated");
  ev->add_option("-f,--file", e->file, "read the token ids from a file");
  ev->add_option("-o,--out", e->out, "output .npy file (float32 [tokens, vocab])")->capture_default_str();
  ev->add_option("--chunk", e->chunk,
                 "tokens per step (at most 512): a smaller chunk runs the prompt as several steps, each continuing "
                 "the KV cache and the recurrent state from the one before")
      ->check(CLI::Range(1, 512));
  ev->add_option("--last", e->last, "write only the logits of the last N positions (long prompts, large vocabularies)")
      ->check(CLI::PositiveNumber);
  ev->callback([e] { eval_command(*e); });

  auto p = std::make_shared<TokenOptions>();
  auto* pp = app.add_subcommand("perplexity", "Perplexity of a text file (non-overlapping windows, second halves scored)");
  add_model_options(pp, &p->model);
  add_thread_options(pp, &p->model.threads, &p->model.threads_batch);
  pp->add_option("-f,--file", p->file, "text file")->required();
  pp->add_option("--window", p->ctx, "window size in tokens")->capture_default_str();
  pp->add_option("model", p->model.model, "GGUF model file (same as -m)");
  pp->add_option("--save-logits", p->save_logits, "save every scored position's log-probabilities as a KL baseline");
  pp->add_option("--kl-base", p->kl_base, "report KL divergence, top-1 agreement and the perplexity change against "
                                          "a baseline saved with --save-logits (same text, window and vocabulary)");
  pp->callback([p] { perplexity_command(*p); });
}

}  // namespace tessera::cli
