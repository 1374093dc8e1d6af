#include "models/quantize/logit_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace tessera {

namespace {

constexpr char kMagic[8] = {'T', 'S', 'L', 'O', 'G', 'I', 'T', 'S'};
constexpr uint32_t kVersion = 1;

// 64 bytes on disk; mean_nll is NaN until LogitWriter::finish.
struct LogitFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t vocab;
  uint32_t window;
  uint32_t reserved;
  uint64_t n_tokens;
  uint64_t n_scored;
  uint64_t text_hash;
  uint64_t tokens_hash;
  double mean_nll;
};
static_assert(sizeof(LogitFileHeader) == 64, "logit file header is 64 bytes on disk");

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void log_softmax(const float* logits, size_t n, std::vector<double>* out) {
  out->resize(n);
  double mx = logits[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < n; ++i) (*out)[i] = double(logits[i]) - lse;
}

// ---- writer ----

Result<std::unique_ptr<LogitWriter>> LogitWriter::create(const std::string& path, const LogitRunInfo& info) {
  if (info.vocab == 0) return InvalidArgument(path + ": logit file with an empty vocabulary");
  std::unique_ptr<LogitWriter> w(new LogitWriter());
  w->path_ = path;
  w->info_ = info;
  w->f_ = std::fopen(path.c_str(), "wb");
  if (!w->f_) return Unavailable(path + ": cannot create: " + std::strerror(errno));
  LogitFileHeader h{};  // mean_nll NaN marks an unfinished file
  std::memcpy(h.magic, kMagic, 8);
  h.mean_nll = std::nan("");
  if (std::fwrite(&h, sizeof h, 1, w->f_) != 1) return Unavailable(path + ": write failed: " + std::strerror(errno));
  return w;
}

LogitWriter::~LogitWriter() {
  if (f_) std::fclose(f_);
}

Status LogitWriter::add_row(const float* logits) {
  if (rows_ >= info_.n_scored)
    return OutOfRange(path_ + ": more than the " + std::to_string(info_.n_scored) + " rows announced");
  std::vector<double> lp;
  log_softmax(logits, info_.vocab, &lp);
  buf_.assign(lp.begin(), lp.end());
  if (std::fwrite(buf_.data(), 4, buf_.size(), f_) != buf_.size())
    return Unavailable(path_ + ": write failed: " + std::strerror(errno));
  ++rows_;
  return OkStatus();
}

Status LogitWriter::finish(double mean_nll) {
  if (rows_ != info_.n_scored)
    return Internal(path_ + ": " + std::to_string(rows_) + " rows written, " + std::to_string(info_.n_scored) + " announced");
  LogitFileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.vocab = info_.vocab;
  h.window = info_.window;
  h.n_tokens = info_.n_tokens;
  h.n_scored = info_.n_scored;
  h.text_hash = info_.text_hash;
  h.tokens_hash = info_.tokens_hash;
  h.mean_nll = mean_nll;
  const bool ok = std::fseek(f_, 0, SEEK_SET) == 0 && std::fwrite(&h, sizeof h, 1, f_) == 1;
  const int err = errno;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) return Unavailable(path_ + ": write failed: " + std::strerror(err));
  return OkStatus();
}

// ---- reader ----

Result<std::unique_ptr<LogitReader>> LogitReader::open(const std::string& path) {
  std::unique_ptr<LogitReader> r(new LogitReader());
  r->path_ = path;
  r->f_ = std::fopen(path.c_str(), "rb");
  if (!r->f_) return NotFound(path + ": cannot open: " + std::strerror(errno));
  LogitFileHeader h{};
  if (std::fread(&h, sizeof h, 1, r->f_) != 1) return DataLoss(path + ": shorter than a logit file header (64 bytes)");
  if (std::memcmp(h.magic, kMagic, 8) != 0) return DataLoss(path + ": not a tessera logit file (bad magic)");
  if (h.version != kVersion)
    return DataLoss(path + ": logit file version " + std::to_string(h.version) + " (the file was not finished, or " +
                    "is from another tessera; this one reads version " + std::to_string(kVersion) + ")");
  if (h.vocab == 0 || h.n_scored == 0 || h.n_scored > h.n_tokens)
    return DataLoss(path + ": bad header (vocab " + std::to_string(h.vocab) + ", " + std::to_string(h.n_scored) +
                    " scored of " + std::to_string(h.n_tokens) + " tokens)");
  if (std::fseek(r->f_, 0, SEEK_END) != 0) return DataLoss(path + ": cannot seek");
  const long size = std::ftell(r->f_);
  const double want = 64.0 + double(h.n_scored) * double(h.vocab) * 4.0;
  if (size < 0 || double(size) != want)
    return DataLoss(path + ": " + std::to_string(size) + " bytes, but the header announces " + std::to_string(h.n_scored) +
                    " rows of " + std::to_string(h.vocab) + " (" + std::to_string(uint64_t(want)) + " bytes)");
  std::fseek(r->f_, 64, SEEK_SET);
  r->info_ = {h.vocab, h.window, h.n_tokens, h.n_scored, h.text_hash, h.tokens_hash};
  r->mean_nll_ = h.mean_nll;
  return r;
}

