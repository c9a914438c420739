// Conformance harness: run a workload under an Execution, record, compare bit for bit.
#include "verify/conformance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <unordered_map>

#include "core/error.h"
#include "engine/engine.h"
#include "model/llama_model.h"
#include "model/synthetic.h"

namespace detllm::conformance {

engine::EngineConfig base_engine_config() {
  engine::EngineConfig e;
  e.scheduler.kv.block_size = 4;
  e.kv_cache_tokens = 4096;
  e.scheduler.max_tokens_per_step = 4096;
  e.scheduler.max_seqs = 64;
  e.scheduler.chunk_size = 0;
  return e;
}

Execution base_execution(std::string label, int n_threads) {
  Execution e;
  e.label = std::move(label);
  e.engine = base_engine_config();
  e.n_threads = n_threads;
  return e;
}

namespace {

void check_run_inputs(const Target& target, const Execution& exec, size_t n) {
  check(exec.arrival.empty() || exec.arrival.size() == n,
        "{}: arrival has {} entries for {} "
        "requests",
        exec.label, exec.arrival.size(), n);
  check(exec.add_order.empty() || exec.add_order.size() == n, "{}: bad add_order", exec.label);
  const int n_sources = (target.weights != nullptr) + (target.recipe != nullptr) +
                        static_cast<int>(static_cast<bool>(target.shared_model));
  check(target.config != nullptr && n_sources == 1,
        "{}: a conformance Target needs a config "
        "and exactly one of weights, recipe and shared_model ({} given)",
        target.name, n_sources);
}

// The model of one run: the Target's shared one, or its own on fresh ops (declared in this
// order so that the model goes before its ops).
struct RunModel {
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> own;
  LlamaModel* model = nullptr;
};

RunModel run_model(const Target& target, const Execution& exec) {
  RunModel m;
  if (!target.shared_model) {
    check(static_cast<bool>(target.make_ops), "{}: the Target has no make_ops", target.name);
    m.ops = target.make_ops(exec.n_threads);
    m.own = target.recipe ? std::make_unique<LlamaModel>(*target.config, *target.recipe, *m.ops)
                          : std::make_unique<LlamaModel>(*target.config, *target.weights, *m.ops);
  }
  m.model = m.own ? m.own.get() : &target.shared_model();
  check(m.model->config().vocab_size == target.config->vocab_size &&
            m.model->config().n_layers == target.config->n_layers,
        "{}: the shared model does not match the Target's config", target.name);
  return m;
}

// The engine's step observer of a run. Every step, warm-up included, goes to a listening
// backend (negative controls); once tracing, what the traced requests' steps ran is recorded
// in the RunResult (the evidence not_exercised() reads).
class StepRecorder {
 public:
  StepRecorder(const engine::Engine& eng, RunResult& res, StepListener* listener,
               int32_t block_size)
      : eng_(eng), res_(res), listener_(listener), block_size_(block_size) {}

  void trace(engine::RequestId id, size_t index) { index_of_[id] = index; }
  void start_tracing() { tracing_ = true; }

  void on_step(const engine::StepView& v) {
    StepInfo info{v.plan, {}, block_size_};
    info.seqs.reserve(v.plan.seqs.size());
    std::vector<engine::RequestId> distinct;
    for (size_t k = 0; k < v.plan.seqs.size(); ++k) {
      const engine::ScheduledSeq& s = v.plan.seqs[k];
      const engine::Sequence& q = eng_.scheduler().sequence(s.id);
      const StepSeqInfo si = seq_info(s, q, v.request_of_seq[k]);
      info.seqs.push_back(si);
      if (std::find(distinct.begin(), distinct.end(), v.request_of_seq[k]) == distinct.end()) {
        distinct.push_back(v.request_of_seq[k]);
      }
      if (tracing_ && si.request >= 0) trace_seq(s, q, si.request);
      if (tracing_ && s.decode_rows) ++res_.n_decode_row_windows;
    }
    if (tracing_) {
      res_.max_tokens_in_step = std::max<int64_t>(res_.max_tokens_in_step, v.plan.n_tokens());
      res_.max_requests_in_step =
          std::max(res_.max_requests_in_step, static_cast<int32_t>(distinct.size()));
      res_.n_shared_steps += distinct.size() >= 2;
    }
    if (listener_) listener_->on_step(info);
  }

