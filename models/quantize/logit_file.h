// Baseline logit files for KL divergence: `tessera perplexity --save-logits BASE.bin` stores the
// log-probabilities of every scored position; a later run with `--kl-base BASE.bin` (another
// quantisation of the same model, same text) compares its distributions against them.
//
// File layout (little endian): the 64-byte LogitFileHeader, then n_scored rows of vocab f32
// log-probabilities (log-softmax computed in double). f32 rows keep a model's KL against
// itself exactly 0; the cost is vocab * 4 bytes per scored token (SmolLM2: 192 KiB).
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera {

// What a run must share with its baseline for the comparison to mean anything.
struct LogitRunInfo {
  uint32_t vocab = 0;
  uint32_t window = 0;      // perplexity window size in tokens
  uint64_t n_tokens = 0;    // tokens of the whole text
  uint64_t n_scored = 0;    // positions scored (rows in the file)
  uint64_t text_hash = 0;   // FNV-1a 64 of the text's bytes
  uint64_t tokens_hash = 0; // FNV-1a 64 of the token ids (catches a different tokenizer)
};

uint64_t fnv1a64(const void* data, size_t n);

// Writes a logit file row by row. finish() records the run's mean NLL and closes the file;
// a file never finished is rejected by LogitReader.
class LogitWriter {
 public:
  static Result<std::unique_ptr<LogitWriter>> create(const std::string& path, const LogitRunInfo& info);
  ~LogitWriter();
  Status add_row(const float* logits);  // |vocab| raw logits; stored as log-probabilities
  Status finish(double mean_nll);

 private:
  LogitWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  LogitRunInfo info_;
  uint64_t rows_ = 0;
  std::vector<float> buf_;
};

class LogitReader {
 public:
  // Validates the magic, version and that the size matches the header exactly.
  static Result<std::unique_ptr<LogitReader>> open(const std::string& path);
  ~LogitReader();
  const LogitRunInfo& info() const { return info_; }
  double mean_nll() const { return mean_nll_; }
  // InvalidArgument naming every field that differs between the baseline and |run|.
  Status check_matches(const LogitRunInfo& run) const;
  // The next row's |vocab| log-probabilities.
  Status next_row(std::vector<float>* logprobs);

 private:
  LogitReader() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  LogitRunInfo info_;
  double mean_nll_ = 0;
  uint64_t rows_read_ = 0;
};

// log-softmax of |n| logits, in double.
void log_softmax(const float* logits, size_t n, std::vector<double>* out);

// KL(base || run) per position, summarised.
class KlAccumulator {
 public:
  // |base_logprobs| from the baseline file, |logits| this run's raw logits, both |vocab| long.
  void add(const float* base_logprobs, const float* logits, size_t vocab);
  int64_t count() const { return int64_t(kl_.size()); }
  double mean() const;
  double max() const;
  double quantile(double q) const;    // q in [0, 1]
  double stderr_mean() const;         // standard error of mean()
  double top1_agreement() const;      // fraction of positions whose argmax agrees

 private:
  std::vector<double> kl_;
  int64_t top1_same_ = 0;
  std::vector<double> lp_;
};

}  // namespace tessera
