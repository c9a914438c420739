// LlmSession (llm_session.h): model + backend + engine behind one object for the Python
// package. The batch loop is Engine::step() until every request has finished, as the server's
// engine thread runs it; results are collected from the engine's callbacks.
#include "api/llm_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "api/weight_update.h"
#include "backends/backends.h"
#include "core/error.h"
#include "core/hash.h"
#include "determinism/fingerprint.h"
#include "determinism/modes.h"
#include "verify/self_check.h"
#include "engine/engine.h"
#include "model/bundle.h"
#include "model/kv_storage.h"

namespace detllm::api {

struct LlmSession::State {
  SessionOptions options;
  ModelBundle bundle;
  backends::Backend backend;  // its ops moved into bundle.ops; names kept for the fingerprint
  engine::EngineConfig config;
  std::unique_ptr<engine::Engine> engine;
  std::string weight_version;
  std::string self_check_summary;
  uint64_t weights_hash = 0;  // of the loaded file; replaced by the version after an update
  // One call at a time: the GIL is released while the engine runs, so two Python threads may
  // call in together; the second waits here.
  std::mutex busy;
};

namespace {

int32_t default_threads() { return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

LlmSession::LlmSession(const SessionOptions& o) : s_(std::make_unique<State>()) {
  s_->options = o;
  const int32_t threads = o.threads > 0 ? o.threads : default_threads();
  backends::BackendOptions bo;
  bo.backend = o.backend;
  bo.mode = o.mode;
  bo.device = o.device;
  const DeterminismMode mode = parse_determinism_mode(o.mode);
  engine::EngineConfig& cfg = s_->config;
  apply_mode(mode, cfg);
  // The backend first: a missing GPU fails before the (slow) model load.
  s_->backend = backends::make_backend(bo, mode_info(mode).backend, threads);
  s_->bundle = open_model_bundle(o.model, threads);
  // Weights are written in place by update_weights (host fp32 is the source of truth), so a
  // GGUF's blocks are widened here, before the backend's forward takes pointers into them
  // (the same values: the logits do not change). install_backend builds that forward.
  s_->bundle.llama.reset();
  dequantize_weights(s_->bundle.model->weights);
  backends::install_backend(s_->bundle, s_->backend);
  s_->weights_hash = s_->bundle.model->weights_hash;

  if (o.max_tokens_per_step > 0) cfg.scheduler.max_tokens_per_step = o.max_tokens_per_step;
  if (o.max_seqs > 0) cfg.scheduler.max_seqs = o.max_seqs;
  cfg.scheduler.kv.enable_prefix_cache = o.prefix_cache;
  cfg.policy.deterministic_by_default = o.deterministic;
  if (!o.self_check) cfg.policy.self_check = false;
  if (cfg.policy.self_check) {
    const SelfCheckReport report =
        run_self_check(s_->bundle.llama->ops(),
                       self_check_options_for(s_->bundle.model->config, cfg.scheduler.kv.block_size));
    s_->self_check_summary = report.summary();
    cfg.self_check = SelfCheckVerdict::of(report);
  } else {
    s_->self_check_summary = "off";
    cfg.self_check = SelfCheckVerdict::disabled();
  }
  s_->bundle.llama->prepare_gemms(cfg.scheduler.max_tokens_per_step);
  if (o.kv_cache_tokens > 0) {
    cfg.kv_cache_tokens = o.kv_cache_tokens;
  } else if (const size_t free = s_->bundle.ops->device_memory_free(); free > 0) {
    cfg.kv_cache_tokens = KvStorage::tokens_for_memory(
        s_->bundle.model->config, s_->bundle.ops->kv_dtype(), free, cfg.gpu_memory_fraction,
        cfg.scheduler.kv.block_size);
  }
  build_engine();
}

LlmSession::~LlmSession() {
  if (s_) s_->engine.reset();  // before the model it refers to
}

void LlmSession::build_engine() {
  s_->engine.reset();
  s_->engine = std::make_unique<engine::Engine>(*s_->bundle.llama, s_->config,
                                                s_->bundle.tokenizer.get());
}

std::vector<RequestOutput> LlmSession::generate(std::vector<GenerateRequest> requests,
                                                const ProgressFn& progress) {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(sleep_level_ == 0, "the engine is asleep (sleep() was called): call wake() first");
  engine::Engine& eng = *s_->engine;
  check(!eng.has_work(), "the engine still holds requests of an interrupted call");
  const int64_t steps_before = eng.stats().n_steps;
  std::vector<RequestOutput> out(requests.size());
  std::unordered_map<engine::RequestId, size_t> index;
  int64_t n_finished_requests = 0;
  std::vector<int32_t> live(requests.size(), 0);
  std::vector<engine::RequestId> ids;
  try {
    for (size_t i = 0; i < requests.size(); ++i) {
      GenerateRequest& g = requests[i];
      RequestOutput& r = out[i];
      r.prompt_token_ids = g.prompt;
      r.seed = g.sampling.seed;
      r.outputs.resize(static_cast<size_t>(std::max(g.n, 1)));
      live[i] = std::max(g.n, 1);
      engine::Request req;
      req.prompt = std::move(g.prompt);
      req.sampling = g.sampling;
      req.max_tokens = g.max_tokens;
      req.n = g.n;
      req.stop_token_ids = std::move(g.stop_token_ids);
      req.stop = std::move(g.stop);
      req.ignore_eos = g.ignore_eos;
      req.prompt_logprobs = g.prompt_logprobs;
      engine::RequestCallbacks cb;
      cb.on_token = [&r](const engine::TokenEvent& e) {
        SampleOutput& s = r.outputs.at(static_cast<size_t>(e.sample_index));
        s.token_ids.push_back(e.token);
        s.logprobs.push_back(e.logprob);
        s.top_logprobs.push_back(e.top_logprobs);
      };
      cb.on_prompt_logprobs = [&r](std::span<const engine::PromptLogprob> lp) {
        r.prompt_logprobs.assign(lp.begin(), lp.end());
      };
      cb.on_finish = [&r, &live, &n_finished_requests, i](int32_t k, engine::FinishReason f,
                                                          const engine::Usage& u) {
        SampleOutput& s = r.outputs.at(static_cast<size_t>(k));
        s.finish_reason = std::string(engine::finish_reason_name(f));
        s.usage = u;
        if (--live[i] == 0) ++n_finished_requests;
      };
      ids.push_back(eng.add_request(std::move(req), std::move(cb)));
    }
    const int64_t total = static_cast<int64_t>(requests.size());
    while (eng.step()) {
      if (progress && !progress(n_finished_requests, total)) throw_error("generate: interrupted");
    }
  } catch (...) {
    for (engine::RequestId id : ids) eng.abort(id);
    eng.run_until_idle();
    throw;
  }
  for (auto& r : out) {
    for (auto& s : r.outputs) s.text = s_->bundle.tokenizer->decode(s.token_ids, true);
  }
  last_steps_ = eng.stats().n_steps - steps_before;
  return out;
}

void LlmSession::update_weights(std::span<const NamedTensor> tensors, const std::string& version) {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(!version.empty(), "update_weights: give a version (e.g. the training step): the "
                          "fingerprint carries it instead of a hash of the weights");
  ModelWeights& w = s_->bundle.model->weights;
  const std::vector<ParameterSlot> slots = parameter_slots(s_->bundle.model->config, w);
  // Device tensors come to the host first (the host fp32 weights are the source of truth).
  std::vector<std::vector<std::byte>> staged(tensors.size());
  std::vector<WeightSource> sources;
  sources.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const NamedTensor& t = tensors[i];
    WeightSource src{t.name, t.shape, t.dtype, t.data};
    if (t.on_device) {
      check(!s_->bundle.ops->host_memory(),
            "update_weights: {} is in device memory but the backend is {}: pass a host tensor "
            "(.cpu())", t.name, s_->bundle.ops->name());
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      const size_t elem = t.dtype == "float32" ? 4 : t.dtype == "float64" ? 8 : 2;
      staged[i].resize(static_cast<size_t>(n) * elem);
      s_->bundle.ops->download(staged[i].data(), t.data, staged[i].size());
      src.data = staged[i].data();
    }
    sources.push_back(std::move(src));
  }
  write_weights(slots, sources);  // throws (writing nothing) on any bad name, shape or dtype
  s_->engine.reset();
  if (!s_->bundle.ops->host_memory() && sleep_level_ < 2) {
    // Device backends hold their own (converted) copy: place the new weights again.
    s_->bundle.llama.reset();
    s_->bundle.llama = std::make_unique<LlamaModel>(s_->bundle.model->config,
                                                    s_->bundle.model->weights, *s_->bundle.ops);
    s_->bundle.llama->prepare_gemms(s_->config.scheduler.max_tokens_per_step);
  }
  // The fingerprint's weight identity: the caller's version, keyed to the file it started from.
  const Hash128 h = hash_bytes(std::as_bytes(std::span(version.data(), version.size())),
                               s_->bundle.model->weights_hash);
  s_->weights_hash = h.lo;
  s_->weight_version = version;
  if (sleep_level_ == 0) build_engine();  // a new KV pool: no block of the old weights is reused
}

std::vector<std::pair<std::string, std::vector<int64_t>>> LlmSession::parameter_shapes() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& s : parameter_slots(s_->bundle.model->config, s_->bundle.model->weights))
    out.emplace_back(s.name, s.shape);
  return out;
}

