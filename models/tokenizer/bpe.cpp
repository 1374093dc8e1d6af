// Byte-level BPE: a pre-tokenized piece starts as one symbol per byte and the adjacent pair
// with the lowest merge rank is merged until no pair has a merge (leftmost first on ties).
#include <queue>

#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

using MergeTable = Tokenizer::MergeTable;
constexpr auto merge_key = &Tokenizer::merge_key;

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the piece, -1 at the ends; id -1 once merged away
};

struct Candidate {
  int32_t rank;
  int32_t left;  // symbol index
  int32_t left_id, right_id;  // the pair when queued: stale if either symbol changed since
  int32_t result;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

// BPE over a run of bytes that all have a single-byte token.
void bpe_run(const MergeTable& merges, const int32_t* byte_ids, std::string_view run,
             std::vector<int32_t>& out) {
  std::vector<Symbol> syms(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    syms[i] = {byte_ids[static_cast<uint8_t>(run[i])], static_cast<int32_t>(i) - 1,
               i + 1 < run.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
    auto it = merges.find(merge_key(a, b));
    if (it != merges.end()) queue.push({it->second.rank, left, a, b, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<size_t>(c.left)];
    // Skip candidates made stale by an earlier merge of either symbol.
    if (l.id != c.left_id || l.next < 0) continue;
    Symbol& r = syms[static_cast<size_t>(l.next)];
    if (r.id != c.right_id) continue;
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    r = {-1, -1, -1};
    try_pair(l.prev);
    try_pair(c.left);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next)
    out.push_back(syms[static_cast<size_t>(i)].id);
}

}  // namespace

void Tokenizer::encode_bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    // The vocabulary spells tokens in the byte-level alphabet; a whole-piece hit skips BPE.
    std::string spelled;
    for (char c : piece) utf8_append(spelled, byte_to_codepoint(static_cast<uint8_t>(c)));
    auto it = vocab_.find(spelled);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Every real byte-level vocabulary has all 256 byte tokens; a byte without one is
  // emitted as unk (or dropped) and BPE runs on the stretches around it.
  size_t start = 0;
  for (size_t i = 0; i <= piece.size(); ++i) {
    if (i < piece.size() && byte_ids_[static_cast<uint8_t>(piece[i])] >= 0) continue;
    if (i > start) bpe_run(merges_, byte_ids_, piece.substr(start, i - start), out);
    if (i < piece.size()) push_byte(static_cast<uint8_t>(piece[i]), out);
    start = i + 1;
  }
}

}  // namespace tessera