 private:
  StepSeqInfo seq_info(const engine::ScheduledSeq& s, const engine::Sequence& q,
                       engine::RequestId request) const {
    StepSeqInfo si;
    const auto it = index_of_.find(request);
    si.request = it == index_of_.end() ? -1 : static_cast<int32_t>(it->second);
    si.first_pos = s.first_pos;
    si.n_tokens = s.n_tokens;
    si.token_begin = s.token_begin;
    si.n_prompt = q.n_prompt;
    si.n_seq_tokens = q.n_tokens();
    si.n_cached_tokens = q.n_cached_tokens;
    si.n_preemptions = q.n_preemptions;
    return si;
  }

  // A traced request's prompt chunks and the block table of its sample 0's sequence.
  void trace_seq(const engine::ScheduledSeq& s, const engine::Sequence& q, int32_t request) {
    RequestTrace& t = res_.traces[static_cast<size_t>(request)];
    if (s.first_pos < q.n_prompt) {
      ++res_.prompt_chunks[s.n_tokens];
      t.prompt_chunks.push_back(s.n_tokens);
    }
    // Sample 0's sequence is the request's first (its forks come later): the smallest id.
    const auto ls = layout_seq_.try_emplace(static_cast<size_t>(request), s.id).first;
    if (s.id < ls->second) {
      ls->second = s.id;
      t.blocks.clear();
    }
    const std::span<const int32_t> table = eng_.scheduler().kv_cache().block_table(s.id);
    if (s.id == ls->second && table.size() > t.blocks.size()) {
      t.blocks.assign(table.begin(), table.end());
    }
  }

