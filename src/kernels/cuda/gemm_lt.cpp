// LtGemm: verified cuBLASLt plans for the invariant GEMMs, bf16 and FP8 (see gemm_lt.h for
// the why).
#include "kernels/cuda/gemm_lt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/gemm_buckets.h"

namespace detllm::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;
constexpr int64_t kMaxTuneOutput = int64_t{256} << 20;  // y elements per tuning buffer (1 GiB)
constexpr int kHeuristics = 8;                          // algorithms asked per problem
constexpr int kTimedRuns = 5;

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_error("cuBLASLt error in {}: {} ({})", what, cublasGetStatusString(st),
                static_cast<int>(st));
}
void cu_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw_error("CUDA error in {}: {} ({})", what, cudaGetErrorString(err), static_cast<int>(err));
}

// Layouts of one call: W window (kk × n, ld k, used transposed), x window (kk × m, ld k), both
// of type t, y (n × m column-major = (m, n) row-major) fp32.
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Layouts(cudaDataType_t t, int64_t m, int64_t n, int64_t kk, int64_t ld) {
    lt_check(cublasLtMatrixLayoutCreate(&a, t, static_cast<uint64_t>(kk),
                                        static_cast<uint64_t>(n), ld),
             "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&b, t, static_cast<uint64_t>(kk),
                                        static_cast<uint64_t>(m), ld),
             "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, static_cast<uint64_t>(n),
                                        static_cast<uint64_t>(m), n),
             "layout C");
  }
  ~Layouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
};

std::string algo_text(const cublasLtMatmulAlgo_t& a) {
  int id = 0;
  uint32_t tile = 0, splitk = 0, red = 0;
  uint16_t cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &w);
  return fmt::format("algo {} tile {} splitK {} reduction {} cluster {}", id, tile, splitk, red,
                     cluster);
}

// The rows of m one of a's tiles covers, as far as the grid goes: the gcd of the tile's two
// extents (whichever of cuBLAS's M and N our m is, the grid's tile count along it changes only
// at its multiples), 1 when the tile is not one cuBLASLt's header names. The cases are made from
// the cublasLt.h this is compiled against (CMakeLists.txt writes lt_tiles.inc).
int32_t tile_granule(const cublasLtMatmulAlgo_t& a) {
  uint32_t tile = 0;
  size_t w = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                           &w) != CUBLAS_STATUS_SUCCESS)
    return 1;
  switch (tile) {
#define DETLLM_LT_TILE(rows, cols)      \
  case CUBLASLT_MATMUL_TILE_##rows##x##cols: \
    return std::gcd(rows, cols);
#include "lt_tiles.inc"
#undef DETLLM_LT_TILE
    default:
      return 1;
  }
}

// Device buffers of one tuning session, freed at the end.
struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) {
    cu_check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "tuning cudaMalloc");
  }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// The FP8 tuning activations' gain of each column: 2^-(3 · (b mod 5)) in 128-column block b.
// FP8 products of one magnitude have few significant bits, and the fp32 sums of their blocks
// are exact in any order, so data of one scale cannot tell two summation orders apart (seen on
// an H100: CudaFp8WgSplit.NegativeControlSplitsChosenByMAreCaught). Blocks 2^3 … 2^12 apart
// make each promotion and each run's add round, so an execution that adds in another order
// gives other bits and is refused. The smallest block still holds normal E4M3 codes (448 ·
// 2^-12 > 2^-6).
std::vector<float> fp8_block_gains(int64_t k) {
  std::vector<float> g(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c)
    g[static_cast<size_t>(c)] = std::ldexp(1.0f, static_cast<int>(-3 * ((c / 128) % 5)));
  return g;
}

cudaDataType_t operand_type(LtOperands o) {
  return o == LtOperands::kFp8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
}
int64_t operand_bytes(LtOperands o) { return o == LtOperands::kFp8E4M3 ? 1 : 2; }

}  // namespace

