// Renders a parsed template (see evaluator.h). Scoping follows jinja2: {% if %} shares its
// scope, each loop iteration / macro call / with block gets a child scope, so {% set %} inside
// a loop is forgotten at the next iteration (templates use namespace() to carry state out).
#include "jinja/evaluator.h"

#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/lexer.h"

namespace detllm::jinja {
namespace {

// Calls fn on every expression of a body (statements, bodies and subexpressions).
template <typename Fn>
void walk_expr(const Expr* e, Fn& fn) {
  if (!e) return;
  fn(*e);
  for (const auto& item : e->items) walk_expr(item.get(), fn);
  for (const auto& kw : e->kwargs) walk_expr(kw.second.get(), fn);
  walk_expr(e->dyn_args.get(), fn);
  walk_expr(e->dyn_kwargs.get(), fn);
}

template <typename Fn>
void walk_body(const Body& body, Fn& fn) {
  for (const auto& s : body) {
    walk_expr(s->expr.get(), fn);
    walk_expr(s->condition.get(), fn);
    for (const auto& c : s->conditions) walk_expr(c.get(), fn);
    for (const auto& d : s->defaults) walk_expr(d.get(), fn);
    for (const auto& v : s->values) walk_expr(v.get(), fn);
    for (const auto& b : s->bodies) walk_body(b, fn);
    walk_body(s->body, fn);
    walk_body(s->else_body, fn);
  }
}

bool body_uses_name(const Body& body, std::string_view name) {
  bool found = false;
  auto fn = [&](const Expr& e) { found |= e.kind == ExprKind::kName && e.name == name; };
  walk_body(body, fn);
  return found;
}

// jinja2's object_type_repr, used in "has no attribute" messages.
std::string object_type(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type(obj), name));
}

// Restores a finished loop's state so a `loop` kept past the loop cannot form a cycle.
struct LoopFinisher {
  LoopState& state;
  ~LoopFinisher() {
    state.finished = true;
    state.changed_value = Value();
  }
};

}  // namespace

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (const auto& [key, value] : s->vars_) {
      if (key == name) return &value;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [key, v] : vars_) {
    if (key == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(name, std::move(value));
}

class Evaluator::DepthGuard {
 public:
  explicit DepthGuard(Evaluator& ev) : ev_(ev) {
    if (++ev_.depth_ > ev_.limits_.max_depth) {
      --ev_.depth_;
      fail("template evaluation nested deeper than {} levels (runaway macro recursion?)",
           ev_.limits_.max_depth);
    }
  }
  ~DepthGuard() { --ev_.depth_; }

 private:
  Evaluator& ev_;
};

Evaluator::Evaluator(const Program& program, const RenderLimits& limits)
    : program_(program), limits_(limits) {}

Evaluator::~Evaluator() {
  // Break reference cycles through namespaces (`{% set ns.self = ns %}`).
  for (const auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->attrs = Dict();
  }
}

void Evaluator::track(const std::shared_ptr<Namespace>& ns) {
  if (namespaces_.size() >= namespaces_prune_at_) {
    std::erase_if(namespaces_, [](const auto& w) { return w.expired(); });
    namespaces_prune_at_ = std::max<size_t>(1024, namespaces_.size() * 2);
  }
  namespaces_.push_back(ns);
}

std::string Evaluator::render(const Dict& context) {
  auto globals = std::make_shared<Scope>(nullptr);
  const Dict builtins = make_globals();
  for (const auto& [key, value] : builtins.items()) globals->set(key.as_string(), value);
  root_ = std::make_shared<Scope>(globals);
  for (const auto& [key, value] : context.items()) {
    if (key.is_string()) root_->set(key.as_string(), value);
  }
  std::string out;
  exec(program_.body, root_, out);
  return out;
}

void Evaluator::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    fail(
        "template ran more than {} evaluation steps without finishing (endless or huge "
        "loop?); rendering stopped",
        limits_.max_steps);
  }
}

void Evaluator::append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    fail("rendered text longer than the limit of {} bytes", limits_.max_output_bytes);
  }
  out += text;
}

