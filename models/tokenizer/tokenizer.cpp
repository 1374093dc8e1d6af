#include "models/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

std::string id_field(const char* name, int32_t id, size_t n) {
  return std::string("tokenizer: ") + name + " id " + std::to_string(id) +
         " is outside the vocabulary [0, " + std::to_string(n) + ")";
}

// "<0x0A>" -> 10, else -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(TokenizerData data) {
  std::unique_ptr<Tokenizer> t(new Tokenizer(std::move(data)));
  TS_RETURN_IF_ERROR(t->build());
  return t;
}

int32_t Tokenizer::type_of(int32_t id) const {
  return data_.token_types.empty() ? kTokenNormal : data_.token_types[static_cast<size_t>(id)];
}

Status Tokenizer::build() {
  const size_t n = data_.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer: the vocabulary (tokens) is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("tokenizer: vocabulary too large");
  if (data_.model == "llama") {
    algo_ = Algorithm::kSpm;
    if (data_.scores.size() != n)
      return InvalidArgument("tokenizer: model 'llama' needs one score per token: " +
                             std::to_string(data_.scores.size()) + " scores for " +
                             std::to_string(n) + " tokens");
  } else if (data_.model == "gpt2") {
    // A GGUF without tokenizer.ggml.pre gets llama.cpp's default rules.
    TS_ASSIGN_OR_RETURN(pre_, PreTokenizer::from_name(data_.pre.empty() ? "default" : data_.pre));
    ignore_merges_ = pre_.ignore_merges();
  } else if (data_.model == "gemma4") {
    algo_ = Algorithm::kBpeText;
    TS_ASSIGN_OR_RETURN(pre_, PreTokenizer::from_name(data_.pre.empty() ? "gemma4" : data_.pre));
    ignore_merges_ = pre_.ignore_merges();
  } else if (data_.model == "bert") {
    algo_ = Algorithm::kWpm;
  } else {
    return Unimplemented("tokenizer: unsupported tokenizer model '" + data_.model +
                         "' (tokenizer.ggml.model; supported: gpt2, llama, gemma4, bert)");
  }
  spm_ = algo_ != Algorithm::kBpe;
  if (!data_.scores.empty() && data_.scores.size() != n)
    return InvalidArgument("tokenizer: " + std::to_string(data_.scores.size()) + " scores for " +
                           std::to_string(n) + " tokens");
  if (!data_.token_types.empty() && data_.token_types.size() != n)
    return InvalidArgument("tokenizer: " + std::to_string(data_.token_types.size()) +
                           " token types for " + std::to_string(n) + " tokens");
  for (size_t i = 0; i < data_.token_types.size(); ++i) {
    if (data_.token_types[i] < 0 || data_.token_types[i] > kTokenByte)
      return InvalidArgument("tokenizer: token " + std::to_string(i) + " has unknown type " +
                             std::to_string(data_.token_types[i]));
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", data_.bos}, {"eos", data_.eos},
                                                 {"eot", data_.eot}, {"unk", data_.unk},
                                                 {"pad", data_.pad}};
  for (const auto& [name, id] : ids) {
    if (id < -1 || id >= static_cast<int32_t>(n)) return InvalidArgument(id_field(name, id, n));
  }
  for (size_t i = 0; i < n; ++i) vocab_.emplace(data_.tokens[i], static_cast<int32_t>(i));
  build_pieces();
  if (algo_ == Algorithm::kBpe || algo_ == Algorithm::kBpeText) TS_RETURN_IF_ERROR(build_bpe_merges());
  for (const std::string& t : data_.tokens) max_token_len_ = std::max(max_token_len_, t.size());

  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    const int32_t type = type_of(id);
    if ((type == kTokenControl || type == kTokenUserDefined) && !data_.tokens[static_cast<size_t>(id)].empty())
      specials_.emplace_back(data_.tokens[static_cast<size_t>(id)], id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& sp : specials_) special_first_byte_[static_cast<uint8_t>(sp.first[0])] = true;
  for (int32_t id : {data_.eos, data_.eot}) {
    if (id >= 0) eog_.insert(id);
  }
  // Chat models end a turn with these even when the metadata names another eos.
  auto control = [&](const char* name) {
    auto it = vocab_.find(name);
    return it != vocab_.end() && type_of(it->second) == kTokenControl ? it->second : -1;
  };
  for (const char* name : {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>", "<|end|>",
                           "<|eom_id|>", "<|return|>", "<|call|>"})
    if (const int32_t id = control(name); id >= 0) eog_.insert(id);
  // gpt-oss's harmony format: <|end|> closes one message (the analysis channel's, before the final
  // answer) and the reply goes on; <|return|> ends the reply and <|call|> ends it with a tool call.
  // A vocabulary with both of those ends generation there, not at <|end|>.
  if (const int32_t end = control("<|end|>");
      end >= 0 && control("<|return|>") >= 0 && control("<|call|>") >= 0 && end != data_.eos && end != data_.eot)
    eog_.erase(end);
  return OkStatus();
}