  const engine::Engine& eng_;
  RunResult& res_;
  StepListener* listener_;
  int32_t block_size_;
  std::unordered_map<engine::RequestId, size_t> index_of_;  // traced requests only
  std::unordered_map<size_t, engine::SeqId> layout_seq_;    // request → its sample 0's sequence
  bool tracing_ = false;
};

// Callbacks that record request `index`'s tokens, logprobs, logits, prompt logprobs and
// finishes into t, sized for its n_samples samples.
engine::RequestCallbacks trace_callbacks(RequestTrace& t, size_t index, int32_t n_samples,
                                         const Execution& exec) {
  t.tokens.assign(n_samples, {});
  t.logprobs.assign(n_samples, {});
  t.top_logprobs.assign(n_samples, {});
  t.routed_experts.assign(n_samples, {});
  t.finish.assign(n_samples, engine::FinishReason::kNone);
  t.usage.assign(n_samples, {});
  t.cached_tokens.assign(n_samples, 0);
  engine::RequestCallbacks cb;
  cb.on_token = [&t](const engine::TokenEvent& e) {
    t.tokens[e.sample_index].push_back(e.token);
    t.logprobs[e.sample_index].push_back(e.logprob);
    t.top_logprobs[e.sample_index].push_back(e.top_logprobs);
    t.routed_experts[e.sample_index].push_back(e.routed_experts);
  };
  cb.on_logits = [&t, index, &exec](int32_t sample, int32_t pos, std::span<const float> logits) {
    auto [it, inserted] = t.logits.try_emplace({sample, pos}, logits.begin(), logits.end());
    // A scoring row computed again after preemption must repeat its bits (V6).
    check(inserted || std::memcmp(it->second.data(), logits.data(), logits.size_bytes()) == 0,
          "{}: request {} position {}: logits changed when recomputed", exec.label, index, pos);
  };
  cb.on_prompt_logprobs = [&t](std::span<const engine::PromptLogprob> lp) {
    t.prompt_logprobs.assign(lp.begin(), lp.end());
  };
  cb.on_finish = [&t](int32_t sample, engine::FinishReason reason, const engine::Usage& u) {
    t.finish[sample] = reason;
    t.usage[sample] = u;
    t.cached_tokens[sample] = u.cached_tokens;
  };
  return cb;
}

// Steps the engine, adding each request (in the Execution's add order) at its arrival step,
// until every request is added and the engine is idle.
void run_arrivals(engine::Engine& eng, const Execution& exec, size_t n,
                  const std::function<void(size_t)>& add) {
  std::vector<size_t> order = exec.add_order;
  if (order.empty()) {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<bool> added(n, false);
  size_t n_added = 0;
  for (int64_t step = 0;; ++step) {
    check(step < 1'000'000, "{}: the workload did not finish (livelock?)", exec.label);
    for (size_t i : order) {
      const int32_t when = exec.arrival.empty() ? 0 : exec.arrival[i];
      if (!added[i] && when <= step) {
        add(i);
        added[i] = true;
        ++n_added;
      }
    }
    const bool ran = eng.step();
    if (exec.check_kv_every_step) eng.scheduler().check_consistency();
    if (n_added == n && !eng.has_work()) break;
    check(ran || n_added < n, "{}: the engine stalled with work left", exec.label);
  }
}

void check_kv_released(const engine::Engine& eng, const std::string& label) {
  eng.scheduler().check_consistency();
  const engine::KvCacheStats kv = eng.scheduler().kv_cache().stats();
  check(kv.n_referenced == 0 && kv.n_free + kv.n_cached_idle == kv.n_blocks,
        "{}: KV blocks leaked: {} still referenced, {} free, {} cached of {}", label,
        kv.n_referenced, kv.n_free, kv.n_cached_idle, kv.n_blocks);
}

// The counters a run reports net of its warm-up.
struct RunCounters {
  int64_t cached_tokens = 0;
  int64_t padded_steps = 0;
  int64_t graph_replays = 0;
  int64_t preemptions = 0;
};

RunCounters counters_of(const engine::Engine& eng, const LlamaModel& model) {
  return {eng.stats().n_cached_tokens, model.step_stats().n_padded_steps,
          model.step_stats().n_graph_replays, eng.scheduler().stats().n_preemptions};
}

}  // namespace

RunResult run(const Target& target, const Execution& exec,
              const std::vector<engine::Request>& requests) {
  const size_t n = requests.size();
  check_run_inputs(target, exec, n);
  const RunModel rm = run_model(target, exec);
  LlamaModel& model = *rm.model;
  engine::EngineConfig cfg = exec.engine;
  cfg.policy = target.policy;
  engine::Engine eng(model, cfg, nullptr, exec.draft_is_target ? &model : exec.draft_model);

  RunResult res;
  res.traces.resize(n);
  res.block_size = cfg.scheduler.kv.block_size;
  res.graphs_available = model.graph_capture() != nullptr;  // shared models too
  StepRecorder recorder(eng, res, dynamic_cast<StepListener*>(&model.ops()),
                        cfg.scheduler.kv.block_size);
  eng.set_step_observer([&recorder](const engine::StepView& v) { recorder.on_step(v); });

  for (const engine::Request& w : exec.warmup) eng.add_request(w, {});
  eng.run_until_idle();
  const RunCounters warmup = counters_of(eng, model);
  recorder.start_tracing();
  run_arrivals(eng, exec, n, [&](size_t i) {
    engine::Request r = requests[i];
    r.capture_logits = true;
    r.return_routed_experts = model.has_experts();
    engine::RequestCallbacks cb = trace_callbacks(res.traces[i], i, r.n, exec);
    recorder.trace(eng.add_request(std::move(r), std::move(cb)), i);
  });
  check_kv_released(eng, exec.label);
  // A model with experts reports them with every token (else comparing them proves nothing).
  const size_t routed_width = model.has_experts() ? static_cast<size_t>(target.config->n_layers) *
                                                        target.config->moe.n_experts_used
                                                  : 0;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& sample : res.traces[i].routed_experts) {
      for (const auto& ids : sample) {
        check(ids.size() == routed_width, "{}: request {}: {} routed expert ids, expected {}",
              exec.label, i, ids.size(), routed_width);
      }
    }
  }
  const RunCounters after = counters_of(eng, model);
  res.n_steps = eng.stats().n_steps;
  res.n_preemptions = after.preemptions - warmup.preemptions;
  res.n_cached_tokens = after.cached_tokens - warmup.cached_tokens;
  res.n_padded_steps = after.padded_steps - warmup.padded_steps;
  res.n_graph_replays = after.graph_replays - warmup.graph_replays;
  res.engine_stats = eng.stats();
  return res;
}

