// LlmSession (llm_session.h): model + backend + engine behind one object for the Python
// package. The batch loop is Engine::step() until every request has finished, as the server's
// engine thread runs it; results are collected from the engine's callbacks.
#include "api/llm_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>
#include <thread>
#include <unordered_map>

#include "model/weight_update.h"
#include "backends/backends.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/parallel.h"
#include "determinism/fingerprint.h"
#include "determinism/modes.h"
#include "determinism/policy.h"
#include "verify/self_check.h"
#include "engine/bad_words.h"
#include "engine/engine.h"
#include "model/bundle.h"
#include "model/fp8_weights.h"
#include "model/kv_storage.h"
#include "model/synthetic.h"
#include "structured/grammar_spec.h"
#include "tokenizer/tokenizer.h"
#if DETLLM_HAVE_GRAMMAR
#include "structured/grammar_constraint.h"
#endif

namespace detllm::api {

struct LlmSession::State {
  SessionOptions options;
  ModelBundle bundle;
  backends::Backend backend;
  ModelBundle draft;  // the speculative draft model (draft_model), on a backend like the target's
  backends::Backend draft_backend;  // its ops moved into bundle.ops; names kept for the fingerprint
  engine::EngineConfig config;
  std::unique_ptr<engine::Engine> engine;
  std::string weight_version;
  std::string self_check_summary;
  uint64_t weights_hash = 0;  // of the loaded file; replaced by the version after an update
  // False for a synthetic model generated in device memory: its weights exist only there.
  bool host_copy = true;
  std::vector<ParameterSlot> slots;  // every parameter by HF name (parameter_slots)
  // The FP8 class of a model whose projections are FP8 rows (quantization "fp8" or an FP8
  // checkpoint; model/fp8_weights.h), "" otherwise. Its slots hold no host values: the rows
  // are codes and scales, so update_weights and read_parameter are refused by name.
  std::string fp8_class;
  // Parameters (LlamaModel::Param, layer) whose device values are newer than the host copy:
  // written device to device by update_weights; the host copy is refreshed from the device
  // (bf16 widened: exact) when someone reads it (read_parameter, sleep(2)).
  std::set<std::tuple<int, int32_t, int32_t>> host_stale;
  // CPU backend, GGUF blocks: the forward reads the blocks as the file stores them (as `detllm
  // generate`/`bench` do: a Q4_1 matrix is 1/6 of the bytes of its fp32 widening, and a
  // decode step reads every weight once), and `f32` holds the widened values the slots point
  // into (the same values: the logits do not change). The first update_weights moves `f32` into
  // the model and rebuilds the forward on it; from then on the forward computes in place on the
  // host fp32 weights. Null when the forward already computes on fp32 (or on a device).
  std::unique_ptr<ModelWeights> f32;
  // Structured output: compiles a request's grammar for this vocabulary (built on first use;
  // empty in a build without the grammar engine).
  structured::ConstraintCompileFn compile_grammar;
  bool grammar_ready = false;
  // One call at a time: the GIL is released while the engine runs, so two Python threads may
  // call in together; the second waits here.
  std::mutex busy;
};

namespace {

int32_t default_threads() { return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())); }

constexpr std::string_view kSyntheticPrefix = "synthetic:";
constexpr uint64_t kSyntheticWeightSeed = 1;  // as `detllm bench` (cli/bench_cmd.cpp)

// Whether a matrix of w is held in a GGUF block type (Q4_1, Q8_0, ...), whose CPU matmul
// decodes the blocks in registers with the fp32 weights' logits (FP8 rows are another
// numerics class: not these).
bool has_stored_blocks(ModelWeights& w) {
  auto stored = [](const HostTensor& t) { return !t.empty() && dtype_is_block(t.dtype) && !dtype_is_fp8(t.dtype);
  };
  if (stored(w.tok_embd) || stored(w.lm_head.w)) return true;
  for (LayerWeights& l : w.layers) {
    for (Linear* lin : l.matrices()) {
      if (stored(lin->w)) return true;
    }
  }
  return false;
}

// vLLM's kv_cache_dtype onto the backend's --kv-dtype (parse_kv_dtype's names): "fp8_e4m3" is
// vLLM's long name for the E4M3 cache; fp8_e5m2 and anything else are refused by name.
std::string kv_dtype_option(const std::string& v) {
  const std::string name = v == "fp8_e4m3" ? "fp8" : v;
  try {
    parse_kv_dtype(name);
  } catch (const Error& e) {
    throw Error(fmt::format("kv_cache_dtype='{}': {} (fp8_e4m3 is fp8; an FP8 E5M2 cache is not "
                            "offered)", v, e.what()));
  }
  return name;
}

