// Tokenizers built from plain vocabulary data (GGUF tokenizer.ggml.* metadata or an HF
// tokenizer.json), one per tokenizer.ggml.model:
//   "gpt2"   byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM, DeepSeek, Falcon, ...), with the
//            pre-tokenizer tokenizer.ggml.pre names (pretokenize.h);
//   "llama"  SentencePiece BPE (Llama 2, Mistral, Phi-3: scores, "▁" for spaces and a leading
//            "▁", <0xNN> byte fallback);
//   "gemma4" BPE over raw UTF-8 with "▁" for spaces and <0xNN> byte fallback (Gemma 4);
//   "bert"   WordPiece (BERT family: lower-cased, accents stripped, "▁" marks a word start).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "models/tokenizer/pretokenize.h"

namespace tessera {

// GGUF token types (tokenizer.ggml.token_type).
enum TokenType : int32_t {
  kTokenUndefined = 0,
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenUserDefined = 4,
  kTokenUnused = 5,
  kTokenByte = 6,
};

struct TokenizerData {                 // what GGUF metadata (tokenizer.ggml.*) or tokenizer.json provide
  std::string model;                   // "gpt2", "llama", "gemma4" or "bert" (see above)
  std::string pre;                     // pre-tokenizer: "smollm", "llama-bpe", "qwen2", "gpt2", "default", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;           // SentencePiece scores (may be empty)
  std::vector<int32_t> token_types;    // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;     // "a b" pairs, BPE rank = index
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
};

// From the text of a Hugging Face tokenizer.json and tokenizer_config.json ("" when absent):
// vocabulary, merges, added tokens (special -> control, others user-defined), pre-tokenizer,
// bos/eos/unk/pad and add_bos/add_eos. |chat_template| receives the config's template ("" if
// none). Errors name the file and the field (models/tokenizer/hf_json.cpp).
Result<TokenizerData> tokenizer_data_from_hf_json(std::string_view tokenizer_json, std::string_view config_json,
                                                  std::string* chat_template);

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

struct EncodeOptions {
  bool add_special = false;    // BOS/EOS per the model's flags
  bool parse_special = false;  // special-token text becomes the control token's id
  // Ranges (sorted, not overlapping) where control tokens are never matched even with
  // parse_special: text a user wrote inside a chat template's output, so "<|im_end|>" typed in
  // a message stays text and only the template's own markers become control tokens.
  std::vector<TextRange> literal;
  // > 0: stop once the output holds more than this many ids (so a caller that rejects longer
  // inputs need not tokenise all of a huge one); the output is then a prefix, longer than this.
  size_t max_tokens = 0;
};

// Immutable after create(); every const method is safe to call from several threads.
class Tokenizer {
 public:
  // Validates |data| (token ids in range, array lengths agree, merges name known tokens) and
  // builds the lookup tables. Errors name the field and the offending value.
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerData data);

  // |add_special|: BOS/EOS per the model's flags; |parse_special|: special tokens written in the
  // text (e.g. "<|im_start|>") become their ids, else they are tokenised as plain text.
  // User-defined tokens (type 4) are always matched, as Hugging Face does for non-special
  // added tokens. Invalid UTF-8 is tokenised byte by byte, never rejected; a byte the
  // vocabulary cannot spell becomes unk, or is dropped when unk is missing or a control token
  // (text never turns into a control token unless |parse_special|).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const;
  // Concatenated raw bytes of |ids| (unknown ids are skipped). |skip_special| drops control
  // tokens. For SentencePiece vocabularies with add_space_prefix, the leading space that
  // encoding added is removed, so decode(encode(s)) == s.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  std::string token_to_piece(int32_t id) const;  // raw bytes of one token ("" if out of range)

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos() const { return data_.bos; }
  int32_t eos() const { return data_.eos; }
  int32_t eot() const { return data_.eot; }
  bool add_bos() const { return data_.add_bos; }
  const std::string& model() const { return data_.model; }
  bool is_eog(int32_t id) const;   // end of generation: eos, eot, <|im_end|>, ...
  bool is_control(int32_t id) const;
  // True when decoding drops one leading space (SentencePiece with add_space_prefix).
  bool strips_leading_space() const { return spm_ && data_.add_space_prefix; }
  std::optional<int32_t> find_token(std::string_view piece) const;  // by vocabulary spelling

 // Implementation types shared by the tokenizer's .cpp files.
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  using MergeTable = std::unordered_map<uint64_t, Merge>;  // (left id, right id) -> merge
  static uint64_t merge_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

 private:
  explicit Tokenizer(TokenizerData data) : data_(std::move(data)) {}
  Status build();
  Status build_bpe_merges();
  void build_pieces();
  int32_t type_of(int32_t id) const;
  // Splits |text| on special tokens (longest match first); fragments with id -1 are text.
  // Control tokens only with |parse_special|, and never overlapping a |literal| range.
  void split_special(std::string_view text, bool parse_special, const std::vector<TextRange>& literal,
                     std::vector<std::pair<std::string_view, int32_t>>& out) const;
  void encode_text(std::string_view text, bool after_special, size_t limit, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view piece, std::vector<int32_t>& out) const;   // bpe.cpp
  void encode_bpe_text(std::string_view piece, std::vector<int32_t>& out) const;  // bpe.cpp
  void encode_spm(std::string_view text, bool add_prefix, std::vector<int32_t>& out) const;  // spm.cpp
  void encode_wpm(std::string_view text, std::vector<int32_t>& out) const;    // wordpiece.cpp
  void push_byte(uint8_t b, std::vector<int32_t>& out) const;

  enum class Algorithm { kBpe, kSpm, kBpeText, kWpm };
  TokenizerData data_;
  Algorithm algo_ = Algorithm::kBpe;
  bool spm_ = false;            // tokens spell spaces as "▁" and bytes as <0xNN> (SPM, Gemma 4, WPM)
  bool ignore_merges_ = false;  // Llama 3: a piece that is a whole vocabulary entry is kept as is
  PreTokenizer pre_;
  size_t max_token_len_ = 0;    // longest token spelling in bytes (WordPiece's search window)
  std::vector<std::string> pieces_;                    // raw bytes per id
  std::unordered_map<std::string, int32_t> vocab_;     // vocabulary spelling -> id
  MergeTable merges_;
  int32_t byte_ids_[256];                              // token for each single byte, or -1
  std::vector<std::pair<std::string, int32_t>> specials_;  // sorted by length, longest first
  bool special_first_byte_[256] = {};  // whether some special token starts with this byte
  std::unordered_set<int32_t> eog_;
};

// Streams text out token by token without splitting a UTF-8 character across callbacks.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool skip_special = false)
      : tok_(t), skip_special_(skip_special) {}
  std::string push(int32_t id);  // the complete UTF-8 text that |id| finishes (maybe empty)
  std::string flush();           // whatever is left (invalid trailing bytes -> U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool started_ = false;  // whether any text has been emitted (for the leading-space rule)
  std::string pending_;
};

}  // namespace tessera
