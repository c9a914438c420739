// Constrained vs unconstrained offline throughput (docs/perf.md, "Structured output"; not a
// test): the same batch of requests run through the engine with every request constrained by
// a 50-field JSON schema, and without any constraint, interleaved, on the CPU backend. Every
// request generates exactly --output-len tokens in both conditions (the schema's document is
// longer than that; the unconstrained ones ignore eos), so tokens/s compare like for like.
// Also prints the 50-field schema's compile time (cache off) and the vocabulary preprocessing.
//   constrained_bench [--model PATH] [--batch 64] [--output-len 128] [--threads 2] [--rounds 2]
#include <stdexcept>
#include <string>

#include "constrained_common.h"
#include "model/bundle.h"

using namespace detllm;

namespace {

struct Args {
  std::string model;
  int batch = 64;
  int output_len = 128;
  int threads = 2;
  int rounds = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--output-len") a.output_len = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--rounds") a.rounds = std::stoi(v);
    else throw std::runtime_error("unknown option " + k);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  ModelBundle b = open_model_bundle(a.model, a.threads);
  std::printf("model %s, batch %d, output %d tokens, %d threads\n", b.model->name.c_str(),
              a.batch, a.output_len, a.threads);
  bench_constrained::compare(b.engine_model(), *b.tokenizer, b.model->config.vocab_size, a.batch,
                             a.output_len, a.rounds);
  return 0;
}
