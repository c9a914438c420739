// Grammar engine figures for docs/structured_output.md (not a test): for a tokenizer.json
// (Llama-3's 128k vocabulary for the decision), the vocabulary preprocessing time, the compile
// time of a 50-field JSON schema and of the other cases, and the time to fill one next-token
// bitmask at every position of a fixed document's tokens (mean, p50, p90, p99, max).
//   grammar_bench --tokenizer /path/llama3/tokenizer.json [--threads N] [--dump DIR]
// --dump writes DIR/<case>.json {schema, text, tokens} so scripts/grammar_bench_llguidance.py
// walks the same tokens through llguidance.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "structured/compiler.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace detllm;
using namespace detllm::structured;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// 50 required fields cycling through string, integer, number, boolean, enum, array, object.
nlohmann::ordered_json fifty_field_schema() {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  std::vector<std::string> required;
  for (int k = 0; k < 50; ++k) {
    const std::string name = fmt::format("field_{:02d}", k);
    nlohmann::ordered_json p;
    switch (k % 7) {
      case 0: p = {{"type", "string"}, {"maxLength", 32}}; break;
      case 1: p = {{"type", "integer"}, {"minimum", 0}}; break;
      case 2: p = {{"type", "number"}}; break;
      case 3: p = {{"type", "boolean"}}; break;
      case 4: p = {{"enum", {"alpha", "beta", "gamma", "delta"}}}; break;
      case 5: p = {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 5}}; break;
      default:
        p = {{"type", "object"},
             {"properties", {{"x", {{"type", "integer"}}}, {"y", {{"type", "string"}}}}},
             {"required", {"x", "y"}}};
    }
    props[name] = p;
    required.push_back(name);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required},
          {"additionalProperties", false}};
}

nlohmann::ordered_json fifty_field_document() {
  nlohmann::ordered_json d = nlohmann::ordered_json::object();
  for (int k = 0; k < 50; ++k) {
    const std::string name = fmt::format("field_{:02d}", k);
    switch (k % 7) {
      case 0: d[name] = fmt::format("value number {}", k); break;
      case 1: d[name] = 1000 + k * 37; break;
      case 2: d[name] = k * 0.25 + 0.125; break;
      case 3: d[name] = (k % 2) == 0; break;
      case 4: d[name] = "gamma"; break;
      case 5: d[name] = {"red", "green", fmt::format("item {}", k)}; break;
      default: d[name] = {{"x", k}, {"y", "nested text"}};
    }
  }
  return d;
}

const char* kPersonSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
  "email": {"type": "string", "pattern": "^[a-z.]+@[a-z]+\\.[a-z]{2,3}$"},
  "address": {"type": "object", "properties": {"street": {"type": "string"},
     "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
     "required": ["street", "city", "zip"]},
  "roles": {"type": "array", "items": {"enum": ["admin", "user", "guest"]}},
  "active": {"type": "boolean"}},
  "required": ["name", "age", "email", "address", "roles", "active"]})";

const char* kPersonDoc = R"({"name": "Ada Lovelace", "age": 36, "email": "ada.lovelace@analytical.org", "address": {"street": "12 St James's Square", "city": "London", "zip": "01234"}, "roles": ["admin", "user"], "active": true})";