int32_t lt_bucket(int32_t m) { return gemm_bucket(std::max(m, 1)); }

struct LtGemm::Exec {
  bool chain = false;  // one unsplit call per k run (k_runs), merged through beta = 1
  int splits = 1;      // S of the shape (its k runs)
  cublasLtMatmulAlgo_t algo{};
  std::string text;
  std::vector<KRun> calls;  // the k window of each cuBLASLt call, in order (exec() fills it)
};

struct LtGemm::Plan {
  bool use_lt = false;
  Exec exec;
  cublasLtMatmulDesc_t op = nullptr;
  LtPlanReport report;
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// One shape and bucket under test: random activations at M = tuned_m, made on the device —
// fp32 for the bf16 kernel and in bf16 for cuBLASLt (the same rounding as the kernel's); for
// FP8 their E4M3 codes and row scales (launch_fp8_quantize_rows), read by both, from values
// whose 128-column blocks differ in magnitude (fp8_block_gains) — the
// invariant kernel's output (the reference, kept on the device), an output buffer for
// candidates, a flag for the device-side bit comparison, and the timing events. Nothing of
// M × N crosses PCIe: at the large buckets the downloads and the host-side comparison were
// most of a plan's re-verification.
struct LtGemm::Session {
  int32_t m = 0;   // rows verified and timed
  int32_t m2 = 0;  // a second M of the bucket (verified when < m)
  bool fp8 = false;
  DeviceBuf x32, xin, x_scale, y_ref, y, differ;
  cudaEvent_t e0 = nullptr, e1 = nullptr;