LogitReader::~LogitReader() {
  if (f_) std::fclose(f_);
}

Status LogitReader::check_matches(const LogitRunInfo& run) const {
  std::string diff;
  auto field = [&](const char* name, uint64_t base, uint64_t now, bool as_hex = false) {
    if (base == now) return;
    diff += std::string(diff.empty() ? "" : "; ") + name + " " + (as_hex ? hex(base) : std::to_string(base)) +
            " in the baseline, " + (as_hex ? hex(now) : std::to_string(now)) + " now";
  };
  field("vocab", info_.vocab, run.vocab);
  field("window", info_.window, run.window);
  field("token count", info_.n_tokens, run.n_tokens);
  field("scored positions", info_.n_scored, run.n_scored);
  field("text hash", info_.text_hash, run.text_hash, true);
  field("token ids hash", info_.tokens_hash, run.tokens_hash, true);
  if (diff.empty()) return OkStatus();
  return InvalidArgument(path_ + ": baseline does not match this run (" + diff + ")");
}

Status LogitReader::next_row(std::vector<float>* logprobs) {
  if (rows_read_ >= info_.n_scored) return OutOfRange(path_ + ": all " + std::to_string(info_.n_scored) + " rows read");
  logprobs->resize(info_.vocab);
  if (std::fread(logprobs->data(), 4, info_.vocab, f_) != info_.vocab)
    return DataLoss(path_ + ": short read at row " + std::to_string(rows_read_));
  ++rows_read_;
  return OkStatus();
}

// ---- KL ----

void KlAccumulator::add(const float* base_logprobs, const float* logits, size_t vocab) {
  log_softmax(logits, vocab, &lp_);
  double kl = 0.0;
  size_t base_top = 0, run_top = 0;
  for (size_t i = 0; i < vocab; ++i) {
    // Rounded to f32 like the baseline's rows, so a run against its own baseline gives exactly 0.
    const double lb = base_logprobs[i], lr = double(float(lp_[i]));
    kl += std::exp(lb) * (lb - lr);
    if (base_logprobs[i] > base_logprobs[base_top]) base_top = i;
    if (lp_[i] > lp_[run_top]) run_top = i;
  }
  // Rounding can make a near-identical pair come out a hair below zero; KL is never negative.
  kl_.push_back(std::max(kl, 0.0));
  if (base_top == run_top) ++top1_same_;
}

double KlAccumulator::mean() const {
  double s = 0.0;
  for (double k : kl_) s += k;
  return kl_.empty() ? 0.0 : s / double(kl_.size());
}

double KlAccumulator::max() const { return kl_.empty() ? 0.0 : *std::max_element(kl_.begin(), kl_.end()); }

double KlAccumulator::quantile(double q) const {
  if (kl_.empty()) return 0.0;
  std::vector<double> s = kl_;
  std::sort(s.begin(), s.end());
  const size_t i = size_t(std::clamp(q, 0.0, 1.0) * double(s.size() - 1) + 0.5);
  return s[i];
}

double KlAccumulator::stderr_mean() const {
  if (kl_.size() < 2) return 0.0;
  const double m = mean();
  double v = 0.0;
  for (double k : kl_) v += (k - m) * (k - m);
  return std::sqrt(v / double(kl_.size() - 1) / double(kl_.size()));
}

double KlAccumulator::top1_agreement() const { return kl_.empty() ? 0.0 : double(top1_same_) / double(kl_.size()); }

}  // namespace tessera