void LlmSession::read_parameter(const std::string& name, float* dst, size_t numel) const {
  std::lock_guard<std::mutex> lock(s_->busy);
  for (const auto& s : parameter_slots(s_->bundle.model->config, s_->bundle.model->weights)) {
    if (s.name != name) continue;
    check(static_cast<size_t>(s.numel()) == numel, "{}: has {} elements, not {}", name,
          s.numel(), numel);
    std::memcpy(dst, s.data, numel * sizeof(float));
    return;
  }
  throw_error("{}: not a parameter of this model (LLM.parameter_names() lists them)", name);
}

void LlmSession::sleep(int level) {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(level == 1 || level == 2, "sleep(level={}): level is 1 (free the KV pool) or 2 (also "
                                  "the backend's copy of the weights)", level);
  check(sleep_level_ == 0, "already asleep: call wake() first");
  s_->engine.reset();
  if (level == 2 && !s_->bundle.ops->host_memory()) s_->bundle.llama.reset();
  sleep_level_ = level;
}

void LlmSession::wake() {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(sleep_level_ > 0, "wake(): the engine is not asleep");
  if (!s_->bundle.llama) {
    s_->bundle.llama = std::make_unique<LlamaModel>(s_->bundle.model->config,
                                                    s_->bundle.model->weights, *s_->bundle.ops);
    s_->bundle.llama->prepare_gemms(s_->config.scheduler.max_tokens_per_step);
  }
  sleep_level_ = 0;
  build_engine();
}

std::string LlmSession::fingerprint() const {
  FingerprintInputs fin;
  fin.weights_hash = s_->weights_hash;
  fin.backend = s_->backend.fingerprint_name;
  fin.backend_build = s_->backend.build;
  fin.numerics_mode = std::string(fingerprint_mode_name(s_->config.policy, true));
  return numerics_fingerprint(fin);
}

std::string LlmSession::weight_version() const { return s_->weight_version; }
std::string LlmSession::model_name() const { return s_->bundle.model->name; }
std::string LlmSession::backend_description() const { return s_->backend.description; }
std::string LlmSession::self_check_summary() const { return s_->self_check_summary; }
const ModelConfig& LlmSession::config() const { return s_->bundle.model->config; }
const Tokenizer& LlmSession::tokenizer() const { return *s_->bundle.tokenizer; }
int32_t LlmSession::max_model_len() const {
  return s_->engine ? s_->engine->config().max_model_len : s_->config.resolved(config()).max_model_len;
}

}  // namespace detllm::api
