#include "models/tokenizer/regex.h"

#include "models/tokenizer/unicode.h"

namespace tessera {

using Node = Regex::Node;
using Kind = Regex::Kind;
using ClassItem = Regex::ClassItem;

// ---- parsing ----

class RegexParser {
 public:
  RegexParser(Regex& re, std::string_view pattern) : re_(re) {
    std::vector<size_t> offsets;
    utf8_split(pattern, p_, offsets);
  }

  Status parse() {
    TS_ASSIGN_OR_RETURN(re_.root_, alternation(false));
    if (i_ < p_.size()) return error("unbalanced ')'");
    return OkStatus();
  }

 private:
  Status error(const std::string& what) const {
    return InvalidArgument("regex '" + re_.pattern_ + "': " + what + " at code point " + std::to_string(i_));
  }
  Status unsupported(const std::string& what) const {
    return Unimplemented("regex '" + re_.pattern_ + "': " + what + " (at code point " + std::to_string(i_) +
                         ") is not supported");
  }
  bool more() const { return i_ < p_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0; }
  int add(Node n) {
    re_.nodes_.push_back(std::move(n));
    return static_cast<int>(re_.nodes_.size() - 1);
  }

  Result<int> alternation(bool icase) {
    Node alt{Kind::kAlt, {}, {}};
    for (;;) {
      TS_ASSIGN_OR_RETURN(int s, sequence(icase));
      alt.kids.push_back(s);
      if (more() && peek() == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (alt.kids.size() == 1) return alt.kids[0];
    return add(std::move(alt));
  }

  Result<int> sequence(bool icase) {
    Node seq{Kind::kSeq, {}, {}};
    while (more() && peek() != '|' && peek() != ')') {
      TS_ASSIGN_OR_RETURN(int a, atom(icase));
      TS_ASSIGN_OR_RETURN(int q, quantified(a));
      seq.kids.push_back(q);
    }
    if (seq.kids.size() == 1) return seq.kids[0];
    return add(std::move(seq));
  }

  Result<int> number() {
    if (!more() || peek() < '0' || peek() > '9') return error("expected a number in {}");
    int v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<int>(peek() - '0');
      if (v > 100000) return error("repeat count too large");
      ++i_;
    }
    return v;
  }

  Result<int> quantified(int atom) {
    if (!more()) return atom;
    int min = 0, max = -1;
    const uint32_t c = peek();
    if (c == '*') {
      ++i_;
    } else if (c == '+') {
      min = 1, ++i_;
    } else if (c == '?') {
      max = 1, ++i_;
    } else if (c == '{' && peek(1) >= '0' && peek(1) <= '9') {
      ++i_;
      TS_ASSIGN_OR_RETURN(min, number());
      max = min;
      if (more() && peek() == ',') {
        ++i_;
        max = -1;
        if (more() && peek() != '}') {
          TS_ASSIGN_OR_RETURN(max, number());
        }
      }
      if (!more() || peek() != '}') return error("unterminated {}");
      ++i_;
      if (max >= 0 && max < min) return error("{n,m} with m < n");
    } else {
      return atom;
    }
    Node rep{Kind::kRepeat, {atom}, {}};
    rep.min = min;
    rep.max = max;
    if (more() && peek() == '?') {
      rep.mode = Node::Mode::kLazy, ++i_;
    } else if (more() && peek() == '+') {
      rep.mode = Node::Mode::kPossessive, ++i_;
    }
    return add(std::move(rep));
  }

  Result<int> group(bool icase) {
    ++i_;  // '('
    Node look{Kind::kLook, {}, {}};
    bool is_look = false;
    if (peek() == '?') {
      const uint32_t c = peek(1);
      if (c == ':') {
        i_ += 2;
      } else if (c == '=' || c == '!') {
        is_look = true;
        look.negated = c == '!';
        i_ += 2;
      } else if (c == 'i' && peek(2) == ':') {
        icase = true;
        i_ += 3;
      } else {
        return unsupported(std::string("group '(?") + static_cast<char>(c < 128 ? c : '?') + "'");
      }
    }
    TS_ASSIGN_OR_RETURN(int inner, alternation(icase));
    if (!more() || peek() != ')') return error("missing ')'");
    ++i_;
    if (!is_look) return inner;
    look.kids.push_back(inner);
    return add(std::move(look));
  }

  // \p{Name} / \P{Name} after the 'p' or 'P'.
  Result<ClassItem> property(bool negated) {
    if (peek() != '{') return error("expected '{' after \\p");
    ++i_;
    std::string name;
    while (more() && peek() != '}') name += static_cast<char>(p_[i_++] & 0x7F);
    if (!more()) return error("unterminated \\p{");
    ++i_;
    static const char* const kNames[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                         "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                         "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};
    if (name.size() == 1 && std::string_view("LMNPSZC").find(name[0]) != std::string_view::npos)
      return ClassItem{ClassItem::kMajor, negated, static_cast<uint32_t>(name[0]), 0};
    for (uint32_t k = 0; k < sizeof(kNames) / sizeof(kNames[0]); ++k) {
      if (name == kNames[k]) return ClassItem{ClassItem::kCategory, negated, k, 0};
    }
    return unsupported("Unicode property \\p{" + name + "}");
  }

  Result<uint32_t> hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const uint32_t c = peek();
      const int d = c >= '0' && c <= '9' ? int(c - '0') : c >= 'a' && c <= 'f' ? int(c - 'a' + 10)
                  : c >= 'A' && c <= 'F' ? int(c - 'A' + 10) : -1;
      if (d < 0) return error("bad hex escape");
      v = v * 16 + uint32_t(d);
      ++i_;
    }
    return v;
  }

