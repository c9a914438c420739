// MaskedSampling (masked_sampling.h): the device path of Ops::sample_rows_masked.
#include "kernels/cuda/masked_sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

void cu(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw_error("CUDA error in masked sampling ({}): {} ({})", what, cudaGetErrorString(err),
                static_cast<int>(err));
  }
}

size_t aligned(size_t n) { return (n + 255) / 256 * 256; }

// Where each part of an upload or of device slot 0 lies (256-aligned offsets).
struct Layout {
  size_t draw_params = 0, params = 0, mask_of_row = 0, words = 0, upload_bytes = 0;
  size_t score_params = 0, results = 0, scratch = 0, device_bytes = 0;
  Layout(int32_t rows, size_t n_words_total, size_t scratch_bytes) {
    const size_t p = sizeof(SampleRowParams) * static_cast<size_t>(rows);
    params = aligned(p);
    mask_of_row = params + aligned(p);
    words = mask_of_row + aligned(sizeof(int32_t) * static_cast<size_t>(rows));
    upload_bytes = words + sizeof(uint32_t) * n_words_total;
    score_params = aligned(upload_bytes);
    results = score_params + aligned(p);
    scratch = results + aligned(2 * sizeof(SampleRowResult) * static_cast<size_t>(rows));
    device_bytes = scratch + scratch_bytes;
  }
};

}  // namespace

MaskedSampling::~MaskedSampling() {
  if (pinned_) cudaFreeHost(pinned_);
  for (void* p : device_) {
    if (p) cudaFree(p);
  }
}

void* MaskedSampling::device(size_t slot, size_t bytes) {
  if (bytes > device_bytes_[slot]) {
    const size_t want = std::max(bytes, 2 * device_bytes_[slot]);
    if (device_[slot]) cu(cudaFree(device_[slot]), "cudaFree");
    device_[slot] = nullptr;
    device_bytes_[slot] = 0;
    cu(cudaMalloc(&device_[slot], want), "cudaMalloc");
    device_bytes_[slot] = want;
  }
  return device_[slot];
}

void* MaskedSampling::pinned(size_t bytes) {
  if (bytes > pinned_bytes_) {
    const size_t want = std::max(bytes, 2 * pinned_bytes_);
    if (pinned_) cu(cudaFreeHost(pinned_), "cudaFreeHost");
    pinned_ = nullptr;
    pinned_bytes_ = 0;
    cu(cudaMallocHost(&pinned_, want), "cudaMallocHost");
    pinned_bytes_ = want;
  }
  return pinned_;
}

void MaskedSampling::run(const float* logits, int32_t rows, int32_t vocab,
                         const SampleRowParams* params, RowMasks masks, SampleRowResult* out,
                         const SampleRowsConfig& config, int sm_count, cudaStream_t stream) {
  const size_t n_rows = static_cast<size_t>(rows);
  const size_t n_words = (static_cast<size_t>(vocab) + 31) / 32;
  size_t n_masked = 0;
  for (size_t r = 0; r < n_rows; ++r) n_masked += masks.begin[r] >= 0 ? 1 : 0;
  const SampleRowsPlan plan = plan_sample_rows(rows, vocab, config, sm_count);
  const Layout at(rows, n_masked * n_words, plan.scratch_bytes);

  // Up: the draws' params (no top logprobs on masked rows: the masked row's are not
  // reported), the rows' own params, each row's mask index and the masks, in one copy.
  char* up = static_cast<char*>(pinned(at.upload_bytes));
  auto* draw_params = reinterpret_cast<SampleRowParams*>(up + at.draw_params);
  auto* mask_of_row = reinterpret_cast<int32_t*>(up + at.mask_of_row);
  auto* words = reinterpret_cast<uint32_t*>(up + at.words);
  std::memcpy(up + at.params, params, sizeof(SampleRowParams) * n_rows);
  int32_t k = 0;
  for (size_t r = 0; r < n_rows; ++r) {
    draw_params[r] = params[r];
    mask_of_row[r] = -1;
    if (masks.begin[r] < 0) continue;
    check(params[r].score_token == -1, "sample_rows_masked: row {} is a scoring row", r);
    draw_params[r].n_logprobs = 0;
    mask_of_row[r] = k;
    std::memcpy(words + static_cast<size_t>(k) * n_words, masks.words + masks.begin[r],
                sizeof(uint32_t) * n_words);
    ++k;
  }
  char* dev = static_cast<char*>(device(0, at.device_bytes));
  auto* masked = static_cast<float*>(device(1, sizeof(float) * n_rows * static_cast<size_t>(vocab)));
  cu(cudaMemcpyAsync(dev, up, at.upload_bytes, cudaMemcpyHostToDevice, stream), "upload");
  auto* d_draw_params = reinterpret_cast<const SampleRowParams*>(dev + at.draw_params);
  auto* d_params = reinterpret_cast<const SampleRowParams*>(dev + at.params);
  auto* d_mask_of_row = reinterpret_cast<const int32_t*>(dev + at.mask_of_row);
  auto* d_score_params = reinterpret_cast<SampleRowParams*>(dev + at.score_params);
  auto* d_results = reinterpret_cast<SampleRowResult*>(dev + at.results);
  void* scratch = dev + at.scratch;

  cu(launch_mask_rows(logits, rows, vocab, d_mask_of_row,
                      reinterpret_cast<const uint32_t*>(dev + at.words), masked, stream),
     "mask rows");
  cu(launch_sample_rows(masked, rows, vocab, d_draw_params, d_results, plan, scratch, stream),
     "draw");
  cu(launch_scoring_params(d_params, d_results, d_mask_of_row, rows, d_score_params, stream),
     "scoring params");
  cu(launch_sample_rows(logits, rows, vocab, d_score_params, d_results + n_rows, plan, scratch,
                        stream),
     "score");
  results_.resize(2 * n_rows);
  cu(cudaMemcpyAsync(results_.data(), d_results, sizeof(SampleRowResult) * 2 * n_rows,
                     cudaMemcpyDeviceToHost, stream),
     "results");
  cu(cudaStreamSynchronize(stream), "sync");

  for (size_t r = 0; r < n_rows; ++r) {
    const SampleRowResult& drawn = results_[r];
    const SampleRowResult& scored = results_[n_rows + r];
    const bool has_mask = masks.begin[r] >= 0;
    if (has_mask && drawn.status == SampleRowStatus::kAllMasked) {
      out[r] = SampleRowResult{};
      out[r].token = -1;
      out[r].status = SampleRowStatus::kNoneAllowed;
      continue;
    }
    for (const SampleRowResult* x : {&drawn, &scored}) {
      check(x->status != SampleRowStatus::kNonFiniteLogit,
            "sampling: row {} has a NaN or +inf logit: the model produced a non-finite value", r);
      check(x->status != SampleRowStatus::kAllMasked,
            "sampling: every logit of row {} is -inf: no token can be chosen", r);
    }
    out[r] = has_mask ? scored : drawn;
    const int32_t n_top = std::min(params[r].n_logprobs, vocab);
    check(out[r].token >= 0 && out[r].token < vocab && out[r].token == drawn.token &&
              out[r].n_top == n_top,
          "CUDA sample_rows_masked: internal error in row {} (token {} drawn {}, {} top "
          "logprobs of {})",
          r, out[r].token, drawn.token, out[r].n_top, n_top);
  }
}

}  // namespace detllm::kernels::cuda
