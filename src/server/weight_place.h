// Where /finish_weight_update's new values go on a device backend: after WeightSync writes them
// into the host fp32 weights, this uploads each written slot into the model's placed copy in
// place (fp32 tensors as they are, bf16 ones rounded as the load rounds them: the GEMM plans
// and captured graphs keep their pointers), before the engine is rebuilt and any request runs. Empty on a host backend (it computes on the host
// weights themselves). Tested on a GPU by tests/cuda/cuda_weight_sync_test.cpp.
#pragma once

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "server/weight_sync.h"

namespace detllm::server {

WeightSync::PlaceFn place_on_device(LlamaModel& model, kernels::Ops& ops);

}  // namespace detllm::server
