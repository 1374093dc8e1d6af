// Internals of the chat-template engine: values, tokens and the syntax tree shared by
// lexer.cpp, parser.cpp, value.cpp, builtins.cpp and eval.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera::jinja {

// ---- values (Python semantics, as Jinja inherits them) ----
struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, string keys

struct Value {
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict };
  Type type = Type::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> list;  // shared: Jinja values alias like Python objects
  std::shared_ptr<Dict> dict;
  bool is_namespace = false;   // a namespace() whose attributes `set ns.x = ...` may change

  static Value none() { Value v; v.type = Type::kNone; return v; }
  static Value boolean(bool x) { Value v; v.type = Type::kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.type = Type::kInt; v.i = x; return v; }
  static Value number(double x) { Value v; v.type = Type::kFloat; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.type = Type::kString; v.s = std::move(x); return v; }
  static Value make_list(List items = {}) {
    Value v; v.type = Type::kList; v.list = std::make_shared<List>(std::move(items)); return v;
  }
  static Value make_dict(Dict items = {}) {
    Value v; v.type = Type::kDict; v.dict = std::make_shared<Dict>(std::move(items)); return v;
  }

  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_number() const { return type == Type::kInt || type == Type::kFloat || type == Type::kBool; }
  double as_double() const { return type == Type::kFloat ? f : static_cast<double>(type == Type::kBool ? b : i); }
  const Value* find(std::string_view key) const;  // dict lookup, nullptr if absent
  void set(const std::string& key, Value v);      // dict insert or replace
};

// Bounds on one value: a hostile template (a model file's) gets an error instead of exhausting
// memory. The output has the same byte bound (eval.cpp); builtins that build strings in a loop
// check as they go, since one call could otherwise allocate far past it.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;
Status value_too_large(const std::string& what);  // ResourceExhausted naming the bound

bool truthy(const Value& v);
std::string to_str(const Value& v);   // Python str(): what {{ v }} prints
std::string repr(const Value& v);     // Python repr(): how lists and dicts print items
bool equal(const Value& a, const Value& b);
const char* type_name(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: compact Python separators).
Result<std::string> to_json(const Value& v, int indent);
size_t utf8_length(std::string_view s);  // code points, as Python's len()
bool py_isspace(uint32_t cp);

// ---- tokens ----
struct Pos {
  int line = 1, col = 1;
};
std::string pos_str(Pos p);  // "3:14"

enum class Tok {
  kText,        // template text between tags (whitespace control already applied)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,          // punctuation: + - * / // % ** ~ | . , : ( ) [ ] { } = == != < <= > >=
  kEof,
};

struct Token {
  Tok kind;
  std::string text;  // name, operator, decoded string literal, number text, raw text
  Pos pos;
};

Result<std::vector<Token>> lex(std::string_view source);

// ---- syntax tree ----
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty for positional
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kUnary, kBinary,
    kAnd, kOr, kNot, kList, kTuple, kDict, kCond,
  };
  Kind kind;
  Pos pos;
  Value literal;               // kLiteral
  std::string name;            // kName, kAttr, kFilter, kTest; operator for kUnary/kBinary
  bool negated = false;        // kTest: "is not"
  std::vector<ExprPtr> kids;   // operands; kSlice: obj, start, stop, step (null = absent)
  std::vector<Arg> args;       // kCall, kFilter, kTest arguments
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kBody, kMacro };
  Kind kind;
  Pos pos;
  std::string text;                 // kText; kMacro: name
  ExprPtr expr;                     // kOutput; kFor: iterable; kSet: value
  std::vector<ExprPtr> conds;       // kIf: one per branch; kFor: optional filter at [0]
  std::vector<Body> bodies;         // kIf: one per branch (+ else); kFor: body (+ else)
  std::vector<std::string> targets; // kFor / kSet / kSetBlock names; kMacro: parameters
  std::string attr;                 // kSet: "ns.attr" assigns attribute |attr| of targets[0]
  std::vector<ExprPtr> defaults;    // kMacro: default per parameter (null = none)
};

struct Template {
  Body body;
};

Result<std::unique_ptr<Template>> parse_template(std::vector<Token> tokens);

// ---- built-in filters, methods and tests (builtins.cpp) ----
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Argument |index| by position, else keyword |name|, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

// Errors carry no position; the evaluator prefixes it.
Result<Value> apply_filter(const std::string& name, const Value& in, const CallArgs& args);
Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args);
Result<bool> apply_test(const std::string& name, const Value& v, const CallArgs& args);
// namespace(), range(), dict(), strftime_now(); NotFound if |name| is none of them.
Result<Value> call_global(const std::string& name, const CallArgs& args);
// l <op> r for the binary operators (+ - * / // % ** ~ == != < <= > >= in, "not in").
Result<Value> binary_op(const std::string& op, const Value& l, const Value& r);
// Items a for loop or a list filter walks: a list's items, a dict's keys, a string's characters.
Result<List> iterate(const Value& v);

}  // namespace tessera::jinja
