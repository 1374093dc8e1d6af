// Parser: tokens -> statement tree, with Jinja's operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < postfix/filters/tests).
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "models/chat_template/jinja.h"

namespace tessera::jinja {
namespace {

// An integer literal (digits only, from the lexer); past int64 is an error naming its position.
// std::stoll would throw out_of_range, which nothing here catches.
Result<int64_t> int_literal(const Token& t) {
  errno = 0;
  const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
  if (errno == ERANGE) return InvalidArgument("chat template: " + pos_str(t.pos) + ": integer " + t.text.substr(0, 40) + " out of range");
  return int64_t(v);
}

class Parser {
 public:
  explicit Parser(std::vector<Token> t) : t_(std::move(t)) {}
  Result<std::unique_ptr<Template>> run();

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool at_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool at_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  Status error(const std::string& what) const {
    return InvalidArgument("chat template: " + pos_str(cur().pos) + ": " + what);
  }
  std::string describe(const Token& t) const;
  Status expect_op(const char* op);
  Status expect_block_end();
  Result<std::string> expect_name();

  // Parses statements until a block tag named in |ends|; leaves that name as cur().
  Status parse_body(std::initializer_list<const char*> ends, Body& body);
  Result<std::unique_ptr<Stmt>> parse_tag();
  Status parse_if(Stmt& s);
  Status parse_for(Stmt& s);
  Status parse_set(Stmt& s);
  Status parse_macro(Stmt& s);

  Result<ExprPtr> parse_expr(bool allow_cond = true);
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_binary(int level);
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_postfix(ExprPtr e);
  Result<ExprPtr> parse_filter_expr(ExprPtr e);
  Status parse_args(std::vector<Arg>& args);  // after '(' up to and including ')'
  Result<ExprPtr> parse_subscript(ExprPtr obj);

  static ExprPtr make(Expr::Kind k, Pos p) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = p;
    return e;
  }