  Session(LtGemm& g, Weight w, int64_t n, int64_t k, int32_t bucket, int32_t rows)
      : m(rows),
        m2(gemm_bucket_below(bucket) + 1),
        fp8(g.operands_ == LtOperands::kFp8E4M3),
        x32(size_t(rows) * k * 4),
        xin(size_t(rows) * k * operand_bytes(g.operands_)),
        x_scale(fp8 ? size_t(rows) * 4 : 0),
        y_ref(size_t(rows) * n * 4),
        y(size_t(rows) * n * 4),
        differ(sizeof(uint32_t)) {
    const int64_t count = static_cast<int64_t>(m) * k;
    cu_check(launch_fill_uniform(x32.p, false, count, static_cast<uint64_t>(n * 131 + k * 7 + bucket),
                                 0.0f, 1.0f, g.stream_),
             "tuning activations");
    if (fp8) {
      // x32 · gain[c] (launch_fp8_scale_outer with row scales 1), then quantized per row.
      const std::vector<float> gains = fp8_block_gains(k), ones(static_cast<size_t>(m), 1.0f);
      DeviceBuf d_gains(gains.size() * 4), d_ones(ones.size() * 4);
      cu_check(cudaMemcpyAsync(d_gains.p, gains.data(), gains.size() * 4, cudaMemcpyHostToDevice,
                               g.stream_),
               "tuning gains");
      cu_check(cudaMemcpyAsync(d_ones.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice,
                               g.stream_),
               "tuning gains");
      cu_check(launch_fp8_scale_outer(x32.as<float>(), d_ones.as<float>(), d_gains.as<float>(), m,
                                      k, g.stream_),
               "tuning gains");
      cu_check(launch_fp8_quantize_rows(x32.p, false, m, k, xin.as<uint8_t>(), x_scale.as<float>(),
                                        g.stream_),
               "tuning fp8 quantize");
      cu_check(cudaStreamSynchronize(g.stream_), "tuning sync");  // before the gains are freed
    } else {
      cu_check(launch_f32_to_bf16(x32.as<float>(), count, xin.as<uint16_t>(), g.stream_),
               "tuning f32_to_bf16");
    }
    cu_check(g.reference(*this, m, w, n, k, y_ref.as<float>()), "tuning reference");
    cu_check(cudaStreamSynchronize(g.stream_), "tuning sync");
    cu_check(cudaEventCreate(&e0), "event");
    cu_check(cudaEventCreate(&e1), "event");
  }
  // cuBLASLt's activations.
  Acts acts() const { return {xin.p, fp8 ? x_scale.as<float>() : nullptr}; }
  // Whether the first `rows` rows of y equal the reference's bit for bit (on the device).
  bool same_as_reference(cudaStream_t stream, int32_t rows, int64_t n) {
    cu_check(launch_any_word_differs(y.p, y_ref.p, int64_t{rows} * n, differ.as<uint32_t>(), stream),
             "tuning comparison");
    uint32_t host = 1;
    cu_check(cudaMemcpyAsync(&host, differ.p, sizeof(host), cudaMemcpyDeviceToHost, stream),
             "tuning comparison download");
    cu_check(cudaStreamSynchronize(stream), "tuning sync");
    return host == 0;
  }
  ~Session() {
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

LtGemm::LtGemm(cudaStream_t stream, LtOperands operands, std::string plan_file)
    : stream_(stream), operands_(operands), plan_file_(std::move(plan_file)) {
  lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
  cu_check(cudaMalloc(&workspace_, kWorkspaceBytes), "cuBLASLt workspace");
  workspace_bytes_ = kWorkspaceBytes;
  file_stats_.path = plan_file_;
  if (!plan_file_.empty()) load_plan_file();
}

LtGemm::LtGemm(cudaStream_t stream, KernelFn kernel, std::string plan_file)
    : LtGemm(stream, LtOperands::kBf16, std::move(plan_file)) {
  kernel_ = std::move(kernel);
}

LtGemm::LtGemm(cudaStream_t stream, Fp8KernelFn kernel, Fp8RunsFn runs, std::string plan_file)
    : LtGemm(stream, LtOperands::kFp8E4M3, std::move(plan_file)) {
  fp8_kernel_ = std::move(kernel);
  fp8_runs_ = std::move(runs);
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

std::vector<LtPlanReport> LtGemm::reports() const {
  std::vector<LtPlanReport> out;
  for (const auto& [key, plan] : plans_) out.push_back(plan->report);
  return out;
}

std::string LtGemm::plan_file_key(LtOperands operands) {
  int device = 0;
  cu_check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  cu_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string name = prop.name;
  for (char& c : name)
    if (c < 0x20 || c >= 0x7f || c == ';' || c == '=') c = '_';  // the key is printable ASCII
  std::string uuid;
  for (char b : prop.uuid.bytes) uuid += fmt::format("{:02x}", static_cast<uint8_t>(b));
  const bool fp8 = operands == LtOperands::kFp8E4M3;
  return fmt::format(
      "gpu={};uuid={};driver={};runtime={};cublaslt={};gemm={};kernels={};workspace={}{}", name,
      uuid, driver, runtime, cublasLtGetVersion(),
      fp8 ? std::string_view(kFp8GemmWgSplitNumericsRule) : kGemmNumericsRule,
      fp8 ? std::string_view("fp8-split-auto") : kGemmKernelSchedules, kWorkspaceBytes,
      fp8 ? ";operands=fp8-e4m3" : "");
}

void LtGemm::warn(std::string message) {
  std::fprintf(stderr, "detllm: warning: %s\n", message.c_str());
  file_stats_.warnings.push_back(std::move(message));
}

void LtGemm::load_plan_file() {
  plan_file_key_ = plan_file_key(operands_);
  GemmPlanLoad l = load_gemm_plan_file(plan_file_, plan_file_key_);
  if (!l.warning.empty()) warn(l.warning);
  for (const GemmPlanEntry& e : l.entries) from_file_[{e.n, e.k, e.bucket}] = e;
  file_stats_.entries_loaded = static_cast<int>(l.entries.size());
}

void LtGemm::save_plan_file() {
  GemmPlanFile f;
  f.key = plan_file_key_;
  for (const auto& [key, plan] : plans_) {
    GemmPlanEntry e;
    std::tie(e.n, e.k, e.bucket) = key;
    e.splits = static_cast<int32_t>(k_runs(e.n, e.k).size());
    e.tile_runs = operands_ == LtOperands::kFp8E4M3;
    e.use_lt = plan->use_lt;
    if (plan->use_lt) {
      e.splits = plan->exec.splits;
      e.chain = plan->exec.chain;
      std::memcpy(e.algo.data(), &plan->exec.algo, sizeof(e.algo));
    }
    f.entries.push_back(e);
  }
  for (const auto& [key, e] : from_file_) f.entries.push_back(e);  // not used by this process
  try {
    write_gemm_plan_file(plan_file_, f);
    ++file_stats_.saves;
  } catch (const std::exception& e) {
    warn(fmt::format("{}; GEMM plans are not persisted in this process", e.what()));
    plan_file_.clear();
  }
}

std::vector<LtGemm::KRun> LtGemm::k_runs(int64_t n, int64_t k) const {
  std::vector<KRun> out;
  if (operands_ == LtOperands::kFp8E4M3) {
    const int64_t runs = std::max<int32_t>(1, fp8_runs_(n, k));
    const int64_t per = ((k + 127) / 128 + runs - 1) / runs * 128;
    for (int64_t k0 = 0; k0 < k; k0 += per) out.push_back({k0, std::min(per, k - k0)});
    return out;
  }
  const int64_t splits = gemm_split_count(n, k);
  for (int64_t s = 0; s < splits; ++s) out.push_back({s * (k / splits), k / splits});
  return out;
}

LtGemm::Exec LtGemm::exec(bool chain, int splits, const cublasLtMatmulAlgo_t& algo, int64_t n,
                          int64_t k) const {
  Exec e{chain, splits, algo, "", {}};
  e.calls = chain ? k_runs(n, k) : std::vector<KRun>{{0, k}};
  return e;
}

std::vector<int64_t> LtGemm::call_extents(const Exec& e) {
  std::vector<int64_t> out;
  for (const KRun& r : e.calls)
    if (std::find(out.begin(), out.end(), r.kz) == out.end()) out.push_back(r.kz);
  return out;
}

cudaError_t LtGemm::reference(const Session& s, int32_t m, Weight w, int64_t n, int64_t k,
                              float* y) {
  if (operands_ == LtOperands::kFp8E4M3)
    return fp8_kernel_(s.xin.as<uint8_t>(), s.x_scale.as<float>(), m,
                       static_cast<const uint8_t*>(w.w), w.scale, n, k, y);
  return kernel_(s.x32.as<float>(), m, static_cast<const uint16_t*>(w.w), n, k, y);
}

cudaError_t LtGemm::launch(cublasLtMatmulDesc_t op, const Exec& e, Acts x, int32_t m, Weight w,
                           int64_t n, int64_t k, float* y) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t eb = operand_bytes(operands_);
  const auto* wb = static_cast<const char*>(w.w);
  const auto* xb = static_cast<const char*>(x.x);
  // y = acc + beta · y over each call's [k0, k0 + kz): beta 0 first, then 1 — ((p0 + p1) +
  // p2) + … The layouts are made again only where the extent changes (an FP8 last run).
  std::unique_ptr<Layouts> l;
  for (size_t i = 0; i < e.calls.size(); ++i) {
    const KRun& r = e.calls[i];
    if (!l || (i > 0 && r.kz != e.calls[i - 1].kz))
      l = std::make_unique<Layouts>(operand_type(operands_), m, n, r.kz, k);
    if (cublasLtMatmul(lt_, op, &one, wb + r.k0 * eb, l->a, xb + r.k0 * eb, l->b,
                       i == 0 ? &zero : &one, y, l->c, y, l->c, &e.algo, workspace_,
                       workspace_bytes_, stream_) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
  }
  if (operands_ == LtOperands::kFp8E4M3)  // the rule's epilogue: · x_scale[r] · w_scale[c]
    return launch_fp8_scale_outer(y, x.scale, w.scale, m, n, stream_);
  return cudaSuccess;
}

std::unique_ptr<LtGemm::Plan> LtGemm::new_plan(int64_t n, int64_t k, int32_t bucket) const {
  auto plan = std::make_unique<Plan>();
  lt_check(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
           "transa");
  lt_check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)),
           "transb");
  if (operands_ == LtOperands::kFp8E4M3) {  // fp32 promotion of the FP8 partial sums
    const int8_t fast_accum = 0;
    lt_check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                            sizeof(fast_accum)),
             "fast accumulation off");
  }
  LtPlanReport& rep = plan->report;
  rep.operands = operands_;
  rep.n = n;
  rep.k = k;
  rep.bucket = bucket;
  rep.tuned_m =
      static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(bucket, kMaxTuneOutput / n)));
  rep.choice = "invariant-kernel";
  return plan;
}

