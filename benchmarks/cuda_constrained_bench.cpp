// Constrained vs unconstrained offline throughput on the GPU (docs/perf.md, "Structured
// output"; not a test): constrained_bench's comparison (constrained_common.h) on the CUDA
// backend, with a synthetic model generated in device memory and a real tokenizer for the
// grammar (its vocabulary must be the model's: Llama 3's for llama-3.1-8b). Every constrained
// draw is masked on the device (Ops::sample_rows_masked); the matcher fills the step's masks
// on the host while the step's forward runs.
//   cuda_constrained_bench --tokenizer tokenizer.json [--model llama-3.1-8b] [--batch 64]
//                          [--output-len 128] [--rounds 2] [--numerics invariant|fast]
#include <cstdio>
#include <stdexcept>
#include <string>

#include "constrained_common.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/synthetic.h"

using namespace detllm;

namespace {

struct Args {
  std::string tokenizer;
  std::string model = "llama-3.1-8b";
  int batch = 64;
  int output_len = 128;
  int rounds = 2;
  std::string numerics = "invariant";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokenizer") a.tokenizer = v;
    else if (k == "--model") a.model = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--output-len") a.output_len = std::stoi(v);
    else if (k == "--rounds") a.rounds = std::stoi(v);
    else if (k == "--numerics") a.numerics = v;
    else throw std::runtime_error("unknown option " + k);
  }
  if (a.tokenizer.empty()) throw std::runtime_error("--tokenizer tokenizer.json is required");
  if (a.numerics != "invariant" && a.numerics != "fast") {
    throw std::runtime_error("--numerics takes invariant or fast");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (kernels::cuda_device_count() == 0) {
    std::printf("cuda_constrained_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  const auto tokenizer = Tokenizer::from_json_file(a.tokenizer);
  const ModelConfig c = synthetic_config(a.model);
  kernels::CudaOptions o;
  o.mode = a.numerics == "fast" ? NumericsMode::kFast : NumericsMode::kInvariant;
  auto ops = kernels::make_cuda_ops(o);
  const LlamaModel model(c, synthetic_recipe(c, 1), *ops);
  ops->synchronize();
  std::printf("device %s, synthetic %s (vocab %d), tokenizer %s, %s numerics, batch %d, "
              "output %d tokens\n",
              kernels::cuda_device_description(0).c_str(), a.model.c_str(), c.vocab_size,
              a.tokenizer.c_str(), a.numerics.c_str(), a.batch, a.output_len);
  bench_constrained::compare(model, *tokenizer, c.vocab_size, a.batch, a.output_len, a.rounds);
  return 0;
}
