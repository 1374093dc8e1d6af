#include "server/reasoning.h"

#include <algorithm>
#include <cstring>

namespace tessera::server {

namespace {
bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of the longest suffix of |s| that is a proper prefix of |tag|.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

// Every token allowed: all of |vocab|'s bits set, none past it.
int32_t allow_all(uint32_t* mask, int32_t vocab) {
  const int32_t words = mask_words(vocab);
  std::fill(mask, mask + words, ~0u);
  if (vocab % 32) mask[words - 1] = (1u << (vocab % 32)) - 1;
  return vocab;
}
}  // namespace

ThinkTags harmony_tags() {
  ThinkTags t;
  t.open = "<|channel|>analysis<|message|>";
  t.close = "<|end|>";
  t.content_prefixes = {"<|start|>assistant", "<|channel|>final<|message|>"};
  return t;
}

std::optional<ThinkTags> think_tags_of(std::string_view chat_template) {
  const ThinkTags h = harmony_tags();
  if (chat_template.find(h.open) != std::string_view::npos &&
      chat_template.find(h.content_prefixes[1]) != std::string_view::npos)
    return h;
  ThinkTags t;
  if (chat_template.find(t.open) == std::string_view::npos || chat_template.find(t.close) == std::string_view::npos)
    return std::nullopt;
  return t;
}

bool prompt_opens_thinking(std::string_view prompt, const ThinkTags& tags) {
  const size_t open = prompt.rfind(tags.open);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(tags.close);
  return close == std::string_view::npos || close < open;
}

// ---- ReasoningSplitter -------------------------------------------------------------------------

ReasoningSplitter::ReasoningSplitter(ThinkTags tags, bool inside)
    : tags_(std::move(tags)), phase_(inside ? Phase::kReasoning : Phase::kStart) {}

void ReasoningSplitter::feed(std::string_view text, std::string* reasoning, std::string* content) {
  held_.append(text);
  for (;;) {
    switch (phase_) {
      case Phase::kStart: {  // reasoning only if the text opens with the tag (after whitespace)
        size_t ws = 0;
        while (ws < held_.size() && is_space(held_[ws])) ++ws;
        const std::string_view rest = std::string_view(held_).substr(ws);
        if (rest.empty()) return;
        if (rest.substr(0, tags_.open.size()) == tags_.open) {
          held_.erase(0, ws + tags_.open.size());
          phase_ = Phase::kReasoning;
          continue;
        }
        if (rest.size() < tags_.open.size() && std::string_view(tags_.open).substr(0, rest.size()) == rest) return;
        phase_ = Phase::kHeader;
        continue;
      }
      case Phase::kReasoning: {
        const size_t at = held_.find(tags_.close);
        if (at != std::string::npos) {
          reasoning->append(held_, 0, at);
          held_.erase(0, at + tags_.close.size());
          phase_ = Phase::kAfterClose;
          continue;
        }
        const size_t keep = partial_tag(held_, tags_.close);
        reasoning->append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case Phase::kAfterClose: {  // the whitespace between the close tag and the answer is neither
        size_t ws = 0;
        while (ws < held_.size() && is_space(held_[ws])) ++ws;
        held_.erase(0, ws);
        if (held_.empty()) return;
        phase_ = Phase::kHeader;
        continue;
      }
      case Phase::kHeader: {  // the optional headers before the answer (harmony), each stripped
        for (; next_prefix_ < tags_.content_prefixes.size(); ++next_prefix_) {
          const std::string& p = tags_.content_prefixes[next_prefix_];
          if (held_.compare(0, p.size(), p) == 0) {
            held_.erase(0, p.size());
            continue;
          }
          if (held_.size() < p.size() && p.compare(0, held_.size(), held_) == 0) return;  // may still become it
        }
        phase_ = Phase::kContent;
        continue;
      }
      case Phase::kContent:
        content->append(held_);
        held_.clear();
        return;
    }
  }
}

void ReasoningSplitter::finish(std::string* reasoning, std::string* content) {
  if (phase_ == Phase::kReasoning) reasoning->append(held_);
  else if (phase_ != Phase::kAfterClose) content->append(held_);
  held_.clear();
}

// ---- ReasoningGate -----------------------------------------------------------------------------

ReasoningGate::ReasoningGate(std::shared_ptr<const TokenPieces> pieces, ThinkTags tags, int32_t budget,
                             std::vector<int32_t> close_tokens, std::unique_ptr<Grammar> inner)
    : pieces_(std::move(pieces)), tags_(std::move(tags)), budget_(budget), close_tokens_(std::move(close_tokens)),
      inner_(std::move(inner)) {
  if (budget_ == 0 && !close_tokens_.empty()) st_.forced = 0;
}

int32_t ReasoningGate::fill_mask(uint32_t* mask) {
  const int32_t vocab = vocab_size();
  if (!st_.thinking) return inner_ ? inner_->fill_mask(mask) : allow_all(mask, vocab);
  if (st_.forced < 0) return allow_all(mask, vocab);
  std::fill(mask, mask + mask_words(vocab), 0u);
  const int32_t t = close_tokens_[size_t(st_.forced)];
  mask[t >> 5] |= 1u << (t & 31);
  return 1;
}

bool ReasoningGate::accept(int32_t token) {
  if (token < 0 || token >= vocab_size()) return false;
  State next = st_;
  next.to_inner = false;
  if (!next.thinking) {
    if (inner_ && !inner_->accept(token)) return false;
    next.to_inner = inner_ != nullptr;
  } else if (next.forced >= 0) {
    if (token != close_tokens_[size_t(next.forced)]) return false;
    if (size_t(++next.forced) == close_tokens_.size()) {
      next.thinking = false;
      next.forced = -1;
      next.tail.clear();
    }
  } else {
    ++next.reasoning_tokens;
    next.tail += (*pieces_)[size_t(token)];
    if (next.tail.find(tags_.close) != std::string::npos) {
      next.thinking = false;  // the model closed its reasoning itself
      next.tail.clear();
    } else {
      if (next.tail.size() > tags_.close.size()) next.tail.erase(0, next.tail.size() - tags_.close.size());
      if (budget_ >= 0 && next.reasoning_tokens >= budget_ && !close_tokens_.empty()) next.forced = 0;
    }
  }
  history_.push_back(std::move(st_));
  st_ = std::move(next);
  return true;
}

void ReasoningGate::rollback(int32_t n) {
  int32_t inner_n = 0;
  for (int32_t i = 0; i < n && !history_.empty(); ++i) {
    inner_n += st_.to_inner ? 1 : 0;
    st_ = std::move(history_.back());
    history_.pop_back();
  }
  if (inner_n > 0) inner_->rollback(inner_n);
}

std::unique_ptr<Grammar> ReasoningGate::fork() const {
  auto g = std::make_unique<ReasoningGate>(pieces_, tags_, budget_, close_tokens_, inner_ ? inner_->fork() : nullptr);
  g->st_ = st_;
  g->history_ = history_;
  return g;
}

}  // namespace tessera::server