double LtGemm::time_us(Session& s, const std::function<cudaError_t()>& call) {
  double best = std::numeric_limits<double>::infinity();
  if (call() != cudaSuccess || call() != cudaSuccess) return best;
  for (int r = 0; r < kTimedRuns; ++r) {
    cudaEventRecord(s.e0, stream_);
    const cudaError_t err = call();
    cudaEventRecord(s.e1, stream_);
    cudaEventSynchronize(s.e1);
    if (err != cudaSuccess) return std::numeric_limits<double>::infinity();
    float ms = 0;
    cudaEventElapsedTime(&ms, s.e0, s.e1);
    best = std::min(best, 1000.0 * ms);
  }
  return best;
}

std::vector<cublasLtMatmulAlgo_t> LtGemm::heuristic_algos(const Plan& p, int32_t m,
                                                          int64_t kk) const {
  const int64_t n = p.report.n, k = p.report.k;
  Layouts l(operand_type(operands_), m, n, kk, k);
  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_bytes_, sizeof(workspace_bytes_)),
           "preference workspace");
  std::vector<cublasLtMatmulHeuristicResult_t> r(kHeuristics);
  int got_n = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.op, l.a, l.b, l.c, l.c, pref,
                                                           kHeuristics, r.data(), &got_n);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < got_n; ++i)
      if (r[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
        out.push_back(r[static_cast<size_t>(i)].algo);
  return out;
}

bool LtGemm::configure(const Plan& p, cublasLtMatmulAlgo_t& a, uint32_t splitk,
                       uint32_t reduction, int32_t m, const std::vector<int64_t>& kks) const {
  if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                           sizeof(splitk)) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                           sizeof(reduction)) != CUBLAS_STATUS_SUCCESS)
    return false;
  return std::all_of(kks.begin(), kks.end(),
                     [&](int64_t kk) { return algo_usable(p, a, m, kk); });
}

