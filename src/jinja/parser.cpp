// Jinja parser (see parser.h): statements and template structure, a recursive-descent reading
// of jinja2 3.1's grammar; expressions are parsed by expr_parser.cpp on the same token stream.
#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "jinja/expr_parser.h"
#include "jinja/lexer.h"

namespace detllm::jinja {
namespace {

std::string quote_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += " or ";
    out += "'" + names[i] + "'";
  }
  return out;
}

// Statements: template text, {{ }} and {% %} blocks, each block's body up to its end tag.
class Parser : private TokenStream {
 public:
  Parser(std::string_view source, std::vector<Token> tokens)
      : TokenStream(source, std::move(tokens)), expr_(*this) {}

  Body parse_all() { return subparse({}); }

 private:
  Body subparse(std::vector<std::string> end_tokens) {
    const bool nested = !end_tokens.empty();
    if (nested) end_stack_.push_back(end_tokens);
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->offset = t.offset;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        const size_t offset = advance().offset;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->offset = static_cast<uint32_t>(offset);
        s->expr = expr_.parse_tuple(true, {}, false);
        if (cur().type != TokenType::kVariableEnd) {
          if (cur().type == TokenType::kEof) fail("'{{' is never closed with '}}'", offset);
          fail_expected("end of print statement '}}'");
        }
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (nested && cur().type == TokenType::kName &&
            std::find(end_tokens.begin(), end_tokens.end(), cur().text) != end_tokens.end()) {
          end_stack_.pop_back();
          return body;
        }
        Body stmts = parse_statement();
        expect_block_end();
        for (auto& s : stmts) body.push_back(std::move(s));
      } else {
        fail_here("internal parsing error: unexpected " + describe(t));
      }
    }
    if (nested) end_stack_.pop_back();
    return body;
  }

  void expect_block_end() {
    if (cur().type == TokenType::kBlockEnd) {
      advance();
      return;
    }
    if (cur().type == TokenType::kEof && !tag_stack_.empty()) {
      fail("'{%' is never closed with '%}'", tag_stack_.back().second);
    }
    fail_expected("end of statement block '%}'");
  }

  // Body of a block statement up to one of `end_tokens` (left current, or consumed when
  // drop_needle).
  Body parse_statements(std::vector<std::string> end_tokens, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tokens);
    if (cur().type == TokenType::kEof) fail_eof(end_tokens);
    if (drop_needle) advance();
    return body;
  }

  [[noreturn]] void fail_eof(const std::vector<std::string>& end_tokens) const {
    std::string message =
        "unexpected end of template; jinja was looking for " + quote_list(end_tokens);
    size_t offset = cur().offset;
    if (!open_blocks_.empty()) {
      const LineCol lc = locate(src_, open_blocks_.back().second);
      message += fmt::format(" to close the '{}' opened at line {}, column {}",
                             open_blocks_.back().first, lc.line, lc.column);
    }
    fail(message, offset);
  }

  [[noreturn]] void fail_unknown_tag(const std::string& name, size_t offset) const {
    std::string message = "unknown tag '" + name + "'";
    if (!end_stack_.empty()) {
      bool expected_somewhere = false;
      for (const auto& names : end_stack_) {
        expected_somewhere |= std::find(names.begin(), names.end(), name) != names.end();
      }
      message += expected_somewhere ? "; probably a nesting mistake: jinja expects it later, "
                                      "but is now looking for "
                                    : "; jinja was looking for ";
      message += quote_list(end_stack_.back());
    }
    if (!open_blocks_.empty()) {
      message +=
          "; the innermost block that needs to be closed is '" + open_blocks_.back().first + "'";
    }
    fail(message, offset);
  }

  Body parse_statement() {
    Nest nest(*this);
    const Token& t = cur();
    if (t.type != TokenType::kName) fail_expected("a tag name");
    const std::string tag = t.text;
    const size_t offset = t.offset;
    tag_stack_.emplace_back(tag, offset);
    Body out;
    const auto block = [&](auto&& fn) {
      open_blocks_.emplace_back(tag, offset);
      fn();
      open_blocks_.pop_back();
    };
    if (tag == "if") {
      block([&] { out.push_back(parse_if()); });
    } else if (tag == "for") {
      block([&] { out.push_back(parse_for()); });
    } else if (tag == "set") {
      block([&] { out.push_back(parse_set()); });
    } else if (tag == "macro") {
      block([&] { out.push_back(parse_macro()); });
    } else if (tag == "with") {
      block([&] { out.push_back(parse_with()); });
    } else if (tag == "filter") {
      block([&] { out.push_back(parse_filter_block()); });
    } else if (tag == "block" || tag == "generation") {
      block([&] { out.push_back(parse_scope_block(tag)); });
    } else if (tag == "print") {
      advance();
      while (cur().type != TokenType::kBlockEnd) {
        if (!out.empty()) expect_op(",");
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->offset = cur().offset;
        s->expr = expr_.parse_expression(true);
        out.push_back(std::move(s));
      }
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a for loop", offset);
      advance();
      auto s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->offset = static_cast<uint32_t>(offset);
      out.push_back(std::move(s));
    } else if (tag == "include" || tag == "extends" || tag == "import" || tag == "from" ||
               tag == "call" || tag == "autoescape" || tag == "do") {
      fail("'{% " + tag +
               " %}' is not supported: chat templates must be self-contained "
               "(supported tags: if, for, set, macro, with, filter, block, generation, print, "
               "break, continue, raw)",
           offset);
    } else {
      fail_unknown_tag(tag, offset);
    }
    tag_stack_.pop_back();
    return out;
  }

  StmtPtr make_stmt(StmtKind kind, size_t offset) const {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->offset = static_cast<uint32_t>(offset);
    return s;
  }

  StmtPtr parse_if() {
    StmtPtr s = make_stmt(StmtKind::kIf, advance().offset);
    while (true) {
      s->conditions.push_back(expr_.parse_tuple(false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const Token& t = advance();
      if (t.text == "elif") continue;
      if (t.text == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_for() {
    StmtPtr s = make_stmt(StmtKind::kFor, advance().offset);
    s->target = expr_.parse_target(false, {"in"});
    expect_name("in");
    s->expr = expr_.parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->condition = expr_.parse_expression(true);
    if (is_name(cur(), "recursive")) {
      fail_here("recursive for loops are not supported; use a macro that calls itself");
    }
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (advance().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_set() {
    StmtPtr s = make_stmt(StmtKind::kSet, advance().offset);
    s->target = expr_.parse_target(true, {});
    if (skip_op("=")) {
      s->expr = expr_.parse_tuple(true, {}, false);
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (is_op(cur(), "|")) s->expr = expr_.parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  StmtPtr parse_macro() {
    StmtPtr s = make_stmt(StmtKind::kMacro, advance().offset);
    s->text = expr_.parse_target_name();
    expect_op("(");
    while (!is_op(cur(), ")")) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expr_.parse_target_name());
      if (skip_op("=")) {
        s->defaults.push_back(expr_.parse_expression(true));
      } else if (!s->defaults.empty()) {
        fail_here("non-default argument follows default argument");
      }
    }
    expect_op(")");
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    return s;
  }

  StmtPtr parse_with() {
    StmtPtr s = make_stmt(StmtKind::kWith, advance().offset);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expr_.parse_target(false, {}));
      expect_op("=");
      s->values.push_back(expr_.parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  StmtPtr parse_filter_block() {
    StmtPtr s = make_stmt(StmtKind::kFilterBlock, advance().offset);
    s->expr = expr_.parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_scope_block(const std::string& tag) {
    StmtPtr s = make_stmt(StmtKind::kScope, advance().offset);
    std::string name;
    if (tag == "block") {
      name = expect_any_name();
      skip_name("scoped");
      skip_name("required");
    }
    s->body = parse_statements({"end" + tag}, true);
    if (tag == "block") skip_name(name);
    return s;
  }

  ExprParser expr_;
  int loop_depth_ = 0;
  std::vector<std::vector<std::string>> end_stack_;
  std::vector<std::pair<std::string, size_t>> tag_stack_;    // tags being parsed
  std::vector<std::pair<std::string, size_t>> open_blocks_;  // block tags awaiting their end
};

}  // namespace

Program parse(std::string_view source) {
  Program program;
  program.source = normalize_source(source);
  Parser parser(program.source, tokenize(program.source));
  program.body = parser.parse_all();
  return program;
}

}  // namespace detllm::jinja
