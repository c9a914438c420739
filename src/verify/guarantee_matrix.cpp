// The guarantee matrix: variations as data, run under every mode (guarantee_matrix.h).
#include "verify/guarantee_matrix.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "core/error.h"
#include "model/fp8_weights.h"
#include "model/model_loader.h"

namespace detllm::conformance {
namespace {

Execution exec(std::string label, int n_threads = 2) {
  return base_execution(std::move(label), n_threads);
}

WorkloadSpec workload_spec(const VariationSpec& s) {
  WorkloadSpec w;
  w.n_requests = s.n_requests;
  w.vocab_size = s.vocab_size;
  w.max_prompt = s.max_prompt;
  w.max_new_tokens = s.max_new_tokens;
  return w;
}

// Shuffled add order and arrival steps in 0…spread-1 for n requests.
void shuffle_arrival(Execution& e, size_t n, std::mt19937& rng, uint32_t spread) {
  e.add_order.resize(n);
  std::iota(e.add_order.begin(), e.add_order.end(), 0);
  std::shuffle(e.add_order.begin(), e.add_order.end(), rng);
  e.arrival.clear();
  for (size_t i = 0; i < n; ++i) e.arrival.push_back(static_cast<int32_t>(rng() % spread));
}

VariationCase pair_case(std::string label, std::vector<engine::Request> workload, Execution a,
                        Execution b, bool a_alone) {
  VariationCase c;
  c.label = std::move(label);
  c.workload = std::move(workload);
  c.a = std::move(a);
  c.b = std::move(b);
  c.a_each_alone = a_alone;
  return c;
}

// The outcome of one case under a target whose policy is already the mode's: the first
// difference, else why its runs do not show the variation, else nothing.
struct CaseOutcome {
  std::optional<std::string> mismatch;
  std::optional<std::string> not_exercised;
};

CaseOutcome run_case(const Target& t, const VariationCase& c) {
  CaseOutcome out;
  RunResult ra;
  if (c.a_each_alone) {
    for (const engine::Request& r : c.workload) ra.traces.push_back(run(t, c.a, {r}).traces.at(0));
    // Evidence of an each-alone reference: no step can hold two of its requests.
  } else {
    ra = run(t, c.a, c.workload);
    out.not_exercised = not_exercised(c.expect_a, c.workload, ra);
    if (out.not_exercised) *out.not_exercised = "reference: " + *out.not_exercised;
  }
  if (c.b_scores_a) {
    const std::vector<engine::Request> scoring = scoring_requests(c.workload, ra);
    const RunResult score = run(t, c.b, scoring);
    size_t n_compared = 0;
    if (auto m = compare_generation_scoring(c.workload, ra, score, &n_compared)) {
      out.mismatch = m->what;
    } else if (!out.not_exercised && n_compared < std::max<size_t>(c.min_scored_positions, 1)) {
      out.not_exercised = fmt::format("{} generated positions re-scored (want {})", n_compared,
                                      std::max<size_t>(c.min_scored_positions, 1));
    } else if (!out.not_exercised) {
      out.not_exercised = not_exercised(c.expect_b, scoring, score);
    }
    return out;
  }
  const RunResult rb = run(t, c.b, c.workload);
  if (auto m = first_mismatch(c.workload, ra.traces, rb.traces)) {
    out.mismatch = m->what;
  } else if (!out.not_exercised) {
    out.not_exercised = not_exercised(c.expect_b, c.workload, rb, &ra.traces);
  }
  return out;
}

void apply_to(DeterminismMode mode, Execution& e, bool keeps_graph_mode) {
  const GraphMode graphs = e.engine.cuda_graphs;
  apply_mode(mode, e.engine);
  if (keeps_graph_mode) e.engine.cuda_graphs = graphs;
}

std::string cell_short(const CellResult& r) {
  switch (r.state) {
    case CellResult::State::kHolds:
      return "holds";
    case CellResult::State::kFails: {
      const size_t colon = r.detail.find(':');
      return fmt::format("**FAILS** ({})", std::string_view(r.detail).substr(0, colon));
    }
    case CellResult::State::kNotExercised:
      return "not exercised";
    case CellResult::State::kNotApplicable:
      return "n/a";
    case CellResult::State::kError:
      return "ERROR";
  }
  return "?";
}

// V1: one request alone vs with 1, 3, n-1 random neighbours in the same steps.
Variation variation_v1(const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V1", "batch size and composition", {}, {}};
  const auto reqs = random_workload(seed + 1, ws);
  std::vector<size_t> ks;
  for (size_t k : {size_t{1}, size_t{3}, reqs.size() - 1}) {
    if (k < reqs.size() && std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  }
  for (size_t k : ks) {
    std::vector<engine::Request> sub(reqs.begin(), reqs.begin() + static_cast<ptrdiff_t>(k) + 1);
    VariationCase c =
        pair_case(fmt::format("{} neighbours", k), sub, exec("alone"), exec("neighbours"), true);
    // Rows of different requests in one step (under padded, prefills run alone and the
    // first requests may finish decoding before the last one is admitted).
    c.expect_b.requests_in_step = 2;
    v.cases.push_back(std::move(c));
  }
  return v;
}

// V2: shuffled add order and staggered arrival steps.
Variation variation_v2(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed,
                       std::mt19937& rng) {
  Variation v{"V2", "arrival order and timing", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = spec.n_requests + 1;
  const auto reqs = random_workload(seed + 2, w);
  for (int round = 0; round < 2; ++round) {
    Execution b = exec("arrival");
    shuffle_arrival(b, reqs.size(), rng, 3);  // staggered, close enough to overlap
    VariationCase c =
        pair_case(fmt::format("arrival round {}", round), reqs, exec("alone"), b, true);
    c.expect_b.requests_in_step = 2;  // staggered, yet sharing steps
    v.cases.push_back(std::move(c));
  }
  return v;
}

// V3: whole prompts vs chunked prefill (1, 7, 16) under small step budgets.
Variation variation_v3(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V3", "prompt chunking", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = std::max(2, spec.n_requests - 2);
  w.max_prompt = spec.max_prompt * 2;
  const auto reqs = random_workload(seed + 3, w);
  for (int32_t chunk : {1, 7, 16}) {
    Execution b = exec("chunk");
    b.engine.scheduler.chunk_size = chunk;
    b.engine.scheduler.max_tokens_per_step = std::max(chunk, 20);
    VariationCase c = pair_case(fmt::format("chunk {}", chunk), reqs, exec("alone"), b, true);
    c.expect_b.chunk_size = chunk;
    v.cases.push_back(std::move(c));
  }
  v.not_applicable = [](const ModeInfo& m) {
    return m.isolate_prefill ? std::string("the mode never chunks a deterministic prefill")
                             : std::string();
  };
  return v;
}

// V4: generation vs re-scoring (teacher forcing), scoring chunked differently.
Variation variation_v4(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V4", "prefill vs decode (generation = re-scoring)", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = std::max(2, spec.n_requests - 1);
  w.scoring_share = 0;
  w.max_new_tokens = spec.max_new_tokens + 4;
  Execution b = exec("score");
  b.engine.scheduler.chunk_size = 5;
  b.engine.scheduler.max_tokens_per_step = 24;
  VariationCase c =
      pair_case("generate vs score", random_workload(seed + 4, w), exec("generate"), b, false);
  c.b_scores_a = true;
  c.min_scored_positions = static_cast<size_t>(w.n_requests);  // >= 1 token each
  v.cases.push_back(std::move(c));
  return v;
}

// V5: prefix cache off vs warm vs partial hits.
Variation variation_v5(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V5", "prefix cache (hit, miss, partial)", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = spec.n_requests + 1;
  const auto reqs = random_workload(seed + 5, w);
  Execution cold = exec("cache off");
  cold.engine.scheduler.kv.enable_prefix_cache = false;
  Execution warm = exec("warm");
  warm.warmup = reqs;
  VariationCase wc = pair_case("warm cache", reqs, cold, warm, false);
  wc.expect_a.no_hit = true;
  wc.expect_b.full_hit = true;
  v.cases.push_back(std::move(wc));
  Execution partial = exec("partial");
  partial.warmup = partial_prefix_warmup(reqs);  // the same prompts cut mid-block
  VariationCase pc = pair_case("partial hits", reqs, cold, partial, false);
  pc.expect_a.no_hit = true;
  pc.expect_b.partial_hit = true;
  v.cases.push_back(std::move(pc));
  v.not_applicable = [](const ModeInfo& m) {
    return m.prefix_cache_off
               ? std::string("deterministic requests never use the prefix cache in this mode")
               : std::string();
  };
  return v;
}

// V6: a KV pool so small that sequences are preempted and recomputed.
Variation variation_v6(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V6", "preemption and KV recompute", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = std::max(3, spec.n_requests);
  w.max_prompt = std::min(spec.max_prompt, 12);
  w.scoring_share = 0;
  w.allow_n_samples = false;
  auto reqs = random_workload(seed + 6, w);
  // Short prompts, long outputs, a pool that holds the longest request alone: two prompts
  // are admitted together (their prompt blocks fit), both grow, and one must be preempted.
  const int32_t bs = base_engine_config().scheduler.kv.block_size;
  const int32_t n_new = std::max(16, spec.max_new_tokens);
  int32_t n_blocks = 0;
  for (auto& r : reqs) {
    r.max_tokens = n_new;
    r.prompt_logprobs = -1;
    const int32_t need = static_cast<int32_t>(r.prompt.size()) + n_new;
    n_blocks = std::max(n_blocks, (need + bs - 1) / bs);
  }
  Execution b = exec("tiny KV");
  b.engine.kv_cache_tokens = 0;
  b.engine.scheduler.kv.n_blocks = n_blocks;
  VariationCase c =
      pair_case(fmt::format("{}-block KV pool", n_blocks), reqs, exec("alone"), b, true);
  c.expect_b.preemption = true;
  v.cases.push_back(std::move(c));
  return v;
}

// V7: shuffled physical blocks after a fragmenting warm-up.
Variation variation_v7(const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V7", "physical KV page layout", {}, {}};
  const auto reqs = random_workload(seed + 7, ws);
  for (uint64_t shuffle : {1, 2}) {
    Execution b = exec("shuffled blocks");
    b.engine.scheduler.kv.shuffle_blocks = true;
    b.engine.scheduler.kv.shuffle_seed = shuffle;
    WorkloadSpec wu = ws;
    wu.n_requests = 4;
    b.warmup = random_workload(seed + 100 + shuffle, wu);
    VariationCase c = pair_case(fmt::format("shuffle {}", shuffle), reqs, exec("alone"), b, true);
    c.expect_b.other_layout = true;
    v.cases.push_back(std::move(c));
  }
  return v;
}

// V8: decode steps eager vs padded and replayed as CUDA graphs (padding on the CPU).
Variation variation_v8(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed,
                       std::mt19937& rng) {
  Variation v{"V8", "CUDA graphs on/off, batch padding", {}, {}};
  WorkloadSpec w = ws;
  w.max_new_tokens = spec.max_new_tokens + 4;
  const auto reqs = random_workload(seed + 8, w);
  Execution a = exec("graphs off");
  a.engine.cuda_graphs = GraphMode::kOff;
  Execution b = exec("graphs on");
  b.engine.cuda_graphs = GraphMode::kOn;
  shuffle_arrival(b, reqs.size(), rng, 5);
  VariationCase c = pair_case("graphs off vs on", reqs, a, b, false);
  c.keeps_graph_mode = true;
  c.expect_b.padded = true;
  c.expect_b.graph_replays = true;  // where the backend has graphs
  v.cases.push_back(std::move(c));
  return v;
}

// V9: a fresh engine, backend and model (as after a restart).
Variation variation_v9(const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V9", "process restart (fresh engine)", {}, {}};
  v.cases.push_back(pair_case("fresh engine", random_workload(seed + 9, ws), exec("first"),
                              exec("second"), false));
  return v;
}

// V10: non-deterministic neighbours.
Variation variation_v10(const VariationSpec& spec, const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V10", "non-deterministic neighbours", {}, {}};
  WorkloadSpec w = ws;
  w.n_requests = spec.n_requests + 3;
  w.nondet_share = 0.5;
  VariationCase c =
      pair_case("mixed batch", random_workload(seed + 10, w), exec("alone"), exec("mixed"), true);
  c.expect_b.requests_in_step = 2;
  v.cases.push_back(std::move(c));
  return v;
}

// V11: CPU thread counts.
Variation variation_v11(const WorkloadSpec& ws, uint64_t seed) {
  Variation v{"V11", "CPU threads", {}, {}};
  v.cases.push_back(pair_case("1 vs 3 threads", random_workload(seed + 11, ws), exec("1 thread", 1),
                              exec("3 threads", 3), false));
  return v;
}

}  // namespace

std::vector<Variation> build_variations(const VariationSpec& spec) {
  check(spec.vocab_size > 0 && spec.n_requests >= 2, "build_variations: bad spec");
  const WorkloadSpec ws = workload_spec(spec);
  const uint64_t seed = spec.seed * 1000;
  std::mt19937 rng(static_cast<uint32_t>(spec.seed));  // V2, then V8: in this order
  std::vector<Variation> out;
  out.push_back(variation_v1(ws, seed));
  out.push_back(variation_v2(spec, ws, seed, rng));
  out.push_back(variation_v3(spec, ws, seed));
  out.push_back(variation_v4(spec, ws, seed));
  out.push_back(variation_v5(spec, ws, seed));
  out.push_back(variation_v6(spec, ws, seed));
  out.push_back(variation_v7(ws, seed));
  out.push_back(variation_v8(spec, ws, seed, rng));
  out.push_back(variation_v9(ws, seed));
  out.push_back(variation_v10(spec, ws, seed));
  if (spec.cpu_threads) out.push_back(variation_v11(ws, seed));
  return out;
}

std::string CellResult::text() const {
  switch (state) {
    case State::kHolds:
      return "holds";
    case State::kFails:
      return fmt::format("FAILS: {}", detail);
    case State::kNotExercised:
      return fmt::format("not exercised: {}", detail);
    case State::kNotApplicable:
      return fmt::format("n/a: {}", detail);
    case State::kError:
      return fmt::format("ERROR: {}", detail);
  }
  return "?";
}

CellResult run_variation(const Target& target, DeterminismMode mode, const Variation& v) {
  const auto t0 = std::chrono::steady_clock::now();
  CellResult r;
  const ModeInfo& info = mode_info(mode);
  auto done = [&](CellResult res) {
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  };
  if (v.not_applicable) {
    if (std::string why = v.not_applicable(info); !why.empty()) {
      r.state = CellResult::State::kNotApplicable;
      r.detail = why;
      return done(r);
    }
  }
  Target t = target;
  t.policy = policy_for_mode(mode, target.policy);
  for (const VariationCase& c0 : v.cases) {
    VariationCase c = c0;
    try {
      apply_to(mode, c.a, c.keeps_graph_mode);
      apply_to(mode, c.b, c.keeps_graph_mode);
      ++r.n_cases_run;
      const CaseOutcome o = run_case(t, c);
      if (o.mismatch) {
        r.state = CellResult::State::kFails;
        r.detail = fmt::format("{}: {}", c.label, *o.mismatch);
        return done(r);
      }
      if (o.not_exercised && r.state == CellResult::State::kHolds) {
        r.state = CellResult::State::kNotExercised;
        r.detail = fmt::format("{}: {}", c.label, *o.not_exercised);
      }
    } catch (const std::exception& e) {
      r.state = CellResult::State::kError;
      r.detail = fmt::format("{}: {}", c.label, e.what());
      return done(r);
    }
  }
  return done(r);
}

GuaranteeMatrix run_matrix(
    const TargetForMode& target_for, const std::vector<DeterminismMode>& modes,
    std::vector<Variation> variations,
    const std::function<void(const Variation&, DeterminismMode, const CellResult&)>& on_cell) {
  GuaranteeMatrix m;
  m.modes = modes;
  m.variations = std::move(variations);
  m.cells.assign(m.variations.size(), std::vector<CellResult>(modes.size()));
  for (size_t j = 0; j < modes.size(); ++j) {
    const Target target = target_for(modes[j]);
    for (size_t i = 0; i < m.variations.size(); ++i) {
      CellResult& cell = m.cells[i][j];
      cell = run_variation(target, modes[j], m.variations[i]);
      if (on_cell) on_cell(m.variations[i], modes[j], cell);
    }
  }
  return m;
}

std::string GuaranteeMatrix::markdown() const {
  std::string s = "| V | variation |";  // built with fmt: GCC 12 misreads + on strings
  for (DeterminismMode mode : modes) s += fmt::format(" `{}` |", determinism_mode_name(mode));
  s += "\n|---|---|";
  for (size_t j = 0; j < modes.size(); ++j) s += "---|";
  s += "\n";
  for (size_t i = 0; i < variations.size(); ++i) {
    s += fmt::format("| {} | {} |", variations[i].id, variations[i].title);
    for (size_t j = 0; j < modes.size(); ++j) s += fmt::format(" {} |", cell_short(cells[i][j]));
    s += "\n";
  }
  std::string notes;
  for (size_t i = 0; i < variations.size(); ++i) {
    for (size_t j = 0; j < modes.size(); ++j) {
      const CellResult& c = cells[i][j];
      if (c.state == CellResult::State::kHolds) continue;
      notes += fmt::format("- {} × `{}`: {}\n", variations[i].id, determinism_mode_name(modes[j]),
                           c.text());
    }
  }
  if (!notes.empty()) {
    s += fmt::format("\nFirst mismatch (or reason) of each cell that does not hold:\n\n{}", notes);
  }
  return s;
}

Target MatrixModel::target() const {
  Target t;
  t.name = name;
  t.config = &config;
  if (recipe) {
    t.recipe = &*recipe;
  } else {
    t.weights = &weights;
  }
  return t;
}

std::unique_ptr<MatrixModel> make_matrix_model(const std::string& name_or_path, int32_t wide_layers,
                                               int32_t wide_vocab, bool host_weights) {
  // "NAME@fp8" / "NAME@fp8g": the projections as FP8 rows, per channel or in 128x128 blocks
  // with per-group activations (model/fp8_weights.h); they need host weights.
  const size_t at = name_or_path.rfind('@');
  const std::string suffix = at == std::string::npos ? "" : name_or_path.substr(at + 1);
  const std::optional<Fp8Rows> fp8_rows = fp8_rows_named(suffix);
  const bool fp8 = fp8_rows.has_value();
  const std::string base = fp8 ? name_or_path.substr(0, at) : name_or_path;
  const Fp8Rows rows = fp8_rows.value_or(Fp8Rows::kChannel);
  const std::string fp8_note =
      !fp8 ? "" : rows == Fp8Rows::kChannel ? "; projections FP8 per channel (--quantization fp8)"
                                            : "; projections FP8 in 128x128 blocks";
  auto m = std::make_unique<MatrixModel>();
  m->name = name_or_path;
  if (base == "wide") {
    m->config = synthetic_config("llama-3.1-8b");
    m->config.n_layers = wide_layers;
    m->config.vocab_size = wide_vocab;
    m->config.validate("synthetic wide");
    if (fp8 || host_weights) {
      m->weights = make_synthetic_weights(m->config, 42);
      if (fp8) quantize_weights_fp8(m->weights, m->config, rows);
    } else {
      m->recipe = synthetic_recipe(m->config, 42);
    }
    m->conditions = fmt::format(
        "synthetic llama-3.1-8b layers (dim {}, ffn {}, {}/{} heads × {}), {} layers, vocab {}, "
        "weights generated {} (seed 42){}",
        m->config.dim, m->config.ffn_dim, m->config.n_heads, m->config.n_kv_heads,
        m->config.head_dim, m->config.n_layers, m->config.vocab_size,
        m->recipe ? "in backend memory" : "on the host", fp8_note);
    return m;
  }
  for (std::string_view n : synthetic_config_names()) {
    if (n == base) {
      m->config = synthetic_config(n);
      m->weights = make_synthetic_weights(m->config, 42);
      if (fp8) quantize_weights_fp8(m->weights, m->config, rows);
      m->conditions = fmt::format("synthetic {} (dim {}, {} layers, vocab {}), seed 42{}", n,
                                  m->config.dim, m->config.n_layers, m->config.vocab_size,
                                  fp8_note);
      return m;
    }
  }
  std::unique_ptr<LoadedModel> loaded = load_model(base);
  m->name = loaded->name + (fp8 ? "@" + suffix : "");
  m->config = loaded->config;
  m->weights = std::move(loaded->weights);
  if (fp8) quantize_weights_fp8(m->weights, m->config, rows);
  m->conditions =
      fmt::format("{} (dim {}, {} layers, vocab {}), weights hash {:016x}{}", loaded->name,
                  m->config.dim, m->config.n_layers, m->config.vocab_size, loaded->weights_hash,
                  fp8_note);
  return m;
}

}  // namespace detllm::conformance