bool LtGemm::algo_usable(const Plan& p, const cublasLtMatmulAlgo_t& a, int32_t m,
                         int64_t kk) const {
  Layouts l(operand_type(operands_), m, p.report.n, kk, p.report.k);
  cublasLtMatmulHeuristicResult_t res{};
  return cublasLtMatmulAlgoCheck(lt_, p.op, l.a, l.b, l.c, l.c, &a, &res) ==
             CUBLAS_STATUS_SUCCESS &&
         res.workspaceSize <= workspace_bytes_;
}

// Candidates: heuristic algorithms of the whole problem — unsplit for one run; for S equal
// runs (bf16) with split-K forced to S (each reduction scheme) — and of one run, unsplit, for
// the chain (the FP8 runs differ in length: every run's extent must be accepted).
std::vector<LtGemm::Exec> LtGemm::candidates(const Plan& p, int32_t m) const {
  const int64_t n = p.report.n, k = p.report.k;
  const std::vector<KRun> runs = k_runs(n, k);
  const int splits = static_cast<int>(runs.size());
  std::vector<Exec> out;
  if (splits == 1 || operands_ == LtOperands::kBf16)
    for (const auto& a0 : heuristic_algos(p, m, k)) {
      if (splits == 1) {
        Exec e = exec(false, 1, a0, n, k);
        if (configure(p, e.algo, 1, CUBLASLT_REDUCTION_SCHEME_NONE, m, {k})) out.push_back(e);
        continue;
      }
      for (uint32_t red :
           {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE}) {
        Exec e = exec(false, splits, a0, n, k);
        if (configure(p, e.algo, static_cast<uint32_t>(splits), red, m, {k})) out.push_back(e);
      }
    }
  if (splits > 1)
    for (const auto& a0 : heuristic_algos(p, m, runs.front().kz)) {
      Exec e = exec(true, splits, a0, n, k);
      if (configure(p, e.algo, 1, CUBLASLT_REDUCTION_SCHEME_NONE, m, call_extents(e)))
        out.push_back(e);
    }
  for (Exec& e : out) e.text = (e.chain ? "lt-chain " : "lt-splitk ") + algo_text(e.algo);
  return out;
}