namespace {

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Top logprobs equal in ids and bits; the first difference as text, "" when equal.
std::string top_difference(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
  if (a.size() != b.size()) return fmt::format("{} vs {} top logprobs", a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || !same_bits(a[i].logprob, b[i].logprob)) {
      return fmt::format("top logprob {} differs: token {} {:.9g} vs token {} {:.9g}", i,
                         a[i].token, a[i].logprob, b[i].token, b[i].logprob);
    }
  }
  return {};
}

}  // namespace

std::optional<Mismatch> compare(const RequestTrace& a, const RequestTrace& b) {
  if (a.tokens.size() != b.tokens.size()) {
    return Mismatch{
        fmt::format("sample counts differ: {} vs {}", a.tokens.size(), b.tokens.size())};
  }
  for (size_t s = 0; s < a.tokens.size(); ++s) {
    const auto& ta = a.tokens[s];
    const auto& tb = b.tokens[s];
    for (size_t i = 0; i < std::min(ta.size(), tb.size()); ++i) {
      if (ta[i] != tb[i]) {
        return Mismatch{fmt::format("sample {}: token {} differs: {} vs {}", s, i, ta[i], tb[i])};
      }
    }
    if (ta.size() != tb.size()) {
      return Mismatch{fmt::format("sample {}: {} vs {} tokens", s, ta.size(), tb.size())};
    }
    for (size_t i = 0; i < ta.size(); ++i) {
      if (!same_bits(a.logprobs[s][i], b.logprobs[s][i])) {
        return Mismatch{fmt::format("sample {}: logprob of token {} differs: {:.9g} vs {:.9g}", s,
                                    i, a.logprobs[s][i], b.logprobs[s][i])};
      }
    }
    if (a.top_logprobs.size() == a.tokens.size() && b.top_logprobs.size() == b.tokens.size()) {
      for (size_t i = 0; i < ta.size(); ++i) {
        const std::string d = top_difference(a.top_logprobs[s][i], b.top_logprobs[s][i]);
        if (!d.empty()) return Mismatch{fmt::format("sample {} token {}: {}", s, i, d)};
      }
    }
    if (a.routed_experts.size() == a.tokens.size() && b.routed_experts.size() == b.tokens.size()) {
      for (size_t i = 0; i < ta.size(); ++i) {
        if (a.routed_experts[s][i] != b.routed_experts[s][i]) {
          return Mismatch{fmt::format("sample {} token {}: routed experts differ: {} vs {}", s, i,
                                      fmt::join(a.routed_experts[s][i], ","),
                                      fmt::join(b.routed_experts[s][i], ","))};
        }
      }
    }
    if (s < a.finish.size() && s < b.finish.size() && a.finish[s] != b.finish[s]) {
      return Mismatch{fmt::format("sample {}: finish reason {} vs {}", s,
                                  engine::finish_reason_name(a.finish[s]),
                                  engine::finish_reason_name(b.finish[s]))};
    }
    if (s < a.usage.size() && s < b.usage.size()) {
      const engine::Usage& ua = a.usage[s];
      const engine::Usage& ub = b.usage[s];
      if (ua.prompt_tokens != ub.prompt_tokens || ua.completion_tokens != ub.completion_tokens) {
        return Mismatch{fmt::format("sample {}: usage {} prompt + {} completion tokens vs {} + {}",
                                    s, ua.prompt_tokens, ua.completion_tokens, ub.prompt_tokens,
                                    ub.completion_tokens)};
      }
    }
  }
  for (const auto& [key, la] : a.logits) {
    auto it = b.logits.find(key);
    if (it == b.logits.end()) {
      return Mismatch{fmt::format("sample {} position {}: logits only in the first run", key.first,
                                  key.second)};
    }
    const auto& lb = it->second;
    if (la.size() != lb.size()) return Mismatch{"logit vector sizes differ"};
    for (size_t i = 0; i < la.size(); ++i) {
      uint32_t ba, bb;
      std::memcpy(&ba, &la[i], 4);
      std::memcpy(&bb, &lb[i], 4);
      if (ba != bb) {
        return Mismatch{fmt::format(
            "sample {} position {}: logit[{}] differs: {:.9g} (0x{:08x}) vs {:.9g} (0x{:08x})",
            key.first, key.second, i, la[i], ba, lb[i], bb)};
      }
    }
  }
  if (a.logits.size() != b.logits.size()) {
    return Mismatch{fmt::format("{} vs {} logit positions", a.logits.size(), b.logits.size())};
  }
  if (a.prompt_logprobs.size() != b.prompt_logprobs.size()) {
    return Mismatch{"prompt logprob counts differ"};
  }
  for (size_t i = 0; i < a.prompt_logprobs.size(); ++i) {
    const auto& pa = a.prompt_logprobs[i];
    const auto& pb = b.prompt_logprobs[i];
    if (pa.position != pb.position || pa.token != pb.token || !same_bits(pa.logprob, pb.logprob)) {
      return Mismatch{
          fmt::format("prompt logprob at position {} differs: token {} {:.9g} vs "
                      "token {} {:.9g}",
                      pa.position, pa.token, pa.logprob, pb.token, pb.logprob)};
    }
    const std::string d = top_difference(pa.top_logprobs, pb.top_logprobs);
    if (!d.empty()) {
      return Mismatch{fmt::format("prompt logprob at position {}: {}", pa.position, d)};
    }
    if (pa.routed_experts != pb.routed_experts) {
      return Mismatch{fmt::format("prompt position {}: routed experts differ: {} vs {}",
                                  pa.position, fmt::join(pa.routed_experts, ","),
                                  fmt::join(pb.routed_experts, ","))};
    }
  }
  return std::nullopt;
}

