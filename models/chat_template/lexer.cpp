// Lexer: splits a template into text and tag tokens, applying Jinja's whitespace control as
// transformers configures it (trim_blocks, lstrip_blocks, keep_trailing_newline off).
#include <cctype>

#include "models/chat_template/jinja.h"
#include "models/tokenizer/unicode.h"

namespace tessera::jinja {

std::string pos_str(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

namespace {

Status syntax_error(Pos p, const std::string& what) {
  return InvalidArgument("chat template: " + pos_str(p) + ": " + what);
}

// Jinja normalises newlines to "\n" and, without keep_trailing_newline, drops one at the end.
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}
  Result<std::vector<Token>> run();

 private:
  Pos pos_at(size_t i) {
    // Positions are requested in increasing order, so advance a cursor instead of rescanning.
    for (; cursor_ < i; ++cursor_) {
      if (src_[cursor_] == '\n') { ++cur_.line; cur_.col = 1; }
      else if ((static_cast<uint8_t>(src_[cursor_]) & 0xC0) != 0x80) ++cur_.col;
    }
    return cur_;
  }
  void emit_text(std::string text, size_t at);
  Status lex_tag(size_t& i, bool block);
  Status lex_string(size_t& i, std::string& out);

  std::string src_;
  std::vector<Token> out_;
  size_t cursor_ = 0;
  Pos cur_;
};

void Lexer::emit_text(std::string text, size_t at) {
  if (!text.empty()) out_.push_back({Tok::kText, std::move(text), pos_at(at)});
}

Result<std::vector<Token>> Lexer::run() {
  size_t i = 0;
  bool line_starting = true;  // the previous tag ended a line (lstrip_blocks needs this)
  while (i < src_.size()) {
    size_t start = src_.find('{', i);
    while (start != std::string::npos && start + 1 < src_.size() && src_[start + 1] != '{' &&
           src_[start + 1] != '%' && src_[start + 1] != '#')
      start = src_.find('{', start + 1);
    if (start == std::string::npos || start + 1 >= src_.size()) {
      emit_text(src_.substr(i), i);
      break;
    }
    const char kind = src_[start + 1];
    const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
    std::string text = src_.substr(i, start - i);
    if (sign == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: a block or comment tag alone on its line takes its indentation with it.
      const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      bool blank = line_start < text.size();
      for (size_t k = line_start; k < text.size(); ++k) blank = blank && is_space(text[k]);
      if (blank && (line_start > 0 || line_starting)) text.resize(line_start);
    }
    emit_text(std::move(text), i);
    i = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    bool strip_after = false, keep_newline = false;
    if (kind == '#') {
      const size_t end = src_.find("#}", i);
      if (end == std::string::npos) return syntax_error(pos_at(start), "unterminated comment");
      strip_after = end > i && src_[end - 1] == '-';
      keep_newline = end > i && src_[end - 1] == '+';
      i = end + 2;
    } else {
      const Pos p = pos_at(start);
      out_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", p});
      TS_RETURN_IF_ERROR(lex_tag(i, kind == '%'));
      strip_after = out_.back().text == "-";
      keep_newline = out_.back().text == "+";
    }
    const size_t after = i;
    if (strip_after) {
      while (i < src_.size() && is_space(src_[i])) ++i;
    } else if (kind != '{' && !keep_newline && i < src_.size() && src_[i] == '\n') {
      ++i;  // trim_blocks: the first newline after a block or comment tag goes
    }
    line_starting = i > after && src_[i - 1] == '\n';
  }
  out_.push_back({Tok::kEof, "", pos_at(src_.size())});
  return std::move(out_);
}

Status Lexer::lex_string(size_t& i, std::string& out) {
  const char quote = src_[i];
  const Pos p = pos_at(i);
  for (++i; i < src_.size(); ++i) {
    char c = src_[i];
    if (c == quote) {
      ++i;
      return OkStatus();
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= src_.size()) break;
    c = src_[i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\\': case '\'': case '"': out += c; break;
      case '\n': break;  // a backslash-newline continues the line
      case 'x': case 'u': case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (i + n >= src_.size()) return syntax_error(p, "truncated escape in string");
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          const char h = src_[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) return syntax_error(p, "bad escape in string");
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        utf8_append(out, cp);
        i += n;
        break;
      }
      default: out += '\\'; out += c;  // Python keeps unknown escapes as written
    }
  }
  return syntax_error(p, "unterminated string");
}

// Tokenises the inside of {{ }} or {% %} up to its closing delimiter (outside brackets), and
// records the closing whitespace sign ("-", "+" or "") in the end token's text.
Status Lexer::lex_tag(size_t& i, bool block) {
  static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                     "~", "|", ".", ",", ":", "(", ")", "[", "]", "{", "}",
                                     "=", "<", ">"};
  int depth = 0;
  const char* close = block ? "%}" : "}}";
  while (true) {
    while (i < src_.size() && is_space(src_[i])) ++i;
    if (i >= src_.size()) return syntax_error(pos_at(i), std::string("expected '") + close + "', found end of template");
    const Pos p = pos_at(i);
    if (depth == 0) {
      for (const char* sign : {"-", "+", ""}) {
        const std::string end = std::string(sign) + close;
        if (src_.compare(i, end.size(), end) == 0) {
          out_.push_back({block ? Tok::kBlockEnd : Tok::kVarEnd, sign, p});
          i += end.size();
          return OkStatus();
        }
      }
    }
    const char c = src_[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t k = i;
      while (k < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) ++k;
      out_.push_back({Tok::kName, src_.substr(i, k - i), p});
      i = k;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t k = i;
      bool is_float = false;
      auto digits = [&] { while (k < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[k])) || src_[k] == '_')) ++k; };
      digits();
      if (k + 1 < src_.size() && src_[k] == '.' && std::isdigit(static_cast<unsigned char>(src_[k + 1]))) {
        ++k;
        digits();
        is_float = true;
      }
      if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
        size_t e = k + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
          k = e;
          digits();
          is_float = true;
        }
      }
      std::string num;
      for (size_t q = i; q < k; ++q) if (src_[q] != '_') num += src_[q];
      out_.push_back({is_float ? Tok::kFloat : Tok::kInt, num, p});
      i = k;
    } else if (c == '\'' || c == '"') {
      std::string s;
      TS_RETURN_IF_ERROR(lex_string(i, s));
      out_.push_back({Tok::kString, std::move(s), p});
    } else {
      const char* op = nullptr;
      for (const char* o : kOps) {
        if (src_.compare(i, std::char_traits<char>::length(o), o) == 0) { op = o; break; }
      }
      if (!op) return syntax_error(p, std::string("unexpected character '") + c + "'");
      if (*op == '(' || *op == '[' || *op == '{') ++depth;
      if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
      out_.push_back({Tok::kOp, op, p});
      i += std::char_traits<char>::length(op);
    }
  }
}

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace tessera::jinja