std::tuple<int, int32_t, int32_t> param_key(const ParameterSlot& s) {
  return {static_cast<int>(s.param), s.layer, s.expert};
}

// fp32 values → bf16 on every core (each element's rounding is the same on any thread).
void round_to_bf16(const float* src, uint16_t* dst, size_t n) {
  const size_t n_parts = std::max<size_t>(1, n >> 20);
  parallel_each(n_parts, n_parts, [&](size_t part) {
    const size_t begin = n * part / n_parts, end = n * (part + 1) / n_parts;
    for (size_t i = begin; i < end; ++i) dst[i] = f32_to_bf16(src[i]);
  });
}

DType source_dtype(const std::string& name) {
  if (name == "float32") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  return DType::kF16;
}

// A synthetic model (model/synthetic.h, "synthetic:NAME"): on a host backend its weights are
// made on the host; on a device backend they are generated in device memory (Llama-3.1-8B:
// 16 GB of bf16, no host copy). No tokenizer: prompts are token ids.
void open_synthetic(ModelBundle& b, backends::Backend& backend, const std::string& model,
                    bool& host_copy) {
  const std::string name = model.substr(kSyntheticPrefix.size());
  const ModelConfig c = synthetic_config(name);  // lists the names when unknown
  auto m = std::make_unique<LoadedModel>();
  m->path = model;
  m->name = model;
  m->format = ModelFormat::kHuggingFace;
  m->config = c;
  const Hash128 h = hash_bytes(std::as_bytes(std::span(model.data(), model.size())),
                               kSyntheticWeightSeed);
  m->weights_hash = h.lo;
  b.model = std::move(m);
  b.ops = std::move(backend.ops);
  if (b.ops->host_memory()) {
    check(name.starts_with("tiny-"),
          "{} needs a device backend (backend=\"cuda\"): its fp32 weights would take tens of "
          "GB of host memory (use synthetic:tiny-llama on the CPU)", model);
    b.model->weights = make_synthetic_weights(c, kSyntheticWeightSeed);
    b.llama = std::make_unique<LlamaModel>(c, b.model->weights, *b.ops);
    host_copy = true;
  } else {
    b.llama = std::make_unique<LlamaModel>(c, synthetic_recipe(c, kSyntheticWeightSeed), *b.ops);
    host_copy = false;
  }
}

// A request's structured-output fields as a GrammarSpec; none when it has none.
std::optional<structured::GrammarSpec> grammar_spec_of(const GenerateRequest& g) {
  const std::string& k = g.structured_kind;
  if (k.empty()) return std::nullopt;
  // Not strict, as the server's structured_outputs.json and guided_json.
  if (k == "json") return structured::GrammarSpec::json_schema(g.structured_text, false);
  if (k == "json_object") return structured::GrammarSpec::json_object();
  if (k == "regex") return structured::GrammarSpec::regex(g.structured_text);
  if (k == "choice") return structured::GrammarSpec::choice(g.structured_choices);
  if (k == "grammar") return structured::GrammarSpec::ebnf(g.structured_text);
  throw_error("structured output: unknown kind '{}' (json, json_object, regex, choice, grammar)",
              k);
}

}  // namespace

std::shared_ptr<const structured::TokenConstraint> LlmSession::compile_grammar(
    const structured::GrammarSpec& spec) {
  if (!s_->grammar_ready) {
    check(s_->bundle.tokenizer != nullptr,
          "structured output needs the model's tokenizer (a synthetic model has none)");
#if DETLLM_HAVE_GRAMMAR
    s_->compile_grammar = structured::make_constraint_compiler(*s_->bundle.tokenizer,
                                                               s_->bundle.model->config.vocab_size);
#endif
    s_->grammar_ready = true;
  }
  check(static_cast<bool>(s_->compile_grammar),
        "structured output needs the grammar engine, and this build of detllm has none (build "
        "it with xgrammar: scripts/deps_xgrammar.sh, then reinstall)");
  return s_->compile_grammar(spec);  // a structured::GrammarError names what is wrong
}

