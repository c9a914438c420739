// Syntax tree of a parsed Jinja template: expressions (Expr) and statements (Stmt). The parser
// builds it once; the evaluator walks it for every render, so it is immutable after parsing.
// Every node keeps the byte offset of its source so runtime errors can name line and column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/ops.h"
#include "jinja/value.h"

namespace detllm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kLiteral,    // value
  kName,       // name
  kList,       // items
  kTuple,      // items
  kDict,       // items: key0, value0, key1, value1, ...
  kGetAttr,    // items[0].name
  kGetItem,    // items[0][items[1]]
  kSlice,      // items[0][items[1]:items[2]:items[3]]; a null bound was omitted
  kCall,       // items[0](items[1..], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,     // items[0] | name(items[1..], kwargs); items[0] null in {% filter %}/{% set %}
  kTest,       // items[0] is name(items[1..], kwargs)
  kNot,        // not items[0]
  kNeg,        // -items[0]
  kPos,        // +items[0]
  kBinary,     // items[0] binary_op items[1]
  kCompare,    // items[0] compare_ops[0] items[1] compare_ops[1] items[2] ...
  kAnd,        // items[0] and items[1]
  kOr,         // items[0] or items[1]
  kConcat,     // items[0] ~ items[1] ~ ...
  kCondition,  // items[0] if items[1] else items[2]; items[2] null: no else
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  uint32_t offset = 0;
  uint32_t depth = 1;  // height of this subtree (bounded by the parser)
  Value value;
  std::string name;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // *args in a call
  ExprPtr dyn_kwargs;  // **kwargs in a call
};

// Left side of {% set %} / {% for %} / {% with %}: a name, a tuple of targets to unpack, or a
// namespace attribute (`ns.attr`, {% set %} only).
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  uint32_t offset = 0;
  std::string name;           // the variable (for kNamespaceAttr: the namespace's variable)
  std::string attr;           // kNamespaceAttr
  std::vector<Target> items;  // kTuple
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // if conditions[0]: bodies[0] elif conditions[1]: bodies[1] ... else else_body
  kFor,          // for target in expr [if condition]: body else else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter chain in expr] body endset
  kMacro,        // macro text(params = defaults): body
  kFilterBlock,  // filter (chain in expr) body endfilter
  kWith,         // with targets = values: body
  kScope,        // body in a new scope: {% block %}, {% generation %}
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  uint32_t offset = 0;
  std::string text;  // kText: the text; kMacro: the macro's name
  ExprPtr expr;
  ExprPtr condition;
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> params;  // kMacro
  std::vector<ExprPtr> defaults;    // kMacro: defaults of the last defaults.size() params
  std::vector<Target> targets;      // kWith
  std::vector<ExprPtr> values;      // kWith
};

// A parsed template: the normalized source (for error positions) and its statements.
struct Program {
  std::string source;
  Body body;
};

}  // namespace detllm::jinja
