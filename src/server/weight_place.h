// Where /finish_weight_update's new values go: after WeightSync writes them into the host fp32
// weights, a device backend gets each written slot uploaded into the model's placed copy in
// place (fp32 tensors as they are, bf16 ones rounded as the load rounds them: the GEMM plans
// and captured graphs keep their pointers), before the engine is rebuilt and any request runs;
// and a model with an FP8 KV cache gets its KV scales bounded again from the updated weights
// (LlamaModel::refresh_kv_scales). Empty on a host backend without FP8 KV (it computes on the
// host weights themselves). Tested on a GPU by tests/cuda/cuda_weight_sync_test.cpp, the FP8
// KV scales on the CPU by tests/server/weight_sync_fp8_kv_test.cpp.
#pragma once

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "server/weight_sync.h"

namespace detllm::server {

WeightSync::PlaceFn place_on_device(LlamaModel& model, kernels::Ops& ops,
                                    const ModelWeights& weights);

}  // namespace detllm::server
