#include "server/weight_place.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace detllm::server {
namespace {

// Each written slot into the model's placed copy, in place.
void upload_written(LlamaModel& model, kernels::Ops& ops, std::span<const ParameterSlot> written) {
  std::vector<uint16_t> bf16;
  for (const ParameterSlot& slot : written) {
    const LlamaModel::PlacedTensor dst = model.placed(slot.param, slot.layer);
    const auto n = static_cast<size_t>(slot.numel());
    check(dst.data != nullptr && dst.numel == slot.numel(), "weight update: {} is not placed "
          "as {} elements (internal)", slot.name, n);
    if (dst.dtype == DType::kF32) {
      ops.upload(dst.data, slot.data, n * sizeof(float));
    } else {
      check(dst.dtype == DType::kBF16, "weight update: {} is placed as {} (internal)",
            slot.name, dtype_name(dst.dtype));
      bf16.resize(n);
      for (size_t i = 0; i < n; ++i) bf16[i] = f32_to_bf16(slot.data[i]);
      ops.upload(dst.data, bf16.data(), n * sizeof(uint16_t));
    }
    ops.synchronize();  // bf16 is reused by the next parameter
  }
}

}  // namespace

WeightSync::PlaceFn place_on_device(LlamaModel& model, kernels::Ops& ops,
                                    const ModelWeights& weights) {
  if (ops.host_memory() && !model.kv_fp8_scales()) return {};
  return [&model, &ops, &weights](std::span<const ParameterSlot> written) {
    if (!ops.host_memory()) upload_written(model, ops, written);
    // FP8 KV: its scales bounded from the updated weights (never from a batch).
    if (model.kv_fp8_scales()) model.refresh_kv_scales(weights);
  };
}

}  // namespace detllm::server
