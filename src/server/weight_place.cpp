#include "server/weight_place.h"

#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace detllm::server {

WeightSync::PlaceFn place_on_device(LlamaModel& model, kernels::Ops& ops) {
  if (ops.host_memory()) return {};
  return [&model, &ops](std::span<const ParameterSlot> written) {
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
  };
}

}  // namespace detllm::server
