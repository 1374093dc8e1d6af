// The reasoning split. Models that think before they answer (Qwen3, Qwen3.5, DeepSeek-R1, ...)
// write their thoughts between tags, <think> ... </think> (gpt-oss: harmony's analysis channel,
// then the final channel); the server returns them apart, as
// `reasoning_content` beside `content` (the field vLLM's reasoning parsers and llama.cpp's
// --reasoning-format deepseek fill), streamed deltas included.
//
// Two pieces:
//  - ReasoningSplitter cuts generated text into reasoning and content as it streams, holding back
//    a suffix that may be the start of a tag.
//  - ReasoningGate is a Grammar (core/sched/grammar.h) that follows the thinking phase token by
//    token: after |budget| reasoning tokens it forces the close tag (the reasoning budget), and
//    only after the close tag does it apply the request's structured-output grammar, so a
//    thinking model can think before it writes the JSON the schema asks for.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sched/grammar.h"

namespace tessera::server {

struct ThinkTags {
  std::string open = "<think>", close = "</think>";
  // Headers the answer may start with, each optional, stripped in order (harmony: the next
  // message's "<|start|>assistant", then "<|channel|>final<|message|>"). Empty for <think> models.
  std::vector<std::string> content_prefixes;
};

// gpt-oss's harmony format: the analysis channel's message is the reasoning (up to its <|end|>),
// the final channel's message the content.
ThinkTags harmony_tags();

// The thinking tags when the model's chat template writes them (the "auto" reasoning format):
// harmony's channels when it writes them, else <think> ... </think>.
std::optional<ThinkTags> think_tags_of(std::string_view chat_template);

// Whether |prompt| leaves the model inside a thinking block: its last open tag comes after its
// last close tag (Qwen3.5's and DeepSeek-R1's generation prompts end with "<think>\n").
bool prompt_opens_thinking(std::string_view prompt, const ThinkTags& tags);

class ReasoningSplitter {
 public:
  // |inside|: the prompt opened the thinking block, so the text is reasoning until the close tag.
  // Otherwise text is reasoning only when it starts (after whitespace) with the open tag.
  ReasoningSplitter(ThinkTags tags, bool inside);
  // Appends what |text| adds to the reasoning and to the content.
  void feed(std::string_view text, std::string* reasoning, std::string* content);
  // The end of the output: releases what was held back.
  void finish(std::string* reasoning, std::string* content);
  bool in_reasoning() const { return phase_ == Phase::kReasoning; }

 private:
  enum class Phase { kStart, kReasoning, kAfterClose, kHeader, kContent };
  ThinkTags tags_;
  Phase phase_;
  size_t next_prefix_ = 0;  // kHeader: the first content prefix not yet looked for
  std::string held_;  // text not yet assigned (a possible tag prefix, or leading whitespace)
};

// The text of every token id (Tokenizer::token_to_piece), shared by all requests.
using TokenPieces = std::vector<std::string>;

// Used when the prompt opened the thinking block (prompt_opens_thinking).
class ReasoningGate final : public Grammar {
 public:
  // |budget| < 0: unlimited. |close_tokens|: what is forced when the budget runs out (the close
  // tag and the text around it, tokenised). |inner| may be null (no structured output).
  ReasoningGate(std::shared_ptr<const TokenPieces> pieces, ThinkTags tags, int32_t budget, std::vector<int32_t> close_tokens,
                std::unique_ptr<Grammar> inner);

  int32_t fill_mask(uint32_t* mask) override;
  bool accept(int32_t token) override;
  void rollback(int32_t n) override;
  std::unique_ptr<Grammar> fork() const override;
  bool terminated() const override { return !st_.thinking && inner_ && inner_->terminated(); }
  int32_t vocab_size() const override { return int32_t(pieces_->size()); }

 private:
  struct State {
    bool thinking = true;
    int32_t reasoning_tokens = 0;
    int32_t forced = -1;    // >= 0: the index in close_tokens_ of the next token to force
    std::string tail;       // the last bytes of the reasoning, to find the close tag across tokens
    bool to_inner = false;  // the token that led to this state went to the inner grammar
  };
  std::shared_ptr<const TokenPieces> pieces_;
  ThinkTags tags_;
  int32_t budget_;
  std::vector<int32_t> close_tokens_;
  std::unique_ptr<Grammar> inner_;
  State st_;
  std::vector<State> history_;  // the state before each accepted token
};

}  // namespace tessera::server
