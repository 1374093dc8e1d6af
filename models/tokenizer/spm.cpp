// SentencePiece BPE (Llama 2 style): spaces become "▁", the text starts as one symbol per
// character, and the adjacent pair whose concatenation is the highest-scoring vocabulary
// entry is merged until none is left (leftmost first on ties). A final symbol missing from
// the vocabulary falls back to its bytes (<0xNN> tokens) or to unk.
#include <queue>

#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

struct SpmSymbol {
  size_t start, len;   // bytes of the normalised text; len 0 once merged away
  int32_t prev, next;  // neighbours, -1 at the ends
};

struct SpmCandidate {
  float score;
  int32_t left;
  size_t len;  // combined length when queued: stale if either symbol changed since
  int32_t id;
  bool operator<(const SpmCandidate& o) const {  // max-heap: best score, then leftmost
    return score != o.score ? score < o.score : left > o.left;
  }
};

}  // namespace

void Tokenizer::encode_spm(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string norm;
  norm.reserve(text.size() + 8);
  if (add_prefix && data_.add_space_prefix) norm += "\xE2\x96\x81";
  for (char c : text) {
    if (c == ' ') norm += "\xE2\x96\x81";
    else norm += c;
  }
  std::vector<SpmSymbol> syms;
  for (size_t pos = 0; pos < norm.size();) {
    const size_t len = std::max<size_t>(1, utf8_valid_len(norm, pos));
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({pos, len, idx - 1, -1});
    if (idx > 0) syms[static_cast<size_t>(idx - 1)].next = idx;
    pos += len;
  }

  std::priority_queue<SpmCandidate> queue;
  auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    const SpmSymbol& l = syms[static_cast<size_t>(left)];
    if (l.next < 0) return;
    const SpmSymbol& r = syms[static_cast<size_t>(l.next)];
    auto it = vocab_.find(norm.substr(l.start, l.len + r.len));
    if (it == vocab_.end()) return;
    const int32_t type = type_of(it->second);
    if (type != kTokenNormal && type != kTokenUserDefined) return;  // never merge into <s> etc.
    queue.push({data_.scores[static_cast<size_t>(it->second)], left, l.len + r.len, it->second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const SpmCandidate c = queue.top();
    queue.pop();
    SpmSymbol& l = syms[static_cast<size_t>(c.left)];
    if (l.len == 0 || l.next < 0) continue;
    SpmSymbol& r = syms[static_cast<size_t>(l.next)];
    if (l.len + r.len != c.len) continue;  // a neighbour grew or shrank since this was queued
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    r = {0, 0, -1, -1};
    try_pair(l.prev);
    try_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const SpmSymbol& s = syms[static_cast<size_t>(i)];
    auto it = vocab_.find(norm.substr(s.start, s.len));
    if (it != vocab_.end() && type_of(it->second) != kTokenUnused) {
      out.push_back(it->second);
      continue;
    }
    for (size_t b = 0; b < s.len; ++b) push_byte(static_cast<uint8_t>(norm[s.start + b]), out);
  }
}

}  // namespace tessera