  // One escape after the backslash: a class item, or (|literal| set) one code point.
  Status escape(ClassItem* item, uint32_t* literal, bool* is_literal) {
    if (!more()) return error("trailing backslash");
    const uint32_t c = p_[i_++];
    *is_literal = false;
    switch (c) {
      case 'p': case 'P': {
        TS_ASSIGN_OR_RETURN(*item, property(c == 'P'));
        return OkStatus();
      }
      case 's': case 'S': *item = {ClassItem::kSpace, c == 'S', 0, 0}; return OkStatus();
      case 'd': case 'D': *item = {ClassItem::kDigit, c == 'D', 0, 0}; return OkStatus();
      case 'w': case 'W': *item = {ClassItem::kWord, c == 'W', 0, 0}; return OkStatus();
      case 'r': *literal = '\r'; break;
      case 'n': *literal = '\n'; break;
      case 't': *literal = '\t'; break;
      case 'f': *literal = '\f'; break;
      case 'v': *literal = '\v'; break;
      case '0': *literal = 0; break;
      case 'x': {
        TS_ASSIGN_OR_RETURN(*literal, hex(2));
        break;
      }
      case 'u': {
        TS_ASSIGN_OR_RETURN(*literal, hex(4));
        break;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9'))
          return unsupported(std::string("escape \\") + static_cast<char>(c));
        *literal = c;  // an escaped metacharacter
    }
    *is_literal = true;
    return OkStatus();
  }

  Result<int> char_class(bool icase) {
    ++i_;  // '['
    Node set{Kind::kSet, {}, {}};
    set.icase = icase;
    if (peek() == '^') set.negated = true, ++i_;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      uint32_t lo = p_[i_++];
      if (lo == '\\') {
        ClassItem item{};
        bool is_literal = false;
        TS_RETURN_IF_ERROR(escape(&item, &lo, &is_literal));
        if (!is_literal) {
          set.items.push_back(item);
          continue;
        }
      } else if (lo == '[') {
        return unsupported("nested class '['");
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
        ++i_;
        hi = p_[i_++];
        if (hi == '\\') {
          ClassItem item{};
          bool is_literal = false;
          TS_RETURN_IF_ERROR(escape(&item, &hi, &is_literal));
          if (!is_literal) return error("a class escape cannot end a range");
        }
        if (hi < lo) return error("range out of order");
      }
      set.items.push_back({ClassItem::kRange, false, lo, hi});
    }
    if (!more()) return error("missing ']'");
    ++i_;
    return add(std::move(set));
  }

