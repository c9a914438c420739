// jinja::Template (jinja.h): the parser, the name check and the evaluator behind one object.
#include <nlohmann/json.hpp>

#include "jinja/evaluator.h"
#include "jinja/jinja.h"
#include "jinja/parser.h"

namespace detllm::jinja {

Template Template::parse(std::string_view source, const RenderLimits& limits) {
  auto program = std::make_shared<Program>(jinja::parse(source));
  check_names(*program);
  Template t;
  t.program_ = std::move(program);
  t.limits_ = limits;
  return t;
}

std::string Template::render(const Dict& context) const {
  Evaluator evaluator(*program_, limits_);
  return evaluator.render(context);
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  check(context.is_object(), "chat template context must be a JSON object, got {}",
        context.type_name());
  const Value v = Value::from_json(context);
  return render(v.as_dict());
}

const std::string& Template::source() const {
  return program_->source;
}

}  // namespace detllm::jinja
