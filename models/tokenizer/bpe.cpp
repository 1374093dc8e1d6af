// Byte-level BPE: a pre-tokenized piece starts as one symbol per byte and the adjacent pair
// with the lowest merge rank is merged until no pair has a merge (leftmost first on ties).
#include <algorithm>
#include <queue>

#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

using MergeTable = Tokenizer::MergeTable;
constexpr auto merge_key = &Tokenizer::merge_key;

struct Symbol {
  int32_t id;          // -1: not a vocabulary entry, so no merge involves it
  int32_t prev, next;  // neighbours in the piece, -1 at the ends; id -1 and len 0 once merged away
  size_t start, len;   // bytes of the piece
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

// Merges |syms| (a linked list in index order) by rank until no pair has a merge.
void bpe_merge(const MergeTable& merges, std::vector<Symbol>& syms) {
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto try_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
    if (a < 0 || b < 0) return;
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
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.left;
    r = {-1, -1, -1, 0, 0};
    try_pair(l.prev);
    try_pair(c.left);
  }
}

// BPE over a run of bytes that all have a single-byte token.
void bpe_run(const MergeTable& merges, const int32_t* byte_ids, std::string_view run,
             std::vector<int32_t>& out) {
  std::vector<Symbol> syms(run.size());
  for (size_t i = 0; i < run.size(); ++i) {
    syms[i] = {byte_ids[static_cast<uint8_t>(run[i])], static_cast<int32_t>(i) - 1,
               i + 1 < run.size() ? static_cast<int32_t>(i + 1) : -1, i, 1};
  }
  bpe_merge(merges, syms);
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

namespace tessera {

// BPE over raw UTF-8 (Gemma 4): a piece starts as one symbol per character, spelled as in the
// vocabulary; a final symbol that is no vocabulary entry falls back to its <0xNN> byte tokens.
void Tokenizer::encode_bpe_text(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  const bool newlines_only = piece.find_first_not_of('\n') == std::string_view::npos;
  if (ignore_merges_ || newlines_only) {
    // A run of newlines is one token when the vocabulary has it (merges never build the
    // longest runs); Llama 3 style vocabularies keep any whole-entry piece.
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < piece.size();) {
    const size_t len = std::max<size_t>(1, utf8_valid_len(piece, pos));
    auto it = vocab_.find(std::string(piece.substr(pos, len)));
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({it == vocab_.end() ? -1 : it->second, idx - 1, -1, pos, len});
    if (idx > 0) syms[static_cast<size_t>(idx - 1)].next = idx;
    pos += len;
  }
  bpe_merge(merges_, syms);
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    const Symbol& s = syms[static_cast<size_t>(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (size_t b = 0; b < s.len; ++b) push_byte(static_cast<uint8_t>(piece[s.start + b]), out);
  }
}

}  // namespace tessera