LlmSession::LlmSession(const SessionOptions& o) : s_(std::make_unique<State>()) {
  s_->options = o;
  const int32_t threads = o.threads > 0 ? o.threads : default_threads();
  backends::BackendOptions bo;
  bo.backend = o.backend;
  bo.mode = o.mode;
  bo.device = o.device;
  bo.tensor_parallel = o.tensor_parallel;
  bo.quantization = o.quantization;
  bo.kv_dtype = kv_dtype_option(o.kv_cache_dtype);
  const DeterminismMode mode = parse_determinism_mode(o.mode);
  engine::EngineConfig& cfg = s_->config;
  // max_seqs before apply_mode: the padded mode pads decode steps to it.
  cfg.scheduler.max_seqs =
      o.max_seqs > 0 ? o.max_seqs : engine::default_max_seqs(o.backend == "cuda");
  apply_mode(mode, cfg);
  // The backend first: a missing GPU fails before the (slow) model load.
  s_->backend = backends::make_backend(bo, mode_info(mode).backend, threads);
  if (o.model.rfind(kSyntheticPrefix, 0) == 0) {
    check(o.tensor_parallel == 0, "tensor_parallel={}: a synthetic model has no host weights for "
          "the ranks to slice; load a model file (or leave tensor_parallel out)", o.tensor_parallel);
    open_synthetic(s_->bundle, s_->backend, o.model, s_->host_copy);
  } else {
    s_->bundle = open_model_bundle(o.model, threads);
    // Weights are written in place by update_weights (host fp32 is the source of truth), so a
    // GGUF's blocks are widened to fp32 (the same values: the logits do not change). On the
    // CPU the forward keeps reading the blocks until the first update (State::f32); a device
    // backend, or tensor parallelism (ranks slice fp32), gets the widened weights at once.
    s_->bundle.llama.reset();
    ModelWeights& w = s_->bundle.model->weights;
    if (has_fp8_weights(w)) {
      // An FP8 checkpoint keeps its rows: widened, it would run the dequantized forward (no
      // activation rounding), another numerics under the FP8 name. Its weights are not
      // updatable (update_weights refuses FP8 projections by name), so nothing needs fp32.
    } else if (o.backend == "cpu" && o.tensor_parallel == 0 && o.quantization.empty() &&
               has_stored_blocks(w)) {
      s_->f32 = std::make_unique<ModelWeights>(w);
      dequantize_weights(*s_->f32);
    } else {
      dequantize_weights(w);
    }
    backends::install_backend(s_->bundle, s_->backend);
  }
  ModelWeights* host = s_->f32 ? s_->f32.get() : &s_->bundle.model->weights;
  if (has_fp8_weights(s_->bundle.model->weights)) {
    s_->fp8_class = fp8_class_name(s_->bundle.model->weights);
  }
  s_->slots = parameter_slots(s_->bundle.model->config,
                              s_->host_copy && s_->fp8_class.empty() ? host : nullptr);
  s_->weights_hash = s_->bundle.model->weights_hash;

  engine::SpeculativeConfig& sc = cfg.speculative;
  sc.method = engine::parse_speculative_method(o.speculative_method);
  sc.num_speculative_tokens = o.num_speculative_tokens;
  sc.prompt_lookup_min = o.prompt_lookup_min;
  sc.prompt_lookup_max = o.prompt_lookup_max;
  sc.adaptive = o.speculative_adaptive;
  sc.model = o.speculative_model;
  if (sc.method == engine::SpeculativeMethod::kDraftModel) {
    check(!sc.model.empty(),
          "speculative method draft_model needs its model: give speculative_config={{'method': "
          "'draft_model', 'model': PATH, ...}}");
    check(s_->bundle.tokenizer != nullptr,
          "a draft model needs the target's tokenizer to compare with; this model has none");
    s_->draft_backend = backends::make_backend(bo, mode_info(mode).backend, threads);
    s_->draft = open_model_bundle(sc.model, threads);
    backends::install_backend(s_->draft, s_->draft_backend);
    const Tokenizer& target = *s_->bundle.tokenizer;
    const Tokenizer* draft = s_->draft.tokenizer.get();
    check(draft != nullptr && draft->vocab_size() == target.vocab_size(),
          "the draft model {} does not have the target's tokenizer: a draft model must share it",
          sc.model);
    for (int32_t id = 0; id < target.vocab_size(); ++id) {
      check(draft->id_to_token(id) == target.id_to_token(id),
            "the draft model {} has another vocabulary: token {} is '{}' there, '{}' in the "
            "target's; a draft model must share the target's tokenizer",
            sc.model, id, draft->id_to_token(id), target.id_to_token(id));
    }
  } else {
    check(sc.model.empty(),
          "a draft model ({}) was given but the speculative method is '{}': use method "
          "'draft_model', or give no model",
          sc.model, engine::speculative_method_name(sc.method));
  }
  if (o.max_tokens_per_step > 0) cfg.scheduler.max_tokens_per_step = o.max_tokens_per_step;
  cfg.scheduler.kv.enable_prefix_cache = o.prefix_cache;
  cfg.policy.deterministic_by_default = o.deterministic;
  if (!o.self_check) cfg.policy.self_check = false;
  if (cfg.policy.self_check) {
    const SelfCheckReport report =
        run_self_check(s_->bundle.engine_model().ops(),
                       self_check_options_for(s_->bundle.model->config, cfg.scheduler.kv.block_size,
                                              s_->bundle.engine_model().fp8_projections(),
                                              s_->bundle.engine_model().fp8_projection_rows()));
    s_->self_check_summary = report.summary();
    cfg.self_check = SelfCheckVerdict::of(report);
  } else {
    s_->self_check_summary = "off";
    cfg.self_check = SelfCheckVerdict::disabled();
  }
  LlamaModel& model = s_->bundle.engine_model();  // a TpGroup's leader with tensor_parallel
  model.prepare_gemms(cfg.scheduler.max_tokens_per_step);
  if (o.kv_cache_tokens > 0) {
    cfg.kv_cache_tokens = o.kv_cache_tokens;
  } else if (const size_t free = model.ops().device_memory_free(); free > 0) {
    cfg.kv_cache_tokens = KvStorage::tokens_for_memory(
        s_->bundle.kv_memory_config(), model.ops().kv_dtype(), free, cfg.gpu_memory_fraction,
        cfg.scheduler.kv.block_size);
  }
  build_engine();
}