  Result<int> atom(bool icase) {
    const uint32_t c = peek();
    if (c == '(') return group(icase);
    if (c == '[') return char_class(icase);
    if (c == '*' || c == '+' || c == '?' || c == '{') return error("nothing to repeat");
    ++i_;
    if (c == '^') return add(Node{Kind::kBegin, {}, {}});
    if (c == '$') return add(Node{Kind::kEnd, {}, {}});
    Node set{Kind::kSet, {}, {}};
    set.icase = icase;
    if (c == '.') {
      set.items.push_back({ClassItem::kAny, false, 0, 0});
      return add(std::move(set));
    }
    uint32_t lit = c;
    if (c == '\\') {
      if (peek() == 'b' || peek() == 'B') {
        Node wb{Kind::kWordBoundary, {}, {}};
        wb.negated = p_[i_++] == 'B';
        return add(std::move(wb));
      }
      ClassItem item{};
      bool is_literal = false;
      TS_RETURN_IF_ERROR(escape(&item, &lit, &is_literal));
      if (!is_literal) {
        set.items.push_back(item);
        return add(std::move(set));
      }
    }
    set.items.push_back({ClassItem::kRange, false, lit, lit});
    return add(std::move(set));
  }

  Regex& re_;
  std::vector<uint32_t> p_;
  size_t i_ = 0;
};

Result<Regex> Regex::compile(std::string_view pattern) {
  Regex re;
  re.pattern_ = std::string(pattern);
  RegexParser parser(re, pattern);
  TS_RETURN_IF_ERROR(parser.parse());
  return re;
}

// ---- matching ----

namespace {

// A non-owning reference to a callable bool(size_t): continuations without allocation.
class Cont {
 public:
  template <typename F>
  Cont(const F& f) : obj_(&f), fn_([](const void* o, size_t i) { return (*static_cast<const F*>(o))(i); }) {}  // NOLINT
  bool operator()(size_t i) const { return fn_(obj_, i); }

 private:
  const void* obj_;
  bool (*fn_)(const void*, size_t);
};

bool is_word_cp(uint32_t cp) {
  const char m = unicode_major_class(cp);
  return m == 'L' || m == 'M' || unicode_category(cp) == UnicodeCategory::kNd ||
         unicode_category(cp) == UnicodeCategory::kPc || cp == '_';
}

bool item_has(const ClassItem& it, uint32_t cp) {
  bool r = false;
  switch (it.type) {
    case ClassItem::kRange: r = cp >= it.lo && cp <= it.hi; break;
    case ClassItem::kCategory: r = static_cast<uint32_t>(unicode_category(cp)) == it.lo; break;
    case ClassItem::kMajor: r = static_cast<uint32_t>(unicode_major_class(cp)) == it.lo; break;
    case ClassItem::kSpace: r = is_whitespace(cp); break;
    case ClassItem::kDigit: r = cp < 0x80 ? (cp >= '0' && cp <= '9') : unicode_category(cp) == UnicodeCategory::kNd; break;
    case ClassItem::kWord: r = is_word_cp(cp); break;
    case ClassItem::kAny: r = cp != '\n'; break;
  }
  return r != it.negated;
}

bool set_has(const Node& n, uint32_t cp) {
  bool r = false;
  for (const ClassItem& it : n.items) {
    if (item_has(it, cp) ||
        (n.icase && cp < 0x80 && ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') && item_has(it, cp ^ 0x20))) {
      r = true;
      break;
    }
  }
  return r != n.negated;
}

}  // namespace

// Each repetition of a group costs about ten stack frames, 1-2 KB in a release build and ~5 KB
// under ASan: 4096 needed more than 4 MB (a tokenizer called on a thread with a smaller stack
// crashed on one long word) and 20 MB under ASan. 256 stays under 0.5 MB (1.5 MB under ASan).
constexpr int kMaxGroupRepeats = 256;

class RegexMatcher {
 public:
  RegexMatcher(const Regex& re, const uint32_t* cps, size_t begin, size_t end)
      : nodes_(re.nodes_), cps_(cps), begin_(begin), end_(end) {}

  bool match(int id, size_t i, Cont k) const {
    const Node& n = nodes_[static_cast<size_t>(id)];
    switch (n.kind) {
      case Kind::kSet: return i < end_ && set_has(n, cps_[i]) && k(i + 1);
      case Kind::kSeq: return seq(n, 0, i, k);
      case Kind::kAlt:
        for (int kid : n.kids) {
          if (match(kid, i, k)) return true;
        }
        return false;
      case Kind::kRepeat: return single(n.kids[0]) ? repeat_single(n, i, k) : repeat(n, 0, i, k);
      case Kind::kLook: {
        const bool found = match(n.kids[0], i, [](size_t) { return true; });
        return found != n.negated && k(i);
      }
      case Kind::kBegin: return i == begin_ && k(i);
      case Kind::kEnd: return i == end_ && k(i);
      case Kind::kWordBoundary: {
        const bool before = i > begin_ && is_word_cp(cps_[i - 1]);
        const bool after = i < end_ && is_word_cp(cps_[i]);
        return (before != after) != n.negated && k(i);
      }
    }
    return false;
  }