std::optional<Mismatch> first_mismatch(const std::vector<engine::Request>& reqs,
                                       const std::vector<RequestTrace>& a,
                                       const std::vector<RequestTrace>& b) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!reqs[i].deterministic.value_or(true)) continue;
    if (auto m = compare(a.at(i), b.at(i)))
      return Mismatch{fmt::format("request {}: {}", i, m->what)};
  }
  return std::nullopt;
}

std::vector<engine::Request> scoring_requests(const std::vector<engine::Request>& reqs,
                                              const RunResult& gen) {
  std::vector<engine::Request> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (const auto& toks : gen.traces.at(i).tokens) {
      engine::Request r;
      r.prompt = reqs[i].prompt;
      r.prompt.insert(r.prompt.end(), toks.begin(), toks.end());
      r.max_tokens = 0;
      r.prompt_logprobs = 0;
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::optional<Mismatch> compare_generation_scoring(const std::vector<engine::Request>& reqs,
                                                   const RunResult& gen, const RunResult& score,
                                                   size_t* n_compared) {
  size_t j = 0, n = 0;
  auto fail = [](std::string what) { return std::optional<Mismatch>(Mismatch{std::move(what)}); };
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int32_t n_prompt = static_cast<int32_t>(reqs[i].prompt.size());
    const RequestTrace& g = gen.traces.at(i);
    for (size_t k = 0; k < g.tokens.size(); ++k, ++j) {
      const auto& toks = g.tokens[k];
      const RequestTrace& st = score.traces.at(j);
      if (!reqs[i].deterministic.value_or(true)) continue;
      if (st.prompt_logprobs.size() != reqs[i].prompt.size() + toks.size() - 1) {
        return fail(fmt::format("request {} sample {}: {} prompt logprobs from scoring", i, k,
                                st.prompt_logprobs.size()));
      }
      for (size_t t = 0; t < toks.size(); ++t) {
        const int32_t pos = n_prompt + static_cast<int32_t>(t);
        const auto lg = g.logits.find({static_cast<int32_t>(k), pos});
        const auto ls = st.logits.find({0, pos});
        if (lg == g.logits.end() || ls == st.logits.end()) {
          return fail(fmt::format("request {} sample {}: {} has no logits at position {}", i, k,
                                  lg == g.logits.end() ? "generation" : "scoring", pos));
        }
        const std::vector<float>& a = lg->second;
        const std::vector<float>& b = ls->second;
        if (a.size() != b.size()) {
          return fail(
              fmt::format("request {} sample {} position {}: {} logits generated vs {} "
                          "scored",
                          i, k, pos, a.size(), b.size()));
        }
        for (size_t v = 0; v < a.size(); ++v) {
          if (std::memcmp(&a[v], &b[v], 4) != 0) {
            return fail(fmt::format(
                "request {} sample {} position {}: logit[{}] generated {:.9g} vs scored {:.9g}", i,
                k, pos, v, a[v], b[v]));
          }
        }
        const float lp_gen = g.logprobs[k][t];
        const float lp_score = st.prompt_logprobs[static_cast<size_t>(pos - 1)].logprob;
        if (std::memcmp(&lp_gen, &lp_score, 4) != 0) {
          return fail(fmt::format("request {} sample {} position {}: logprob {:.9g} vs {:.9g}", i,
                                  k, pos, lp_gen, lp_score));
        }
        // The experts of the token before pos: generation's decode row vs scoring's prompt row.
        static const std::vector<int32_t> kNone;
        const bool traced = k < g.routed_experts.size() && t < g.routed_experts[k].size();
        const std::vector<int32_t>& re_gen = traced ? g.routed_experts[k][t] : kNone;
        const std::vector<int32_t>& re_score =
            st.prompt_logprobs[static_cast<size_t>(pos - 1)].routed_experts;
        if (traced && re_gen != re_score) {
          return fail(
              fmt::format("request {} sample {} position {}: routed experts {} generated "
                          "vs {} scored",
                          i, k, pos, fmt::join(re_gen, ","), fmt::join(re_score, ",")));
        }
        ++n;
      }
    }
  }
  if (n_compared) *n_compared = n;
  return std::nullopt;
}

std::optional<std::string> not_exercised(const Expect& want,
                                         const std::vector<engine::Request>& reqs,
                                         const RunResult& got,
                                         const std::vector<RequestTrace>* ref) {
  check(got.traces.size() == reqs.size(), "not_exercised: {} traces for {} requests",
        got.traces.size(), reqs.size());
  auto fail = [](std::string why) { return std::optional<std::string>(std::move(why)); };
  if (want.requests_in_step > 0 && got.max_requests_in_step < want.requests_in_step) {
    return fail(fmt::format("no step held rows of {} requests (at most {})", want.requests_in_step,
                            got.max_requests_in_step));
  }
  if (want.chunk_size) {
    const int32_t c = *want.chunk_size;
    if (got.prompt_chunks.empty()) return fail("no prompt chunk ran");
    const int32_t longest = got.prompt_chunks.rbegin()->first;
    if (c > 0 && longest != c) {
      return fail(fmt::format("chunk size {}: the longest prompt chunk was {}", c, longest));
    }
    if (c == 0) {
      for (size_t i = 0; i < reqs.size(); ++i) {
        const RequestTrace& t = got.traces[i];
        const size_t n_whole = t.prompt_chunks.empty() ? 0 : 1;
        if (t.prompt_chunks.size() != n_whole || t.prompt_chunks.empty() ||
            t.prompt_chunks[0] + t.cached_tokens.at(0) !=
                static_cast<int32_t>(reqs[i].prompt.size())) {
          return fail(
              fmt::format("whole prompts: request {} ({} tokens, {} cached) ran in {} chunks", i,
                          reqs[i].prompt.size(), t.cached_tokens.at(0), t.prompt_chunks.size()));
        }
      }
    }
  }
  const int32_t bs = std::max(got.block_size, 1);
  int64_t n_full = 0, n_partial = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int32_t cacheable = (static_cast<int32_t>(reqs[i].prompt.size()) - 1) / bs * bs;
    const int32_t hit = got.traces[i].cached_tokens.empty() ? 0 : got.traces[i].cached_tokens[0];
    n_full += hit > 0 && hit == cacheable;
    n_partial += hit > 0 && hit < cacheable;
  }
  if (want.no_hit && got.n_cached_tokens != 0) {
    return fail(fmt::format("{} prompt tokens came from the prefix cache", got.n_cached_tokens));
  }
  if (want.full_hit && n_full == 0) return fail("no request reused its whole cacheable prompt");
  if (want.partial_hit && n_partial == 0) {
    return fail("no request reused part of its prompt from the prefix cache");
  }
  if (want.preemption && got.n_preemptions == 0) return fail("no sequence was preempted");
  if (want.other_layout) {
    check(ref != nullptr && ref->size() == reqs.size(),
          "not_exercised: other_layout needs the "
          "reference traces");
    size_t n_other = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto& a = (*ref)[i].blocks;
      const auto& b = got.traces[i].blocks;
      n_other += b.size() >= 2 && a != b;
    }
    if (n_other == 0) return fail("every request had the reference's physical KV blocks");
  }
  if (want.padded && got.n_padded_steps == 0) return fail("no decode step was padded");
  if (want.graph_replays && got.graphs_available && got.n_graph_replays == 0) {
    return fail("no step replayed a graph");
  }
  return std::nullopt;
}