LlmSession::~LlmSession() {
  if (s_) s_->engine.reset();  // before the model it refers to
}

void LlmSession::forward_on_host_f32() {
  if (!s_->f32) return;
  // The slots point into f32's buffers; moving the ModelWeights moves its vectors, whose
  // buffers (and so the slots' pointers) stay where they are.
  s_->engine.reset();       // it refers to the forward
  s_->bundle.llama.reset();  // it refers to the blocks
  s_->bundle.model->weights = std::move(*s_->f32);
  s_->f32.reset();
  s_->bundle.llama = std::make_unique<LlamaModel>(s_->bundle.model->config,
                                                  s_->bundle.model->weights, *s_->bundle.ops);
  s_->bundle.llama->prepare_gemms(s_->config.scheduler.max_tokens_per_step);
}

bool LlmSession::forward_reads_blocks() const { return s_->f32 != nullptr; }

void LlmSession::build_engine() {
  s_->engine.reset();
  s_->engine = std::make_unique<engine::Engine>(
      s_->bundle.engine_model(), s_->config, s_->bundle.tokenizer.get(),
      s_->draft.llama ? &s_->draft.engine_model() : nullptr);
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
      req.speculation = g.speculative;
      req.prompt_logprobs = g.prompt_logprobs;
      req.return_routed_experts = g.return_routed_experts;
      req.min_tokens = g.min_tokens;
      req.allowed_token_ids = std::move(g.allowed_token_ids);
      if (!g.bad_words.empty()) {
        check(s_->bundle.tokenizer != nullptr, "bad_words needs the model's tokenizer");
        req.bad_words = engine::bad_word_token_ids(*s_->bundle.tokenizer, g.bad_words);
      }
      if (const auto spec = grammar_spec_of(g)) req.constraint = compile_grammar(*spec);
      engine::RequestCallbacks cb;
      cb.on_token = [&r](const engine::TokenEvent& e) {
        SampleOutput& s = r.outputs.at(static_cast<size_t>(e.sample_index));
        s.token_ids.push_back(e.token);
        s.logprobs.push_back(e.logprob);
        s.top_logprobs.push_back(e.top_logprobs);
        if (!e.routed_experts.empty()) s.routed_experts.push_back(e.routed_experts);
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
  if (s_->bundle.tokenizer) {
    for (auto& r : out) {
      for (auto& s : r.outputs) s.text = s_->bundle.tokenizer->decode(s.token_ids, true);
    }
  }
  last_steps_ = eng.stats().n_steps - steps_before;
  return out;
}

void LlmSession::update_weights(std::span<const NamedTensor> tensors, const std::string& version) {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(!version.empty(), "update_weights: give a version (e.g. the training step): the "
                          "fingerprint carries it instead of a hash of the weights");
  check(s_->fp8_class.empty(), "update_weights: this model's projections are FP8 ({}), and "
        "updating them would mean quantizing the new weights here, which is not supported: for "
        "RL, load the bf16 checkpoint without quantization='fp8'", s_->fp8_class);
  // FP8 KV: the scales are bounded from the weights, so they are made again from the updated
  // host weights (LlamaModel::refresh_kv_scales), never from a batch; that needs the host copy.
  const bool kv_fp8 = s_->bundle.llama != nullptr && s_->bundle.llama->kv_fp8_scales();
  check(!kv_fp8 || s_->host_copy, "update_weights: the FP8 KV cache's scales are bounded from "
        "the weights and this model's weights exist only in device memory: load a checkpoint, "
        "or use kv_cache_dtype='auto'");
  // A TpGroup's leader's ops (host memory); else the bundle's, which outlive a sleep(2).
  kernels::Ops& ops = s_->bundle.tp ? s_->bundle.engine_model().ops() : *s_->bundle.ops;
  const bool device_backend = !ops.host_memory();
  std::vector<WeightSource> sources;
  sources.reserve(tensors.size());
  for (const NamedTensor& t : tensors) {
    if (t.on_device) {
      check(device_backend, "update_weights: {} is in device memory but the backend is {}: pass "
            "a host tensor (.cpu())", t.name, ops.name());
      check(t.device == s_->options.device, "update_weights: {} is on CUDA device {} but the "
            "engine runs on device {}", t.name, t.device, s_->options.device);
    }
    sources.push_back({t.name, t.shape, t.dtype, t.data, t.on_device});
  }
  // Throws (writing nothing) on any bad name, shape or dtype.
  const std::vector<size_t> index = check_weights(s_->slots, sources);
  forward_on_host_f32();
  // Where each source goes: the host fp32 copy (the CPU computes on it in place) and, on a
  // device backend that holds its weights (not asleep at level 2), the placed tensor. A device
  // tensor of the placed dtype (bf16 matrices, fp32 vectors on CUDA) is copied device to
  // device and the host copy marked stale; anything else is widened to fp32 on the host (the
  // host copy), rounded to the placed dtype as the load rounds it, and uploaded in place.
  const bool placed = device_backend && s_->bundle.llama != nullptr;
  std::vector<std::byte> staged;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  for (size_t i = 0; i < sources.size(); ++i) {
    const WeightSource& src = sources[i];
    const ParameterSlot& slot = s_->slots[index[i]];
    const size_t n = static_cast<size_t>(slot.numel());
    LlamaModel::PlacedTensor dst;
    if (placed) {
      dst = s_->bundle.llama->placed(slot.param, slot.layer);
      check(dst.data != nullptr && dst.numel == slot.numel(),
            "update_weights: {} is not placed as {} elements (internal)", slot.name, n);
    }
    if (placed && src.on_device && source_dtype(src.dtype) == dst.dtype) {
      ops.copy(dst.data, src.data, n * dtype_size(dst.dtype));
      if (s_->host_copy) s_->host_stale.insert(param_key(slot));
      continue;
    }
    check(placed || s_->host_copy, "update_weights: {}: this model's weights exist only in "
          "device memory, which sleep(2) freed: call wake() first", slot.name);
    WeightSource host = src;
    if (src.on_device) {
      staged.resize(n * (src.dtype == "float32" ? 4 : 2));
      ops.download(staged.data(), src.data, staged.size());
      host.data = staged.data();
      host.on_device = false;
    }
    float* values = slot.data;
    if (!s_->host_copy) {
      f32.resize(n);
      values = f32.data();
    }
    widen_to_f32(host, values, n);
    s_->host_stale.erase(param_key(slot));
    if (!placed) continue;
    if (dst.dtype == DType::kF32) {
      ops.upload(dst.data, values, n * sizeof(float));
    } else {
      check(dst.dtype == DType::kBF16, "update_weights: {} is placed as {} (internal)", slot.name,
            dtype_name(dst.dtype));
      bf16.resize(n);
      round_to_bf16(values, bf16.data(), n);
      ops.upload(dst.data, bf16.data(), n * sizeof(uint16_t));
    }
    ops.synchronize();  // the staging buffers are reused by the next tensor
  }
  ops.synchronize();  // the caller may free or overwrite its tensors once this returns
  if (kv_fp8) {
    refresh_host_copy();  // tensors copied device to device come back to the host first
    s_->bundle.llama->refresh_kv_scales(s_->bundle.model->weights);
  }
  // The fingerprint's weight identity: the caller's version, keyed to the file it started from.
  const Hash128 h = hash_bytes(std::as_bytes(std::span(version.data(), version.size())),
                               s_->bundle.model->weights_hash);
  s_->weights_hash = h.lo;
  s_->weight_version = version;
  if (s_->bundle.tp) {
    // The ranks hold slices (and their models chunk copies) of the host weights: made again
    // from the updated host copy. The engine refers to the old leader: dropped first.
    s_->engine.reset();
    s_->bundle.tp->reload(s_->bundle.model->config, s_->bundle.model->weights);
    s_->bundle.tp->leader().prepare_gemms(s_->config.scheduler.max_tokens_per_step);
  }
  if (sleep_level_ == 0) build_engine();  // a new KV pool: no block of the old weights is reused
}

std::vector<std::pair<std::string, std::vector<int64_t>>> LlmSession::parameter_shapes() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& s : s_->slots) out.emplace_back(s.name, s.shape);
  return out;
}

