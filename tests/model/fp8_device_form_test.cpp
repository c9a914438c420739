// LlamaModel's FP8 path for a backend whose memory is not host memory (the CUDA backend's path,
// run on the CPU): FP8 projections are concatenated (fused q/k/v and gate/up), split into the
// device form of kernels/fp8_device_matrix.h and uploaded; a test backend that joins the form
// back into rows and runs the CPU's FP8 kernel gives the CPU backend's logits bit for bit on the
// tiny models (so the fusion, the split and the upload lose nothing); the device form is really
// what runs (fp32 weights give other logits); static input scales and activation bounds (a
// checkpoint's) go with the matrix, and fused parts with different rules are placed apart — the
// CPU's logits bit for bit again; and the same with 128-column block scales (kF8E4M3B128,
// kF8E4M3G128), whose scales the device form holds row by row.
// Run: build/tests/test_model --gtest_filter='Fp8DeviceForm*'.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "conformance/delegating_ops.h"
#include "core/fp8.h"
#include "kernels/fp8_device_matrix.h"
#include "model/fp8_block_rows.h"
#include "model/fp8_weights.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

// "Device" memory on the host: fp32 weights converted by the model, FP8 matrices handed over in
// the device form, which matmul joins back into rows for the CPU kernel.
class Fp8DeviceFormOps final : public conformance::DelegatingOps {
 public:
  Fp8DeviceFormOps() : DelegatingOps(kernels::make_cpu_ops(2), "cpu-fp8-device-form-test") {}
  bool host_memory() const override { return false; }
  bool reads_weight_dtype(DType t) const override {
    return t == DType::kF32 || dtype_is_fp8(t);
  }
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    if (!dtype_is_fp8(w.dtype)) return inner_->matmul(x, m, w, bias, y, numerics);
    ++fp8_calls;
    std::vector<uint8_t>& rows = joined_[w.data];
    if (rows.empty()) {
      rows.resize(static_cast<size_t>(w.rows * dtype_row_bytes(w.dtype, w.cols)));
      kernels::fp8_device_join(w.dtype, static_cast<const uint8_t*>(w.data), w.rows, w.cols, rows.data());
    }
    kernels::WeightMatrix host = w;
    host.data = rows.data();
    inner_->matmul(x, m, host, bias, y, numerics);
  }
  int64_t fp8_calls = 0;

 private:
  std::map<const void*, std::vector<uint8_t>> joined_;
};

std::vector<float> logits(const LlamaModel& m) {
  SoloRunner r(m, 48, 4);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back((i * 31 + 5) % m.config().vocab_size);
  std::vector<float> all = r.feed(prompt, /*all_logits=*/true);
  for (int32_t tok : {3, 17, 9}) {
    const int32_t one[1] = {tok};
    const std::vector<float> l = r.feed(one);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Fp8DeviceForm, GivesTheCpuBackendsLogitsBitForBit) {
  for (const Fp8Rows rows : {Fp8Rows::kChannel, Fp8Rows::kBlockG128})
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(rows == Fp8Rows::kChannel ? "per-channel" : "128x128 blocks");
    const ModelConfig c = synthetic_config(name);
    const ModelWeights fp32 = make_synthetic_weights(c, 42);
    ModelWeights w = fp32;
    quantize_weights_fp8(w, c, rows);
    auto cpu = kernels::make_cpu_ops(2);
    Fp8DeviceFormOps dev;
    const LlamaModel on_cpu(c, w, *cpu), on_dev(c, w, dev);
    const std::vector<float> a = logits(on_cpu), b = logits(on_dev);
    EXPECT_GT(dev.fp8_calls, 0) << name;
    EXPECT_TRUE(same_bits(a, b)) << name << ": the device form changed a logit";
    // Control: the fp32 weights through the same ops give other logits (FP8 really ran).
    Fp8DeviceFormOps dev32;
    const LlamaModel unquantized(c, fp32, dev32);
    EXPECT_EQ(dev32.fp8_calls, 0);
    EXPECT_FALSE(same_bits(a, logits(unquantized))) << name;
  }
}

// Every row of t gets this static input scale and activation bound (as a checkpoint's would).
void set_rule(HostTensor& t, float input_scale, float bound) {
  const int64_t rb = dtype_row_bytes(t.dtype, t.shape.at(1));
  for (int64_t r = 0; r < t.shape.at(0); ++r) {
    std::memcpy(t.raw.data() + r * rb, &input_scale, 4);
    std::memcpy(t.raw.data() + r * rb + 4, &bound, 4);
  }
}

TEST(Fp8DeviceForm, StaticScalesAndBoundsGiveTheCpuBackendsLogits) {
  for (const char* name : {"tiny-llama", "tiny-qwen2"}) {
    const ModelConfig c = synthetic_config(name);
    ModelWeights w = make_synthetic_weights(c, 42);
    quantize_weights_fp8(w, c);
    for (LayerWeights& l : w.layers) {
      set_rule(l.wq.w, 0.02f, 0.0f);  // q and v share a static scale, k has another:
      set_rule(l.wv.w, 0.02f, 0.0f);
      set_rule(l.wk.w, 0.03f, 0.0f);  // q/k/v are placed apart
      set_rule(l.w_gate.w, 0.0f, 1.5f);  // gate and up: one bound (fused)
      set_rule(l.w_up.w, 0.0f, 1.5f);
      set_rule(l.wo.w, 0.01f, 0.0f);
    }
    auto cpu = kernels::make_cpu_ops(2);
    Fp8DeviceFormOps dev;
    const LlamaModel on_cpu(c, w, *cpu), on_dev(c, w, dev);
    const std::vector<float> a = logits(on_cpu);
    EXPECT_TRUE(same_bits(a, logits(on_dev))) << name;
    // Control: the same weights with dynamic activations give other logits.
    ModelWeights dynamic = w;
    for (LayerWeights& l : dynamic.layers)
      for (Linear* m : l.matrices()) set_rule(m->w, 0.0f, 0.0f);
    Fp8DeviceFormOps dev2;
    const LlamaModel on_dev2(c, dynamic, dev2);
    EXPECT_FALSE(same_bits(a, logits(on_dev2))) << name << ": the rules were not applied";
  }
}

// A matrix with one weight scale per 128-column block of each row and per-token activations
// (kF8E4M3B128, as a checkpoint with block weights and dynamic per-token inputs loads) goes
// through the device form whole: the CPU backend's logits bit for bit.
TEST(Fp8DeviceForm, BlockScalesPerTokenGiveTheCpuBackendsLogits) {
  const ModelConfig c = synthetic_config("tiny-llama");
  ModelWeights w = make_synthetic_weights(c, 42);
  quantize_weights_fp8(w, c);
  for (LayerWeights& l : w.layers) detllm::testing::to_block128_rows(l.w_down.w);  // down_proj
  auto cpu = kernels::make_cpu_ops(2);
  Fp8DeviceFormOps dev;
  const LlamaModel on_cpu(c, w, *cpu), on_dev(c, w, dev);
  EXPECT_TRUE(same_bits(logits(on_cpu), logits(on_dev)));
}

}  // namespace
}  // namespace detllm