bool LtGemm::bit_equal(const Plan& p, const Exec& e, Session& s, Weight w) {
  const int64_t n = p.report.n, k = p.report.k;
  cudaMemsetAsync(s.y.p, 0xff, size_t(s.m) * n * 4, stream_);  // NaN: a skipped write shows
  if (launch(p.op, e, s.acts(), s.m, w, n, k, s.y.as<float>()) != cudaSuccess) return false;
  if (!s.same_as_reference(stream_, s.m, n)) return false;
  // And at a second M of the bucket: an execution whose K order followed M (stream-K,
  // occupancy-chosen splits) would show here; the kernel's rows are the same at any M.
  if (s.m2 < s.m) {
    cudaMemsetAsync(s.y.p, 0xff, size_t(s.m2) * n * 4, stream_);
    if (launch(p.op, e, s.acts(), s.m2, w, n, k, s.y.as<float>()) != cudaSuccess) return false;
    if (!s.same_as_reference(stream_, s.m2, n)) return false;
  }
  return true;
}

LtGemm::Sweep LtGemm::sweep(const Plan& p, const Exec& e, Session& s, Weight w) {
  const int64_t n = p.report.n, k = p.report.k;
  Sweep out;
  out.granule = tile_granule(e.algo);
  const std::vector<int32_t> ms = gemm_sweep_ms(std::min(s.m2, s.m), s.m, out.granule);
  out.n_ms = static_cast<int32_t>(ms.size());
  // One flag over the whole sweep (read once); on a failure, the sweep again m by m to name m.
  auto run = [&](size_t from, size_t to) {
    cu_check(cudaMemsetAsync(s.differ.p, 0, sizeof(uint32_t), stream_), "sweep flag");
    for (size_t i = from; i <= to; ++i) {
      const int32_t m = ms[i];
      cudaMemsetAsync(s.y.p, 0xff, size_t(m) * n * 4, stream_);  // NaN: a skipped write shows
      if (launch(p.op, e, s.acts(), m, w, n, k, s.y.as<float>()) != cudaSuccess) return false;
      cu_check(launch_any_word_differs(s.y.p, s.y_ref.p, int64_t{m} * n, s.differ.as<uint32_t>(),
                                       stream_, /*reset=*/false),
               "sweep comparison");
    }
    uint32_t host = 1;
    cu_check(cudaMemcpyAsync(&host, s.differ.p, sizeof(host), cudaMemcpyDeviceToHost, stream_),
             "sweep flag download");
    cu_check(cudaStreamSynchronize(stream_), "sweep sync");
    return host == 0;
  };
  if (run(0, ms.size() - 1)) return out;
  out.first_differing_m = s.m;  // failed as a whole, never alone (a launch error): refuse it
  for (size_t i = 0; i < ms.size(); ++i)
    if (!run(i, i)) {
      out.first_differing_m = ms[i];
      break;
    }
  return out;
}

