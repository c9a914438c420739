// CUDA graphs for kernels::GraphCapture (see cuda_graph.h).
#include "kernels/cuda/cuda_graph.h"

#include "core/error.h"

namespace detllm::kernels::cuda {
namespace {

void graph_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw_error("CUDA graph error in {}: {} ({})", what, cudaGetErrorString(err),
                static_cast<int>(err));
}

class CudaGraph final : public OpsGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::vector<const void*> scratch)
      : exec_(exec), scratch_(std::move(scratch)) {}
  ~CudaGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }
  const std::vector<const void*>& scratch() const { return scratch_; }

 private:
  cudaGraphExec_t exec_;
  std::vector<const void*> scratch_;  // the scratch bases the kernels were captured with
};

}  // namespace

CudaGraphCapture::CudaGraphCapture(cudaStream_t stream,
                                   std::function<std::vector<const void*>()> scratch_bases)
    : stream_(stream), scratch_bases_(std::move(scratch_bases)) {}

CudaGraphCapture::~CudaGraphCapture() {
  if (capturing_) abort_capture();
}

void CudaGraphCapture::begin_capture() {
  check(!capturing_, "CUDA graphs: a capture is already in progress");
  // Thread-local: only this thread's unsafe calls (allocation, synchronization) are refused.
  graph_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
  capturing_ = true;
}

std::unique_ptr<OpsGraph> CudaGraphCapture::end_capture() {
  check(capturing_, "CUDA graphs: end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  graph_check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  graph_check(err, "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(exec, scratch_bases_());
}

void CudaGraphCapture::abort_capture() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);  // an invalidated capture returns an error: ignored
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // clear the capture error so the next call does not report it
}

void CudaGraphCapture::replay(const OpsGraph& graph) {
  const auto& g = static_cast<const CudaGraph&>(graph);
  check(g.scratch() == scratch_bases_(),
        "CUDA graphs: replay of a graph whose scratch was reallocated (capture it again)");
  graph_check(cudaGraphLaunch(g.exec(), stream_), "cudaGraphLaunch");
}

bool CudaGraphCapture::graph_valid(const OpsGraph& graph) const {
  return static_cast<const CudaGraph&>(graph).scratch() == scratch_bases_();
}

void* CudaGraphCapture::alloc_pinned(size_t n_bytes) {
  void* p = nullptr;
  graph_check(cudaMallocHost(&p, n_bytes), "cudaMallocHost");
  return p;
}

void CudaGraphCapture::free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

}  // namespace detllm::kernels::cuda