void Evaluator::rethrow_at(const Failure& f, uint32_t offset) const {
  const LineCol lc = locate(program_.source, offset);
  throw Error(
      fmt::format("chat template error at line {}, column {}: {}", lc.line, lc.column, f.what()));
}

// ---- statements ------------------------------------------------------------------------

Evaluator::Flow Evaluator::exec(const Body& body, const std::shared_ptr<Scope>& scope,
                                std::string& out) {
  for (const auto& s : body) {
    const Flow flow = exec_stmt(*s, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                     std::string& out) {
  try {
    DepthGuard guard(*this);
    charge(1);
    switch (s.kind) {
      case StmtKind::kText:
        append(out, s.text);
        return Flow::kNormal;
      case StmtKind::kOutput: {
        const Value v = eval(*s.expr, scope);
        if (v.is_string()) {
          append(out, v.as_string());
        } else {
          append(out, to_str(v, limits_.max_output_bytes - out.size()));
        }
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          if (truthy(eval(*s.conditions[i], scope))) return exec(s.bodies[i], scope, out);
        }
        return exec(s.else_body, scope, out);
      case StmtKind::kFor:
        return exec_for(s, scope, out);
      case StmtKind::kSet:
        assign(s.target, eval(*s.expr, scope), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        const Value body = Value::string(render_block(s.body, scope));
        assign(s.target, s.expr ? eval_filter_chain(*s.expr, scope, &body) : body, scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        define_macro(s, scope);
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        const Value body = Value::string(render_block(s.body, scope));
        const Value v = eval_filter_chain(*s.expr, scope, &body);
        append(out, to_str(v, limits_.max_output_bytes - out.size()));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        std::vector<Value> values;
        for (const auto& v : s.values) values.push_back(eval(*v, scope));
        auto child = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < values.size(); ++i) assign(s.targets[i], values[i], child);
        return exec(s.body, child, out);
      }
      case StmtKind::kScope:
        return exec(s.body, std::make_shared<Scope>(scope), out);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  } catch (const Failure& f) {
    rethrow_at(f, s.offset);
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                    std::string& out) {
  List items = iterate(eval(*s.expr, scope));
  charge(items.size());
  if (s.condition) {
    List kept;
    for (auto& item : items) {
      auto filter_scope = std::make_shared<Scope>(scope);
      assign(s.target, item, filter_scope);
      if (truthy(eval(*s.condition, filter_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto state = std::make_shared<LoopState>();
  state->items = std::make_shared<const List>(std::move(items));
  LoopFinisher finisher{*state};
  if (state->items->empty()) return exec(s.else_body, std::make_shared<Scope>(scope), out);
  const Value loop = Value::loop(state);
  for (size_t i = 0; i < state->items->size(); ++i) {
    charge(1);
    state->index0 = static_cast<int64_t>(i);
    auto iteration = std::make_shared<Scope>(scope);
    iteration->set("loop", loop);
    assign(s.target, (*state->items)[i], iteration);
    if (exec(s.body, iteration, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

std::string Evaluator::render_block(const Body& body, const std::shared_ptr<Scope>& parent) {
  std::string buf;
  exec(body, std::make_shared<Scope>(parent), buf);
  return buf;
}

void Evaluator::define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> defining = scope;  // weak: the scope holds the macro
  const bool takes_varargs = body_uses_name(s.body, "varargs");
  const bool takes_kwargs = body_uses_name(s.body, "kwargs");
  auto call_macro = [def, defining, takes_varargs, takes_kwargs](Evaluator& ev,
                                                                 CallArgs& args) -> Value {
    DepthGuard guard(ev);
    ev.charge(1);
    std::shared_ptr<Scope> parent = defining.lock();
    if (!parent) parent = ev.root_;
    auto local = std::make_shared<Scope>(parent);
    const size_t n = def->params.size();
    const size_t first_default = n - def->defaults.size();
    std::vector<bool> bound(n, false);
    List varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < n) {
        local->set(def->params[i], args.positional[i]);
        bound[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Dict extra;
    for (auto& [key, value] : args.keyword) {
      const auto it = std::find(def->params.begin(), def->params.end(), key);
      if (it == def->params.end()) {
        if (!takes_kwargs) fail("macro '{}' takes no keyword argument '{}'", def->text, key);
        extra.set(Value::string(key), value);
        continue;
      }
      const auto i = static_cast<size_t>(it - def->params.begin());
      if (bound[i]) fail("macro '{}' got multiple values for argument '{}'", def->text, key);
      local->set(key, value);
      bound[i] = true;
    }
    if (!varargs.empty() && !takes_varargs) {
      fail("macro '{}' takes not more than {} argument(s)", def->text, n);
    }
    for (size_t i = 0; i < n; ++i) {
      if (bound[i]) continue;
      local->set(def->params[i],
                 i >= first_default
                     ? ev.eval(*def->defaults[i - first_default], local)
                     : Value::undefined("parameter '" + def->params[i] + "' was not provided"));
    }
    local->set("varargs", Value::list(std::move(varargs)));
    local->set("kwargs", Value::dict(std::move(extra)));
    std::string buf;
    ev.exec(def->body, local, buf);
    return Value::string(std::move(buf));
  };
  scope->set(s.text, Value::function("macro '" + s.text + "'", std::move(call_macro)));
}

void Evaluator::assign(const Target& t, Value value, const std::shared_ptr<Scope>& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope->set(t.name, std::move(value));
      return;
    case Target::Kind::kTuple: {
      if (!value.is_sequence() && !value.is_string() && !value.is_dict()) {
        fail("cannot unpack non-iterable {} object", type_name(value));
      }
      const List parts = iterate(value);
      if (parts.size() < t.items.size()) {
        fail("not enough values to unpack (expected {}, got {})", t.items.size(), parts.size());
      }
      if (parts.size() > t.items.size()) {
        fail("too many values to unpack (expected {})", t.items.size());
      }
      for (size_t i = 0; i < parts.size(); ++i) assign(t.items[i], parts[i], scope);
      return;
    }
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope->find(t.name);
      if (!ns || !ns->is_namespace()) {
        fail(
            "cannot assign attribute on non-namespace object '{}'; create it with "
            "{{% set {} = namespace() %}}",
            t.name, t.name);
      }
      if (!t.attr.empty() && t.attr[0] == '_') {
        fail(
            "chat templates cannot store underscore-prefixed attributes on a namespace, but "
            "got '{}'; rename the attribute",
            t.attr);
      }
      ns->as_namespace().set(t.attr, std::move(value));
      return;
    }
  }
}

// ---- expressions -----------------------------------------------------------------------

Value Evaluator::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    DepthGuard guard(*this);
    charge(1);
    return eval_node(e, scope);
  } catch (const Failure& f) {
    rethrow_at(f, e.offset);
  }
}

CallArgs Evaluator::eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (size_t i = first; i < e.items.size(); ++i)
    args.positional.push_back(eval(*e.items[i], scope));
  for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value, scope));
  if (e.dyn_args) {
    for (Value& v : iterate(eval(*e.dyn_args, scope))) args.positional.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    const Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) fail("argument after ** must be a mapping, not {}", type_name(d));
    for (const auto& [key, value] : d.as_dict().items()) {
      if (!key.is_string()) fail("keywords must be strings");
      args.keyword.emplace_back(key.as_string(), value);
    }
  }
  return args;
}

Value Evaluator::eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope,
                                   const Value* block) {
  try {
    Value input;
    const Expr* inner = e.items[0].get();
    if (!inner) {
      if (!block) fail("filter has no input");
      input = *block;
    } else if (block && inner->kind == ExprKind::kFilter) {
      input = eval_filter_chain(*inner, scope, block);
    } else {
      input = eval(*inner, scope);
    }
    CallArgs args = eval_args(e, 1, scope);
    return apply_filter(e.name, input, args);
  } catch (const Failure& f) {
    rethrow_at(f, e.offset);
  }
}

Value Evaluator::eval_node(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const auto sub = [&](size_t i) { return eval(*e.items[i], scope); };
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      if (const Value* v = scope->find(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      items.reserve(e.items.size());
      for (size_t i = 0; i < e.items.size(); ++i) items.push_back(sub(i));
      return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                       : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value key = sub(i);
        if (key.is_list() || key.is_dict() || key.is_undefined()) {
          fail("unhashable type: '{}'", type_name(key));
        }
        d.set(std::move(key), sub(i + 1));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr:
      return get_attr(sub(0), e.name);
    case ExprKind::kGetItem:
      return get_item(sub(0), sub(1));
    case ExprKind::kSlice: {
      const Value obj = sub(0);
      Value bounds[3];
      for (size_t i = 0; i < 3; ++i) bounds[i] = e.items[i + 1] ? sub(i + 1) : Value::none();
      return slice(obj, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      const Value callee = sub(0);
      CallArgs args = eval_args(e, 1, scope);
      return call(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter_chain(e, scope, nullptr);
    case ExprKind::kTest: {
      const Value subject = sub(0);
      CallArgs args = eval_args(e, 1, scope);
      return Value::boolean(apply_test(e.name, subject, args));
    }
    case ExprKind::kNot:
      return Value::boolean(!truthy(sub(0)));
    case ExprKind::kNeg:
      return negate(sub(0));
    case ExprKind::kPos:
      return unary_plus(sub(0));
    case ExprKind::kBinary: {
      const Value a = sub(0);
      const Value b = sub(1);
      Value result = binary(e.binary_op, a, b, limits_.max_output_bytes);
      // Building a list or string costs its size.
      charge(result.weight() + (result.is_string() ? result.as_string().size() / 64 : 0));
      return result;
    }
    case ExprKind::kCompare: {
      Value left = sub(0);
      for (size_t i = 0; i < e.compare_ops.size(); ++i) {
        Value right = sub(i + 1);
        charge(std::min(left.weight(), right.weight()));
        if (!compare(e.compare_ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kAnd: {
      Value a = sub(0);
      return truthy(a) ? sub(1) : a;
    }
    case ExprKind::kOr: {
      Value a = sub(0);
      return truthy(a) ? a : sub(1);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (size_t i = 0; i < e.items.size(); ++i) {
        const Value v = sub(i);
        if (v.is_string()) {
          if (s.size() + v.as_string().size() > limits_.max_output_bytes) {
            fail("text too long: ~ would pass the output limit of {} bytes",
                 limits_.max_output_bytes);
          }
          s += v.as_string();
        } else {
          s += to_str(v, limits_.max_output_bytes - s.size());
        }
      }
      charge(s.size() / 64);
      return Value::string(std::move(s));
    }
    case ExprKind::kCondition:
      if (truthy(sub(1))) return sub(0);
      if (e.items[2]) return sub(2);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
  }
  return Value();
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    const Function& fn = callee.as_function();
    return fn.call(*this, args);
  }
  if (callee.is_undefined()) throw Failure(callee.undefined_message());
  fail("'{}' object is not callable", type_name(callee));
}

Value Evaluator::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) {
    if (filter_exists(name)) {
      fail("the '{}' filter is not supported by detllm's chat template engine", name);
    }
    fail("no filter named '{}'", name);
  }
  return fn(*this, input, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) fail("no test named '{}'", name);
  return fn(*this, subject, args);
}

namespace {

Value loop_attribute(const Value& loop_value, const std::string& name) {
  const LoopState& loop = loop_value.as_loop();
  const auto n = static_cast<int64_t>(loop.items->size());
  const int64_t i = loop.index0;
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(loop.depth0 + 1);
  if (name == "depth0") return Value::integer(loop.depth0);
  if (name == "previtem") {
    if (i > 0) return (*loop.items)[static_cast<size_t>(i - 1)];
    return Value::undefined("there is no previous item");
  }
  if (name == "nextitem") {
    if (i + 1 < n) return (*loop.items)[static_cast<size_t>(i + 1)];
    return Value::undefined("there is no next item");
  }
  if (name == "cycle") {
    return Value::function("loop.cycle", [loop_value](Evaluator&, CallArgs& args) -> Value {
      if (args.positional.empty()) fail("loop.cycle: no items for cycling given");
      const LoopState& l = loop_value.as_loop();
      return args.positional[static_cast<size_t>(l.index0) % args.positional.size()];
    });
  }
  if (name == "changed") {
    return Value::function("loop.changed", [loop_value](Evaluator&, CallArgs& args) -> Value {
      LoopState& l = loop_value.as_loop();
      const Value now = Value::list(args.positional);
      if (l.has_changed_value && equals(l.changed_value, now)) return Value::boolean(false);
      if (!l.finished) {
        l.changed_value = now;
        l.has_changed_value = true;
      }
      return Value::boolean(true);
    });
  }
  return missing_attribute(loop_value, name);
}

}  // namespace

Value Evaluator::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      throw Failure(obj.undefined_message());
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      return missing_attribute(obj, name);
    case Value::Kind::kLoop:
      return loop_attribute(obj, name);
    case Value::Kind::kDict:
      if (auto m = find_method(obj, name)) return *m;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attribute(obj, name);
    default:
      if (auto m = find_method(obj, name)) return *m;
      return missing_attribute(obj, name);
  }
}

Value Evaluator::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw Failure(obj.undefined_message());
  if (auto v = item(obj, key)) return *v;
  if (key.is_string()) {
    const Value attr = get_attr(obj, key.as_string());
    if (!attr.is_undefined()) return attr;
    return missing_attribute(obj, key.as_string());
  }
  return Value::undefined(object_type(obj) + " has no element " + repr(key, 256));
}

namespace {

// jinja2 rejects unknown filters and tests when it compiles a template, except inside an
// {% if %} (test and branches) or an inline `x if c else y`, where it waits until the filter
// runs; loops, macros and other blocks start a fresh, strict frame again.
class NameChecker {
 public:
  explicit NameChecker(const Program& program) : program_(program) {}

  void body(const Body& b, bool soft) {
    for (const auto& s : b) stmt(*s, soft);
  }

 private:
  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kIf:
        for (const auto& c : s.conditions) expr(c.get(), true);
        for (const auto& branch : s.bodies) body(branch, true);
        body(s.else_body, true);
        return;
      case StmtKind::kFor:
        expr(s.expr.get(), soft);
        expr(s.condition.get(), false);
        body(s.body, false);
        body(s.else_body, false);
        return;
      case StmtKind::kWith:
        for (const auto& v : s.values) expr(v.get(), soft);
        body(s.body, false);
        return;
      case StmtKind::kMacro:
        for (const auto& d : s.defaults) expr(d.get(), false);
        body(s.body, false);
        return;
      case StmtKind::kSetBlock:
      case StmtKind::kFilterBlock:
      case StmtKind::kScope:
        expr(s.expr.get(), false);
        body(s.body, false);
        return;
      default:
        expr(s.expr.get(), soft);
        return;
    }
  }

  void expr(const Expr* e, bool soft) {
    if (!e) return;
    if (e->kind == ExprKind::kCondition) soft = true;
    if (!soft && e->kind == ExprKind::kFilter && !filter_exists(e->name)) {
      syntax_error(program_.source, e->offset, "no filter named '" + e->name + "'");
    }
    if (!soft && e->kind == ExprKind::kTest && !find_test(e->name)) {
      syntax_error(program_.source, e->offset, "no test named '" + e->name + "'");
    }
    for (const auto& item : e->items) expr(item.get(), soft);
    for (const auto& kw : e->kwargs) expr(kw.second.get(), soft);
    expr(e->dyn_args.get(), soft);
    expr(e->dyn_kwargs.get(), soft);
  }

  const Program& program_;
};

}  // namespace

void check_names(const Program& program) {
  NameChecker(program).body(program.body, false);
}

}  // namespace detllm::jinja