void LlmSession::read_device_values(const ParameterSlot& slot, float* dst) const {
  check(s_->bundle.llama != nullptr, "{}: the device copy of the weights was freed "
        "(sleep(2)): call wake() first", slot.name);
  const LlamaModel::PlacedTensor p = s_->bundle.llama->placed(slot.param, slot.layer);
  const size_t n = static_cast<size_t>(slot.numel());
  check(p.data != nullptr && p.numel == slot.numel(), "{}: not placed (internal)", slot.name);
  if (p.dtype == DType::kF32) {
    s_->bundle.ops->download(dst, p.data, n * sizeof(float));
    return;
  }
  check(p.dtype == DType::kBF16, "{}: placed as {} (internal)", slot.name, dtype_name(p.dtype));
  std::vector<uint16_t> h(n);
  s_->bundle.ops->download(h.data(), p.data, n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);  // exact
}

void LlmSession::refresh_host_copy() {
  if (s_->host_stale.empty()) return;
  for (const ParameterSlot& slot : s_->slots) {
    if (s_->host_stale.count(param_key(slot)) != 0) read_device_values(slot, slot.data);
  }
  s_->host_stale.clear();
}

void LlmSession::read_parameter(const std::string& name, float* dst, size_t numel) const {
  std::lock_guard<std::mutex> lock(s_->busy);
  for (const auto& s : s_->slots) {
    if (s.name != name) continue;
    check(static_cast<size_t>(s.numel()) == numel, "{}: has {} elements, not {}", name,
          s.numel(), numel);
    check(s_->fp8_class.empty(), "{}: this model's projections are FP8 ({}): the session keeps "
          "no fp32 values to read", name, s_->fp8_class);
    if (!s_->host_copy || s_->host_stale.count(param_key(s)) != 0) {
      read_device_values(s, dst);  // the device's (bf16-rounded) values are the current ones
    } else {
      std::memcpy(dst, s.data, numel * sizeof(float));
    }
    return;
  }
  throw_error("{}: not a parameter of this model (LLM.parameter_names() lists them)", name);
}