// Raw bytes of each token, and the token standing for each single byte.
void Tokenizer::build_pieces() {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  pieces_.resize(data_.tokens.size());
  for (size_t i = 0; i < data_.tokens.size(); ++i) {
    const std::string& tok = data_.tokens[i];
    const int32_t type = type_of(static_cast<int32_t>(i));
    const auto id = static_cast<int32_t>(i);
    if (type == kTokenControl || type == kTokenUserDefined || type == kTokenUnknown) {
      pieces_[i] = tok;  // written in plain text, not in the vocabulary's encoding
      continue;
    }
    if (spm_) {
      const int b = parse_byte_token(tok);
      if (b >= 0 && (type == kTokenByte || data_.token_types.empty())) {
        pieces_[i] = std::string(1, static_cast<char>(b));
        if (byte_ids_[b] < 0) byte_ids_[b] = id;
        continue;
      }
      std::string s;
      for (size_t p = 0; p < tok.size();) {
        if (tok.compare(p, kSpmSpace.size(), kSpmSpace) == 0) {
          s += ' ';
          p += kSpmSpace.size();
        } else {
          s += tok[p++];
        }
      }
      pieces_[i] = std::move(s);
      continue;
    }
    // Byte-level BPE: every code point stands for one byte. A token with a code point outside
    // the alphabet was stored as plain text (an added token); keep its spelling.
    std::string bytes;
    bool plain = false;
    for (size_t p = 0; p < tok.size() && !plain;) {
      const int b = codepoint_to_byte(utf8_next(tok, p));
      if (b < 0) plain = true;
      else bytes += static_cast<char>(b);
    }
    pieces_[i] = plain ? tok : bytes;
    if (!plain && bytes.size() == 1) {
      const auto b = static_cast<uint8_t>(bytes[0]);
      if (byte_ids_[b] < 0) byte_ids_[b] = id;
    }
  }
}

Status Tokenizer::build_bpe_merges() {
  merges_.reserve(data_.merges.size());
  for (size_t r = 0; r < data_.merges.size(); ++r) {
    const std::string& m = data_.merges[r];
    // Split at the first space after position 0 (a part may not be empty).
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      return InvalidArgument("tokenizer: merge " + std::to_string(r) + " '" + m +
                             "' is not two tokens separated by a space");
    const std::string left = m.substr(0, sp), right = m.substr(sp + 1);
    auto l = vocab_.find(left), rr = vocab_.find(right), res = vocab_.find(left + right);
    if (l == vocab_.end() || rr == vocab_.end() || res == vocab_.end())
      return InvalidArgument("tokenizer: merge " + std::to_string(r) + " '" + m +
                             "' names a token missing from the vocabulary");
    merges_.emplace(merge_key(l->second, rr->second), Merge{static_cast<int32_t>(r), res->second});  // first rank wins
  }
  return OkStatus();
}

