// Renders a parsed template (ast.h) against a context: walks statements, evaluates expressions
// with jinja2's scoping (a fresh scope per loop iteration, macro and with block) and its
// Undefined rules, under limits that stop hostile templates from hanging or exhausting memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/jinja.h"
#include "jinja/value.h"

namespace detllm::jinja {

// Variables visible to a part of the template. Loops, macros and with blocks open a child
// scope; assignments go to the innermost scope and lookups walk outwards.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Evaluator {
 public:
  Evaluator(const Program& program, const RenderLimits& limits);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Renders the whole template with `context` as its variables (over the globals). Throws
  // detllm::Error naming the template line and column of the failure.
  std::string render(const Dict& context);

  // For builtins.
  const RenderLimits& limits() const { return limits_; }
  void charge(uint64_t steps);  // Failure once the step budget is spent
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);  // obj.name
  Value get_item(const Value& obj, const Value& key);         // obj[key]
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  // Registers a namespace so its attributes can be cleared after rendering (a namespace can
  // hold itself; clearing breaks such cycles).
  void track(const std::shared_ptr<Namespace>& ns);

 private:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };
  class DepthGuard;

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string& out);
  void define_macro(const Stmt& s, const std::shared_ptr<Scope>& scope);
  std::string render_block(const Body& body, const std::shared_ptr<Scope>& parent);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_node(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope);
  Value eval_filter_chain(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* block);
  void assign(const Target& t, Value value, const std::shared_ptr<Scope>& scope);
  void append(std::string& out, std::string_view text);
  [[noreturn]] void rethrow_at(const Failure& f, uint32_t offset) const;

  const Program& program_;
  RenderLimits limits_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  std::shared_ptr<Scope> root_;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
  size_t namespaces_prune_at_ = 1024;
};

// Checks every filter and test name the template uses exists, as jinja2 does when it compiles
// a template. Throws detllm::Error with line and column.
void check_names(const Program& program);

}  // namespace detllm::jinja