void LlmSession::sleep(int level) {
  std::lock_guard<std::mutex> lock(s_->busy);
  check(level == 1 || level == 2, "sleep(level={}): level is 1 (free the KV pool) or 2 (also "
                                  "the backend's copy of the weights)", level);
  check(sleep_level_ == 0, "already asleep: call wake() first");
  check(!s_->bundle.tp, "sleep: not supported with tensor_parallel={} yet (the ranks' KV "
        "mirrors follow one engine's pool)", s_->options.tensor_parallel);
  check(level == 1 || s_->host_copy, "sleep(2): {} exists only in device memory (a synthetic "
        "model generated there): freeing it would lose the weights; use sleep(1)",
        s_->bundle.model->name);
  s_->engine.reset();
  if (level == 2 && !s_->bundle.ops->host_memory()) {
    refresh_host_copy();  // wake() places the weights again from the host copy
    s_->bundle.llama.reset();
  }
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
const Tokenizer& LlmSession::tokenizer() const {
  check(s_->bundle.tokenizer != nullptr, "{} has no tokenizer: pass prompts as token ids",
        s_->bundle.model->name);
  return *s_->bundle.tokenizer;
}
bool LlmSession::has_tokenizer() const { return s_->bundle.tokenizer != nullptr; }
int32_t LlmSession::max_model_len() const {
  return s_->engine ? s_->engine->config().max_model_len : s_->config.resolved(config()).max_model_len;
}

}  // namespace detllm::api