void LtGemm::tune_fully(Plan& p, Session& s, Weight w) {
  LtPlanReport& rep = p.report;
  const int64_t n = rep.n, k = rep.k;
  rep.kernel_us = time_us(s, [&] { return reference(s, s.m, w, n, k, s.y.as<float>()); });
  rep.chosen_us = rep.kernel_us;
  std::vector<std::pair<double, Exec>> passed;  // (µs at tuned_m, execution)
  for (Exec& c : candidates(p, s.m)) {
    ++rep.candidates;
    if (!bit_equal(p, c, s, w)) continue;
    ++rep.bit_equal;
    const double us =
        time_us(s, [&] { return launch(p.op, c, s.acts(), s.m, w, n, k, s.y.as<float>()); });
    if (us < rep.kernel_us) passed.emplace_back(us, c);
  }
  std::stable_sort(passed.begin(), passed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [us, c] : passed) {  // the fastest that holds at every m swept
    const Sweep sw = sweep(p, c, s, w);
    if (sw.first_differing_m != 0) {
      if (rep.swept_out++ == 0) rep.first_swept_out_m = sw.first_differing_m;
      continue;
    }
    rep.chosen_us = us;
    rep.choice = c.text;
    rep.sweep_granule = sw.granule;
    rep.swept_ms = sw.n_ms;
    p.use_lt = true;
    p.exec = c;
    break;
  }
}

std::unique_ptr<LtGemm::Plan> LtGemm::plan_from_file(Weight w, int64_t n, int64_t k,
                                                     int32_t bucket) {
  const auto it = from_file_.find({n, k, bucket});
  if (it == from_file_.end()) return nullptr;
  const GemmPlanEntry e = it->second;
  from_file_.erase(it);  // used or rejected: the file gets this process's plan instead
  auto plan = new_plan(n, k, bucket);
  auto reject = [&](std::string_view why) {
    ++file_stats_.rejected;
    warn(fmt::format("GEMM plan {}x{} M<={} from {} rejected ({}); tuning it again", k, n,
                     bucket, plan_file_, why));
    return nullptr;
  };
  const int splits = static_cast<int>(k_runs(n, k).size());
  if (e.splits != splits)
    return reject(fmt::format("split count {}, the shape's is {}", e.splits, splits));
  if (e.tile_runs != (operands_ == LtOperands::kFp8E4M3))
    return reject(e.tile_runs ? "FP8 tile runs in a bf16 plan" : "equal slices in an FP8 plan");
  plan->report.from_file = true;
  if (!e.use_lt) {  // the invariant kernel is the reference itself: nothing to verify
    ++file_stats_.kernel_from_file;
    return plan;
  }
  cublasLtMatmulAlgo_t algo{};
  static_assert(sizeof(algo) == sizeof(e.algo), "cublasLtMatmulAlgo_t is 8 uint64");
  std::memcpy(&algo, e.algo.data(), sizeof(algo));
  Exec x = exec(e.chain, e.splits, algo, n, k);
  // The algorithm must be one the planner could have chosen: split-K as the shape's S (1 per
  // chained call), a reduction scheme that goes with it, accepted by cuBLASLt for this problem.
  uint32_t splitk = 0, red = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&x.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                           sizeof(splitk), &written) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigGetAttribute(&x.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                           sizeof(red), &written) != CUBLAS_STATUS_SUCCESS)
    return reject("unreadable algorithm");
  const uint32_t want_splitk = x.chain ? 1u : static_cast<uint32_t>(splits);
  const bool red_ok = want_splitk == 1 ? red == CUBLASLT_REDUCTION_SCHEME_NONE
                                       : (red == CUBLASLT_REDUCTION_SCHEME_INPLACE ||
                                          red == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  if (splitk != want_splitk || !red_ok)
    return reject(fmt::format("algorithm with split-K {} and reduction {}", splitk, red));
  for (int64_t kk : call_extents(x))
    if (!algo_usable(*plan, x.algo, plan->report.tuned_m, kk))
      return reject("cuBLASLt refuses the algorithm");
  x.text = (x.chain ? "lt-chain " : "lt-splitk ") + algo_text(x.algo);
  Session s(*this, w, n, k, bucket, plan->report.tuned_m);
  if (!bit_equal(*plan, x, s, w)) return reject("its output bits differ from the kernel's");
  const Sweep sw = sweep(*plan, x, s, w);
  if (sw.first_differing_m != 0)
    return reject(
        fmt::format("its output bits differ from the kernel's at m = {}", sw.first_differing_m));
  ++file_stats_.reverified;
  plan->report.sweep_granule = sw.granule;
  plan->report.swept_ms = sw.n_ms;
  plan->report.candidates = 1;
  plan->report.bit_equal = 1;
  plan->report.choice = x.text;
  plan->use_lt = true;
  plan->exec = x;
  return plan;
}