  // Bounds recursion so a hostile template gets an error instead of a stack overflow.
  struct DepthGuard {
    explicit DepthGuard(int& d) : d_(d) { ++d_; }
    ~DepthGuard() { --d_; }
    int& d_;
  };
  static constexpr int kMaxDepth = 200;
  static constexpr size_t kMaxTagTokens = 4096;  // see run()
  Status check_depth() const {
    return depth_ > kMaxDepth ? error("nesting deeper than " + std::to_string(kMaxDepth) + " levels")
                              : OkStatus();
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

std::string Parser::describe(const Token& t) const {
  switch (t.kind) {
    case Tok::kEof: return "end of template";
    case Tok::kText: return "template text";
    case Tok::kVarBegin: return "'{{'";
    case Tok::kVarEnd: return "'}}'";
    case Tok::kBlockBegin: return "'{%'";
    case Tok::kBlockEnd: return "'%}'";
    case Tok::kString: return "string literal";
    default: return "'" + t.text + "'";
  }
}

Status Parser::expect_op(const char* op) {
  if (!at_op(op)) return error(std::string("expected '") + op + "', found " + describe(cur()));
  next();
  return OkStatus();
}

Status Parser::expect_block_end() {
  if (cur().kind != Tok::kBlockEnd) return error("expected '%}', found " + describe(cur()));
  next();
  return OkStatus();
}

Result<std::string> Parser::expect_name() {
  if (cur().kind != Tok::kName) return error("expected a name, found " + describe(cur()));
  return next().text;
}

Result<std::unique_ptr<Template>> Parser::run() {
  // One tag's expression tree has at most as many nodes as the tag has tokens. Loops build
  // a+b+c+... chains without recursing (so kMaxDepth does not see them), and evaluating or
  // destroying the tree recurses once per level: bounding the tokens of a tag bounds both.
  size_t tag_start = 0;
  for (size_t i = 0; i < t_.size(); ++i) {
    const Tok k = t_[i].kind;
    if (k == Tok::kVarBegin || k == Tok::kBlockBegin) tag_start = i;
    if ((k == Tok::kVarEnd || k == Tok::kBlockEnd) && i - tag_start > kMaxTagTokens) {
      i_ = tag_start;
      return error("a tag of " + std::to_string(i - tag_start) + " tokens (at most " +
                   std::to_string(kMaxTagTokens) + ")");
    }
  }
  auto tmpl = std::make_unique<Template>();
  TS_RETURN_IF_ERROR(parse_body({}, tmpl->body));
  if (cur().kind != Tok::kEof) return error("unexpected '" + cur().text + "' tag");
  return tmpl;
}

Status Parser::parse_body(std::initializer_list<const char*> ends, Body& body) {
  DepthGuard guard(depth_);
  TS_RETURN_IF_ERROR(check_depth());
  while (cur().kind != Tok::kEof) {
    const Token& tok = cur();
    if (tok.kind == Tok::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->pos = tok.pos;
      s->text = next().text;
      body.push_back(std::move(s));
    } else if (tok.kind == Tok::kVarBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->pos = tok.pos;
      TS_ASSIGN_OR_RETURN(s->expr, parse_expr());
      if (cur().kind != Tok::kVarEnd) return error("expected '}}', found " + describe(cur()));
      next();
      body.push_back(std::move(s));
    } else if (tok.kind == Tok::kBlockBegin) {
      next();
      for (const char* e : ends) {
        if (at_name(e)) return OkStatus();
      }
      static const char* const kClosers[] = {"elif", "else", "endif", "endfor", "endset",
                                             "endmacro", "endgeneration"};
      for (const char* c : kClosers) {
        if (!at_name(c)) continue;
        std::string msg = std::string("unexpected '") + c + "'";
        for (const char* e : ends) msg += std::string(e == *ends.begin() ? ", expected '" : " or '") + e + "'";
        return error(msg);
      }
      TS_ASSIGN_OR_RETURN(auto s, parse_tag());
      body.push_back(std::move(s));
    } else {
      return error("unexpected " + describe(tok));
    }
  }
  if (ends.size() > 0) {
    std::string names;
    for (const char* e : ends) names += std::string(names.empty() ? "'" : " or '") + e + "'";
    return error("expected " + names + ", found end of template");
  }
  return OkStatus();
}

Result<std::unique_ptr<Stmt>> Parser::parse_tag() {
  auto s = std::make_unique<Stmt>();
  s->pos = cur().pos;
  TS_ASSIGN_OR_RETURN(const std::string tag, expect_name());
  if (tag == "if") {
    s->kind = Stmt::Kind::kIf;
    TS_RETURN_IF_ERROR(parse_if(*s));
  } else if (tag == "for") {
    s->kind = Stmt::Kind::kFor;
    TS_RETURN_IF_ERROR(parse_for(*s));
  } else if (tag == "set") {
    TS_RETURN_IF_ERROR(parse_set(*s));
  } else if (tag == "macro") {
    s->kind = Stmt::Kind::kMacro;
    TS_RETURN_IF_ERROR(parse_macro(*s));
  } else if (tag == "break" || tag == "continue") {
    s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    TS_RETURN_IF_ERROR(expect_block_end());
  } else if (tag == "generation") {
    // transformers' {% generation %} marks assistant text for masks; it renders its body.
    s->kind = Stmt::Kind::kBody;
    TS_RETURN_IF_ERROR(expect_block_end());
    s->bodies.emplace_back();
    TS_RETURN_IF_ERROR(parse_body({"endgeneration"}, s->bodies.back()));
    next();
    TS_RETURN_IF_ERROR(expect_block_end());
  } else {
    i_--;  // point the error at the tag name
    return error("unknown tag '" + tag + "'");
  }
  return s;
}

Status Parser::parse_if(Stmt& s) {
  while (true) {
    TS_ASSIGN_OR_RETURN(auto cond, parse_expr());
    TS_RETURN_IF_ERROR(expect_block_end());
    s.conds.push_back(std::move(cond));
    s.bodies.emplace_back();
    TS_RETURN_IF_ERROR(parse_body({"elif", "else", "endif"}, s.bodies.back()));
    const std::string end = next().text;
    if (end == "elif") continue;
    if (end == "else") {
      TS_RETURN_IF_ERROR(expect_block_end());
      s.bodies.emplace_back();
      TS_RETURN_IF_ERROR(parse_body({"endif"}, s.bodies.back()));
      next();
    }
    return expect_block_end();
  }
}

Status Parser::parse_for(Stmt& s) {
  do {
    TS_ASSIGN_OR_RETURN(auto name, expect_name());
    s.targets.push_back(std::move(name));
  } while (at_op(",") && (next(), true));
  if (!at_name("in")) return error("expected 'in', found " + describe(cur()));
  next();
  TS_ASSIGN_OR_RETURN(s.expr, parse_expr(/*allow_cond=*/false));
  if (at_name("if")) {
    next();
    TS_ASSIGN_OR_RETURN(auto filter, parse_expr(false));
    s.conds.push_back(std::move(filter));
  }
  if (at_name("recursive")) return error("recursive loops are not supported");
  TS_RETURN_IF_ERROR(expect_block_end());
  s.bodies.emplace_back();
  TS_RETURN_IF_ERROR(parse_body({"else", "endfor"}, s.bodies.back()));
  if (next().text == "else") {
    TS_RETURN_IF_ERROR(expect_block_end());
    s.bodies.emplace_back();
    TS_RETURN_IF_ERROR(parse_body({"endfor"}, s.bodies.back()));
    next();
  }
  return expect_block_end();
}

Status Parser::parse_set(Stmt& s) {
  TS_ASSIGN_OR_RETURN(auto name, expect_name());
  s.targets.push_back(std::move(name));
  if (at_op(".")) {
    next();
    TS_ASSIGN_OR_RETURN(s.attr, expect_name());
  } else {
    while (at_op(",")) {
      next();
      TS_ASSIGN_OR_RETURN(auto more, expect_name());
      s.targets.push_back(std::move(more));
    }
  }
  if (at_op("=")) {
    next();
    s.kind = Stmt::Kind::kSet;
    TS_ASSIGN_OR_RETURN(s.expr, parse_expr());
    return expect_block_end();
  }
  if (!s.attr.empty() || s.targets.size() != 1) return error("expected '=', found " + describe(cur()));
  s.kind = Stmt::Kind::kSetBlock;  // {% set x %}...{% endset %}
  TS_RETURN_IF_ERROR(expect_block_end());
  s.bodies.emplace_back();
  TS_RETURN_IF_ERROR(parse_body({"endset"}, s.bodies.back()));
  next();
  return expect_block_end();
}

Status Parser::parse_macro(Stmt& s) {
  TS_ASSIGN_OR_RETURN(s.text, expect_name());
  TS_RETURN_IF_ERROR(expect_op("("));
  while (!at_op(")")) {
    TS_ASSIGN_OR_RETURN(auto param, expect_name());
    s.targets.push_back(std::move(param));
    ExprPtr def;
    if (at_op("=")) {
      next();
      TS_ASSIGN_OR_RETURN(def, parse_expr());
    }
    s.defaults.push_back(std::move(def));
    if (!at_op(",")) break;
    next();
  }
  TS_RETURN_IF_ERROR(expect_op(")"));
  TS_RETURN_IF_ERROR(expect_block_end());
  s.bodies.emplace_back();
  TS_RETURN_IF_ERROR(parse_body({"endmacro"}, s.bodies.back()));
  next();
  return expect_block_end();
}

// ---- expressions ----

Result<ExprPtr> Parser::parse_expr(bool allow_cond) {
  DepthGuard guard(depth_);
  TS_RETURN_IF_ERROR(check_depth());
  TS_ASSIGN_OR_RETURN(auto e, parse_or());
  while (allow_cond && at_name("if")) {
    const Pos p = next().pos;
    auto c = make(Expr::Kind::kCond, p);
    TS_ASSIGN_OR_RETURN(auto cond, parse_or());
    c->kids.push_back(std::move(e));
    c->kids.push_back(std::move(cond));
    if (at_name("else")) {
      next();
      TS_ASSIGN_OR_RETURN(auto other, parse_or());
      c->kids.push_back(std::move(other));
    }
    e = std::move(c);
  }
  return e;
}

Result<ExprPtr> Parser::parse_or() {
  TS_ASSIGN_OR_RETURN(auto e, parse_and());
  while (at_name("or")) {
    auto o = make(Expr::Kind::kOr, next().pos);
    TS_ASSIGN_OR_RETURN(auto rhs, parse_and());
    o->kids.push_back(std::move(e));
    o->kids.push_back(std::move(rhs));
    e = std::move(o);
  }
  return e;
}

Result<ExprPtr> Parser::parse_and() {
  TS_ASSIGN_OR_RETURN(auto e, parse_not());
  while (at_name("and")) {
    auto o = make(Expr::Kind::kAnd, next().pos);
    TS_ASSIGN_OR_RETURN(auto rhs, parse_not());
    o->kids.push_back(std::move(e));
    o->kids.push_back(std::move(rhs));
    e = std::move(o);
  }
  return e;
}

Result<ExprPtr> Parser::parse_not() {
  DepthGuard guard(depth_);
  TS_RETURN_IF_ERROR(check_depth());
  if (at_name("not")) {
    auto n = make(Expr::Kind::kNot, next().pos);
    TS_ASSIGN_OR_RETURN(auto operand, parse_not());
    n->kids.push_back(std::move(operand));
    return n;
  }
  return parse_compare();
}

Result<ExprPtr> Parser::parse_compare() {
  TS_ASSIGN_OR_RETURN(auto e, parse_binary(0));
  while (true) {
    std::string op;
    const Pos p = cur().pos;
    if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      op = next().text;
    } else if (at_name("in")) {
      next();
      op = "in";
    } else if (at_name("not") && t_[i_ + 1].kind == Tok::kName && t_[i_ + 1].text == "in") {
      next();
      next();
      op = "not in";
    } else {
      return e;
    }
    auto b = make(Expr::Kind::kBinary, p);
    b->name = op;
    TS_ASSIGN_OR_RETURN(auto rhs, parse_binary(0));
    b->kids.push_back(std::move(e));
    b->kids.push_back(std::move(rhs));
    e = std::move(b);
  }
}

// Levels: 0 "+ -", 1 "~", 2 "* / // %", 3 "**"; level 4 is unary.
Result<ExprPtr> Parser::parse_binary(int level) {
  static const std::vector<std::vector<std::string>> kLevels = {
      {"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  if (level == 4) return parse_unary(true);
  TS_ASSIGN_OR_RETURN(auto e, parse_binary(level + 1));
  while (cur().kind == Tok::kOp) {
    const auto& ops = kLevels[static_cast<size_t>(level)];
    if (std::find(ops.begin(), ops.end(), cur().text) == ops.end()) break;
    auto b = make(Expr::Kind::kBinary, cur().pos);
    b->name = next().text;
    TS_ASSIGN_OR_RETURN(auto rhs, parse_binary(level + 1));
    b->kids.push_back(std::move(e));
    b->kids.push_back(std::move(rhs));
    e = std::move(b);
  }
  return e;
}

Result<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  TS_RETURN_IF_ERROR(check_depth());
  ExprPtr e;
  if (at_op("-") || at_op("+")) {
    auto u = make(Expr::Kind::kUnary, cur().pos);
    u->name = next().text;
    TS_ASSIGN_OR_RETURN(auto operand, parse_unary(false));
    u->kids.push_back(std::move(operand));
    e = std::move(u);
  } else {
    TS_ASSIGN_OR_RETURN(e, parse_primary());
  }
  TS_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
  if (with_filter) return parse_filter_expr(std::move(e));
  return e;
}

Result<ExprPtr> Parser::parse_primary() {
  const Token tok = cur();
  auto lit = [&](Value v) {
    auto e = make(Expr::Kind::kLiteral, tok.pos);
    e->literal = std::move(v);
    return e;
  };
  switch (tok.kind) {
    case Tok::kName: {
      next();
      if (tok.text == "true" || tok.text == "True") return lit(Value::boolean(true));
      if (tok.text == "false" || tok.text == "False") return lit(Value::boolean(false));
      if (tok.text == "none" || tok.text == "None") return lit(Value::none());
      auto e = make(Expr::Kind::kName, tok.pos);
      e->name = tok.text;
      return e;
    }
    case Tok::kString: {
      std::string s = next().text;
      while (cur().kind == Tok::kString) s += next().text;  // adjacent literals concatenate
      return lit(Value::string(std::move(s)));
    }
    case Tok::kInt: {
      next();
      TS_ASSIGN_OR_RETURN(int64_t v, int_literal(tok));
      return lit(Value::integer(v));
    }
    case Tok::kFloat:
      next();
      // strtod, not stod: a literal past double's range is inf (or 0), as in Python, where stod
      // would throw.
      return lit(Value::number(std::strtod(tok.text.c_str(), nullptr)));
    default: break;
  }
  if (at_op("(") || at_op("[")) {
    const bool paren = at_op("(");
    next();
    std::vector<ExprPtr> items;
    bool tuple = !paren;
    while (!at_op(paren ? ")" : "]")) {
      TS_ASSIGN_OR_RETURN(auto item, parse_expr());
      items.push_back(std::move(item));
      if (!at_op(",")) break;
      next();
      tuple = true;
    }
    TS_RETURN_IF_ERROR(expect_op(paren ? ")" : "]"));
    if (paren && items.size() == 1 && !tuple) return std::move(items[0]);
    auto e = make(paren ? Expr::Kind::kTuple : Expr::Kind::kList, tok.pos);
    e->kids = std::move(items);
    return e;
  }
  if (at_op("{")) {
    next();
    auto e = make(Expr::Kind::kDict, tok.pos);
    while (!at_op("}")) {
      TS_ASSIGN_OR_RETURN(auto key, parse_expr());
      TS_RETURN_IF_ERROR(expect_op(":"));
      TS_ASSIGN_OR_RETURN(auto value, parse_expr());
      e->kids.push_back(std::move(key));
      e->kids.push_back(std::move(value));
      if (!at_op(",")) break;
      next();
    }
    TS_RETURN_IF_ERROR(expect_op("}"));
    return e;
  }
  return error("unexpected " + describe(tok));
}

Result<ExprPtr> Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (at_op(".")) {
      const Pos p = next().pos;
      if (cur().kind == Tok::kInt) {  // x.0 is x[0] in Jinja
        auto item = make(Expr::Kind::kItem, p);
        auto idx = make(Expr::Kind::kLiteral, p);
        TS_ASSIGN_OR_RETURN(int64_t v, int_literal(next()));
        idx->literal = Value::integer(v);
        item->kids.push_back(std::move(e));
        item->kids.push_back(std::move(idx));
        e = std::move(item);
        continue;
      }
      auto a = make(Expr::Kind::kAttr, p);
      TS_ASSIGN_OR_RETURN(a->name, expect_name());
      a->kids.push_back(std::move(e));
      e = std::move(a);
    } else if (at_op("[")) {
      next();
      TS_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
    } else if (at_op("(")) {
      auto c = make(Expr::Kind::kCall, next().pos);
      c->kids.push_back(std::move(e));
      TS_RETURN_IF_ERROR(parse_args(c->args));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

Result<ExprPtr> Parser::parse_subscript(ExprPtr obj) {
  const Pos p = cur().pos;
  ExprPtr parts[3];
  int n = 0;
  bool slice = false;
  while (true) {
    if (!at_op(":") && !at_op("]")) {
      TS_ASSIGN_OR_RETURN(parts[n], parse_expr());
    }
    if (at_op(":") && n < 2) {
      next();
      slice = true;
      ++n;
      continue;
    }
    break;
  }
  TS_RETURN_IF_ERROR(expect_op("]"));
  auto e = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, p);
  e->kids.push_back(std::move(obj));
  if (!slice && !parts[0]) return error("empty subscript");
  for (int k = 0; k < (slice ? 3 : 1); ++k) e->kids.push_back(std::move(parts[k]));
  return e;
}

Status Parser::parse_args(std::vector<Arg>& args) {
  while (!at_op(")")) {
    Arg a;
    if (cur().kind == Tok::kName && t_[i_ + 1].kind == Tok::kOp && t_[i_ + 1].text == "=") {
      a.name = next().text;
      next();
    }
    TS_ASSIGN_OR_RETURN(a.value, parse_expr());
    args.push_back(std::move(a));
    if (!at_op(",")) break;
    next();
  }
  return expect_op(")");
}

Result<ExprPtr> Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (at_op("|")) {
      auto f = make(Expr::Kind::kFilter, next().pos);
      TS_ASSIGN_OR_RETURN(f->name, expect_name());
      if (at_op("(")) {
        next();
        TS_RETURN_IF_ERROR(parse_args(f->args));
      }
      f->kids.push_back(std::move(e));
      e = std::move(f);
    } else if (at_name("is")) {
      auto t = make(Expr::Kind::kTest, next().pos);
      if (at_name("not")) {
        next();
        t->negated = true;
      }
      TS_ASSIGN_OR_RETURN(t->name, expect_name());
      if (at_op("(")) {
        next();
        TS_RETURN_IF_ERROR(parse_args(t->args));
      } else if ((cur().kind == Tok::kString || cur().kind == Tok::kInt || cur().kind == Tok::kFloat ||
                  (cur().kind == Tok::kName && !at_name("else") && !at_name("or") &&
                   !at_name("and") && !at_name("if"))) ) {
        Arg a;  // "x is divisibleby 3": one argument without parentheses
        TS_ASSIGN_OR_RETURN(a.value, parse_primary());
        TS_ASSIGN_OR_RETURN(a.value, parse_postfix(std::move(a.value)));
        t->args.push_back(std::move(a));
      }
      t->kids.push_back(std::move(e));
      e = std::move(t);
    } else if (at_op("(")) {
      auto c = make(Expr::Kind::kCall, next().pos);
      c->kids.push_back(std::move(e));
      TS_RETURN_IF_ERROR(parse_args(c->args));
      e = std::move(c);
    } else {
      return e;
    }
  }
}

}  // namespace

Result<std::unique_ptr<Template>> parse_template(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).run();
}

}  // namespace tessera::jinja