void Tokenizer::split_special(std::string_view text, bool parse_special, const std::vector<TextRange>& literal,
                              std::vector<std::pair<std::string_view, int32_t>>& out) const {
  size_t text_start = 0, i = 0;
  size_t next_literal = 0;  // the first range of |literal| that does not end before i
  while (i < text.size()) {
    if (!special_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    while (next_literal < literal.size() && literal[next_literal].end <= i) ++next_literal;
    // A control token may not start inside a literal range nor reach into the next one.
    const bool in_literal = next_literal < literal.size() && literal[next_literal].begin <= i;
    const size_t control_room = in_literal ? 0
                                : next_literal < literal.size() ? literal[next_literal].begin - i
                                                                : text.size() - i;
    int32_t found = -1;
    size_t len = 0;
    for (const auto& [s, id] : specials_) {  // longest first, so the first hit is the longest
      if (type_of(id) == kTokenControl && (!parse_special || s.size() > control_room)) continue;
      if (text.compare(i, s.size(), s) == 0) {
        found = id;
        len = s.size();
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (i > text_start) out.emplace_back(text.substr(text_start, i - text_start), -1);
    out.emplace_back(text.substr(i, len), found);
    i += len;
    text_start = i;
  }
  if (text_start < text.size()) out.emplace_back(text.substr(text_start), -1);
}

void Tokenizer::push_byte(uint8_t b, std::vector<int32_t>& out) const {
  if (byte_ids_[b] >= 0) out.push_back(byte_ids_[b]);
  else if (data_.unk >= 0 && type_of(data_.unk) != kTokenControl) out.push_back(data_.unk);
  // else: the vocabulary cannot spell this byte and has no unknown token of its own, so it is
  // dropped. NOTE: byte-level vocabularies often name a control token as unk (SmolLM2:
  // <|endoftext|>, its EOS); emitting it would let a plain byte of user text (0x04, 0xFF) end
  // or forge a turn. Hugging Face drops such bytes too (their BPE model has no unk_token).
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  EncodeOptions o;
  o.add_special = add_special;
  o.parse_special = parse_special;
  return encode(text, o);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& o) const {
  std::vector<int32_t> out;
  const size_t limit = o.max_tokens > 0 ? o.max_tokens : SIZE_MAX;
  if (o.add_special && data_.add_bos && data_.bos >= 0) out.push_back(data_.bos);
  std::vector<std::pair<std::string_view, int32_t>> fragments;
  if (specials_.empty()) fragments.emplace_back(text, -1);
  else split_special(text, o.parse_special, o.literal, fragments);
  bool after_special = true;  // the text start counts as a boundary
  for (const auto& [frag, id] : fragments) {
    if (out.size() > limit) return out;
    if (id >= 0) {
      out.push_back(id);
      after_special = true;
      continue;
    }
    encode_text(frag, after_special, limit, out);
    after_special = false;
  }
  if (o.add_special && data_.add_eos && data_.eos >= 0) out.push_back(data_.eos);
  return out;
}

// One run of plain text between special tokens; BPE stops between pieces once |out| holds more
// than |limit| ids (an over-long prompt is rejected without tokenising all of it).
void Tokenizer::encode_text(std::string_view text, bool after_special, size_t limit,
                            std::vector<int32_t>& out) const {
  switch (algo_) {
    case Algorithm::kSpm:
      // Like llama.cpp and HF's legacy Llama normaliser, each text run that starts the input
      // or follows a special token gets the "▁" prefix.
      encode_spm(text, after_special, out);
      return;
    case Algorithm::kWpm:
      encode_wpm(text, out);
      return;
    case Algorithm::kBpe:
    case Algorithm::kBpeText: {
      std::string escaped;
      if (algo_ == Algorithm::kBpeText) {  // spaces are spelled "▁" before pre-tokenizing
        escaped.reserve(text.size() + 16);
        if (after_special && data_.add_space_prefix) escaped += kSpmSpace;
        for (char c : text) {
          if (c == ' ') escaped += kSpmSpace;
          else escaped += c;
        }
        text = escaped;
      }
      std::vector<std::string_view> pieces;
      pre_.split(text, pieces);
      for (std::string_view p : pieces) {
        if (out.size() > limit) return;
        if (algo_ == Algorithm::kBpe) encode_bpe(p, out);
        else encode_bpe_text(p, out);
      }
      return;
    }
  }
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < vocab_size() && type_of(id) == kTokenControl;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool first_text = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_control(id)) continue;
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (first_text && !is_control(id)) {
      first_text = false;
      if (strips_leading_space() && !p.empty() && p[0] == ' ') {
        out.append(p, 1);
        continue;
      }
    }
    out += p;
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return pieces_[static_cast<size_t>(id)];
}

bool Tokenizer::is_eog(int32_t id) const { return eog_.count(id) != 0; }

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  auto it = vocab_.find(std::string(piece));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// ---- StreamDecoder ----

namespace {

// Whether text[pos..] is the start of a UTF-8 sequence that more bytes could still complete.
bool incomplete_utf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  size_t need = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) need = 3;
  else if (b0 >= 0xF0 && b0 <= 0xF4) need = 4;
  else return false;
  const size_t have = text.size() - pos;
  if (have >= need) return false;
  for (size_t i = 1; i < have; ++i) {
    if ((static_cast<uint8_t>(text[pos + i]) & 0xC0) != 0x80) return false;
  }
  return true;
}

// Moves the complete characters at the front of |pending| to the result; malformed bytes
// become U+FFFD. With |final|, an incomplete tail is malformed too.
std::string take_complete(std::string& pending, bool final) {
  std::string out;
  size_t pos = 0;
  while (pos < pending.size()) {
    const size_t len = utf8_valid_len(pending, pos);
    if (len > 0) {
      out.append(pending, pos, len);
      pos += len;
    } else if (!final && incomplete_utf8(pending, pos)) {
      break;
    } else {
      utf8_append(out, kReplacementChar);
      ++pos;
    }
  }
  pending.erase(0, pos);
  return out;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (skip_special_ && tok_.is_control(id)) return {};
  std::string piece = tok_.token_to_piece(id);
  if (!started_ && !tok_.is_control(id)) {
    started_ = true;
    if (tok_.strips_leading_space() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  return take_complete(pending_, false);
}

std::string StreamDecoder::flush() { return take_complete(pending_, true); }

}  // namespace tessera