struct Stats {
  double mean, p50, p90, p99, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {sum / v.size(), at(0.5), at(0.9), at(0.99), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, dump;
  int threads = 1, repeats = 5;
  for (int k = 1; k < argc; ++k) {
    const std::string a = argv[k];
    if (a == "--tokenizer" && k + 1 < argc) tokenizer_path = argv[++k];
    else if (a == "--threads" && k + 1 < argc) threads = std::atoi(argv[++k]);
    else if (a == "--repeats" && k + 1 < argc) repeats = std::atoi(argv[++k]);
    else if (a == "--dump" && k + 1 < argc) dump = argv[++k];
    else {
      std::fprintf(stderr, "usage: grammar_bench --tokenizer tokenizer.json [--threads N] "
                           "[--repeats N] [--dump DIR]\n");
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "grammar_bench: --tokenizer is required\n");
    return 2;
  }
  const auto tok = Tokenizer::from_json_file(tokenizer_path);
  auto t0 = Clock::now();
  const GrammarVocabulary vocab = GrammarVocabulary::from_tokenizer(*tok);
  const double vocab_ms = us_since(t0) / 1000;
  t0 = Clock::now();
  // No cache: every compile below is a real one.
  const GrammarCompiler compiler(vocab, threads, 0);
  const double info_ms = us_since(t0) / 1000;
  std::printf("tokenizer %s: %d tokens, eos %d; vocabulary bytes %.1f ms, xgrammar tokenizer "
              "info %.1f ms; compile threads %d\n", tok->name().c_str(), tok->vocab_size(),
              tok->eos_id().value_or(-1), vocab_ms, info_ms, threads);

  struct Case {
    std::string name, schema, text;
    GrammarSpec spec;
  };
  const std::string fifty = fifty_field_schema().dump();
  std::vector<Case> cases = {
      {"json_schema_50_fields", fifty, fifty_field_document().dump(-1, ' '),
       GrammarSpec::json_schema(fifty)},
      {"json_schema_person", kPersonSchema, kPersonDoc, GrammarSpec::json_schema(kPersonSchema)},
      {"json_object", R"({"type": "object"})", kPersonDoc, GrammarSpec::json_object()},
  };
  // nlohmann's dump writes no spaces; JSON as a model writes it has them after : and ,.
  for (Case& c : cases) {
    if (c.name == "json_schema_50_fields") {
      std::string spaced;
      bool in_string = false;
      for (size_t i = 0; i < c.text.size(); ++i) {
        const char ch = c.text[i];
        spaced += ch;
        if (ch == '"' && (i == 0 || c.text[i - 1] != '\\')) in_string = !in_string;
        if (!in_string && (ch == ':' || ch == ',')) spaced += ' ';
      }
      c.text = spaced;
    }
  }

  std::printf("\n%-24s %12s %12s %8s %9s %9s %9s %9s %9s\n", "case", "compile ms", "(min..max)",
              "tokens", "mean us", "p50 us", "p90 us", "p99 us", "max us");
  for (const Case& c : cases) {
    std::vector<double> compile_ms;
    std::optional<CompiledGrammar> g;
    for (int r = 0; r < repeats; ++r) {
      t0 = Clock::now();
      g = compiler.compile(c.spec);
      compile_ms.push_back(us_since(t0) / 1000);
    }
    std::vector<int32_t> tokens = tok->encode(c.text, false);
    tokens.push_back(*tok->eos_id());
    std::vector<uint32_t> words(Matcher::bitmask_words(g->mask_width()));
    std::vector<double> mask_us;
    for (int r = 0; r < repeats; ++r) {
      Matcher m(*g);
      for (size_t k = 0; k < tokens.size(); ++k) {
        t0 = Clock::now();
        m.fill_next_token_bitmask(words);
        mask_us.push_back(us_since(t0));
        if (!m.accept_token(tokens[k])) {
          std::fprintf(stderr, "%s: token %zu (%d) refused\n", c.name.c_str(), k, tokens[k]);
          return 1;
        }
      }
      if (!m.is_terminated()) {
        std::fprintf(stderr, "%s: not terminated\n", c.name.c_str());
        return 1;
      }
    }
    const Stats cs = stats(compile_ms), ms = stats(mask_us);
    std::printf("%-24s %12.1f %5.1f..%-6.1f %8zu %9.1f %9.1f %9.1f %9.1f %9.1f\n", c.name.c_str(),
                cs.p50, *std::min_element(compile_ms.begin(), compile_ms.end()), cs.max,
                tokens.size(), ms.mean, ms.p50, ms.p90, ms.p99, ms.max);
    if (!dump.empty()) {
      nlohmann::json d = {{"schema", c.schema}, {"text", c.text}, {"tokens", tokens},
                          {"eos", *tok->eos_id()}};
      std::ofstream(dump + "/" + c.name + ".json") << d.dump();
    }
  }
  std::printf("\ncompile ms: median of %d (each a fresh compile, cache off); mask us: one "
              "fill_next_token_bitmask per token, %d walks of the document's tokens + eos\n",
              repeats, repeats);
  return 0;
}