std::vector<engine::Request> random_workload(uint64_t seed, const WorkloadSpec& spec) {
  check(spec.vocab_size > 0 && spec.min_prompt >= 1 && spec.max_prompt >= spec.min_prompt,
        "bad workload spec");
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  // Two shared base prefixes, so that some prompts hit the prefix cache fully or partially.
  std::vector<std::vector<int32_t>> bases(2);
  for (auto& b : bases) {
    b.resize(static_cast<size_t>(spec.max_prompt));
    for (auto& t : b) t = static_cast<int32_t>(uniform(0, spec.vocab_size - 1));
  }
  std::vector<engine::Request> out(static_cast<size_t>(spec.n_requests));
  for (auto& r : out) {
    const int32_t len = static_cast<int32_t>(uniform(spec.min_prompt, spec.max_prompt));
    if (chance(0.5)) {
      const auto& b = bases[static_cast<size_t>(uniform(0, 1))];
      const int32_t shared = static_cast<int32_t>(uniform(0, len));
      r.prompt.assign(b.begin(), b.begin() + shared);
    }
    while (static_cast<int32_t>(r.prompt.size()) < len) {
      r.prompt.push_back(static_cast<int32_t>(uniform(0, spec.vocab_size - 1)));
    }
    r.deterministic = !chance(spec.nondet_share);
    r.sampling.n_logprobs = static_cast<int32_t>(uniform(0, 3));
    if (chance(spec.scoring_share) && r.prompt.size() > 1) {
      r.max_tokens = 0;
      r.prompt_logprobs = static_cast<int32_t>(uniform(0, 2));
      continue;
    }
    r.max_tokens = static_cast<int32_t>(uniform(1, spec.max_new_tokens));
    if (chance(0.5)) {
      r.sampling.temperature = 0.0f;
    } else {
      const float temps[] = {0.7f, 1.0f, 1.3f};
      r.sampling.temperature = temps[uniform(0, 2)];
      if (chance(0.3)) r.sampling.top_k = static_cast<int32_t>(uniform(1, 50));
      if (chance(0.3)) r.sampling.top_p = 0.9f;
      if (chance(0.2)) r.sampling.min_p = 0.05f;
      r.sampling.seed = rng();
    }
    if (spec.allow_n_samples && chance(0.2)) r.n = 2;
    if (chance(0.1)) r.prompt_logprobs = 1;
  }
  return out;
}

std::vector<engine::Request> partial_prefix_warmup(const std::vector<engine::Request>& reqs) {
  std::vector<engine::Request> out;
  out.reserve(reqs.size());
  for (engine::Request r : reqs) {
    r.prompt.resize((r.prompt.size() + 1) / 2);
    r.prompt.push_back(1);
    r.max_tokens = 1;
    r.prompt_logprobs = -1;
    r.n = 1;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace detllm::conformance