LtGemm::Plan& LtGemm::tune(Weight w, int64_t n, int64_t k, int32_t bucket) {
  std::unique_ptr<Plan> plan = plan_from_file(w, n, k, bucket);
  const bool tuned = plan == nullptr;
  if (tuned) {
    plan = new_plan(n, k, bucket);
    Session s(*this, w, n, k, bucket, plan->report.tuned_m);
    tune_fully(*plan, s, w);
    ++file_stats_.tuned;
  }
  cu_check(cudaGetLastError(), "tuning");
  auto& slot = plans_[{n, k, bucket}];
  slot = std::move(plan);
  if (tuned && !plan_file_.empty()) save_plan_file();
  return *slot;
}

bool LtGemm::prefers(int32_t m, Weight w, int64_t n, int64_t k) {
  const auto it = plans_.find({n, k, lt_bucket(m)});
  if (it != plans_.end()) return it->second->use_lt;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cu_check(cudaStreamIsCapturing(stream_, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) return false;  // no tuning inside a graph
  return tune(w, n, k, lt_bucket(m)).use_lt;
}

bool LtGemm::run_plan(Acts x, int32_t m, Weight w, int64_t n, int64_t k, float* y) {
  const auto it = plans_.find({n, k, lt_bucket(m)});
  if (it == plans_.end() || !it->second->use_lt) return false;
  return launch(it->second->op, it->second->exec, x, m, w, n, k, y) == cudaSuccess;
}

bool LtGemm::prefers_lt(int32_t m, const uint16_t* w, int64_t n, int64_t k) {
  check(operands_ == LtOperands::kBf16, "LtGemm: a bf16 GEMM asked of the FP8 planner");
  return prefers(m, {w, nullptr}, n, k);
}

bool LtGemm::run(const uint16_t* x_bf16, int32_t m, const uint16_t* w, int64_t n, int64_t k,
                 float* y) {
  check(operands_ == LtOperands::kBf16, "LtGemm: a bf16 GEMM asked of the FP8 planner");
  return run_plan({x_bf16, nullptr}, m, {w, nullptr}, n, k, y);
}

bool LtGemm::prefers_lt(int32_t m, const uint8_t* w, const float* w_scale, int64_t n, int64_t k) {
  check(operands_ == LtOperands::kFp8E4M3, "LtGemm: an FP8 GEMM asked of the bf16 planner");
  return prefers(m, {w, w_scale}, n, k);
}

bool LtGemm::run(const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
                 const float* w_scale, int64_t n, int64_t k, float* y) {
  check(operands_ == LtOperands::kFp8E4M3, "LtGemm: an FP8 GEMM asked of the bf16 planner");
  return run_plan({xq, x_scale}, m, {w, w_scale}, n, k, y);
}

}  // namespace detllm::kernels::cuda