 private:
  bool seq(const Node& n, size_t part, size_t i, Cont k) const {
    if (part == n.kids.size()) return k(i);
    return match(n.kids[part], i, [&](size_t j) { return seq(n, part + 1, j, k); });
  }

  // Whether node |id| always consumes exactly one code point (a set, or lookarounds around one
  // set): such repeats are matched by counting instead of recursing per repetition.
  bool single(int id) const {
    const Node& n = nodes_[static_cast<size_t>(id)];
    if (n.kind == Kind::kSet) return true;
    if (n.kind == Kind::kAlt) {
      for (int kid : n.kids) {
        if (!single(kid)) return false;
      }
      return true;
    }
    if (n.kind != Kind::kSeq) return false;
    int width = 0;
    for (int kid : n.kids) {
      const Kind k = nodes_[static_cast<size_t>(kid)].kind;
      if (k == Kind::kLook) continue;
      if (!single(kid)) return false;
      ++width;
    }
    return width == 1;
  }

  bool one(int id, size_t i) const {
    return match(id, i, [i](size_t j) { return j == i + 1; });
  }

  bool repeat_single(const Node& n, size_t i, Cont k) const {
    const size_t max = n.max < 0 ? end_ - i : static_cast<size_t>(n.max);
    const auto min = static_cast<size_t>(n.min);
    if (n.mode == Node::Mode::kLazy) {
      for (size_t c = 0;; ++c) {
        if (c >= min && k(i + c)) return true;
        if (c >= max || !one(n.kids[0], i + c)) return false;
      }
    }
    size_t c = 0;
    while (c < max && one(n.kids[0], i + c)) ++c;
    if (c < min) return false;
    if (n.mode == Node::Mode::kPossessive) return k(i + c);
    for (size_t j = c + 1; j-- > min;) {
      if (k(i + j)) return true;
    }
    return false;
  }

  bool repeat(const Node& n, int count, size_t i, Cont k) const {
    if (n.mode == Node::Mode::kPossessive) {
      // Atomic: the greedy repetition's end, then no backtracking into it.
      size_t end = i;
      Node greedy = n;
      greedy.mode = Node::Mode::kGreedy;
      if (!repeat(greedy, count, i, [&end](size_t j) { end = j; return true; })) return false;
      return k(end);
    }
    // NOTE: each repetition of a group is a recursion level; the cap keeps a pathological
    // input (thousands of repetitions) from exhausting the stack. A longer run is
    // matched as the first kMaxGroupRepeats repetitions and the rest as a new match.
    const bool can_more = (n.max < 0 || count < n.max) && count < kMaxGroupRepeats;
    auto next = [&](size_t j) { return j != i && repeat(n, count + 1, j, k); };
    if (n.mode == Node::Mode::kLazy) {
      if (count >= n.min && k(i)) return true;
      return can_more && match(n.kids[0], i, next);
    }
    if (can_more && match(n.kids[0], i, next)) return true;
    return count >= n.min && k(i);
  }

  const std::vector<Node>& nodes_;
  const uint32_t* cps_;
  size_t begin_, end_;
};

size_t Regex::match_at(const uint32_t* cps, size_t begin, size_t end, size_t at) const {
  RegexMatcher m(*this, cps, begin, end);
  size_t len = 0;
  m.match(root_, at, [&](size_t j) {
    if (j <= at) return false;  // only non-empty matches split text
    len = j - at;
    return true;
  });
  return len;
}

void regex_split(const Regex& re, const std::vector<uint32_t>& cps, std::vector<size_t>& lengths) {
  std::vector<size_t> out;
  out.reserve(lengths.size() * 2);
  size_t start = 0;
  for (size_t len : lengths) {
    const size_t end = start + len;
    size_t gap = start;
    for (size_t pos = start; pos < end;) {
      const size_t m = re.match_at(cps.data(), start, end, pos);
      if (m == 0) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back(pos - gap);
      out.push_back(m);
      pos += m;
      gap = pos;
    }
    if (gap < end) out.push_back(end - gap);
    start = end;
  }
  lengths = std::move(out);
}

}  // namespace tessera
