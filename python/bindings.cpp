// detllm._core: the nanobind module behind the Python package (python/detllm, docs/python.md).
// A thin layer over api::LlmSession: the GIL is released while the engine runs (generate,
// update_weights, sleep/wake); detllm::Error becomes detllm.Error (a RuntimeError) carrying the
// engine's message; tensors come in through DLPack (numpy, torch CPU or CUDA).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "api/llm_session.h"
#include "core/error.h"
#include "core/version.h"
#include "kernels/sampling/sampler.h"
#include "model/config.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/openai_schema.h"
#include "tokenizer/tokenizer.h"

namespace nb = nanobind;
using namespace nb::literals;
using detllm::api::GenerateRequest;
using detllm::api::LlmSession;
using detllm::api::NamedTensor;
using detllm::api::RequestOutput;
using detllm::api::SampleOutput;
using detllm::api::SessionOptions;

namespace {

using AnyArray = nb::ndarray<nb::ro>;

// DLPack dtype → the name weight_update.h checks ("int64", "float64": named so the error can).
std::string dtype_name(const nb::dlpack::dtype& d) {
  using code = nb::dlpack::dtype_code;
  const char* kind = "other";
  switch (static_cast<code>(d.code)) {
    case code::Float: kind = "float"; break;
    case code::Bfloat: kind = "bfloat"; break;
    case code::Int: kind = "int"; break;
    case code::UInt: kind = "uint"; break;
    case code::Bool: kind = "bool"; break;
    default: break;
  }
  return fmt::format("{}{}", kind, d.bits);
}

NamedTensor named_tensor(const std::string& name, const AnyArray& a) {
  NamedTensor t;
  t.name = name;
  t.dtype = dtype_name(a.dtype());
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected)
      throw nb::value_error(fmt::format("{}: not contiguous (pass .contiguous() / "
                                        "np.ascontiguousarray)", name).c_str());
    expected *= static_cast<int64_t>(a.shape(i));
  }
  for (size_t i = 0; i < a.ndim(); ++i) t.shape.push_back(static_cast<int64_t>(a.shape(i)));
  t.data = a.data();
  if (a.device_type() == nb::device::cuda::value) {
    t.on_device = true;
    t.device = a.device_id();
  } else if (a.device_type() != nb::device::cpu::value) {
    throw nb::value_error(fmt::format("{}: on a device detllm does not read (DLPack device type "
                                      "{}); pass a CPU or CUDA tensor", name, a.device_type())
                              .c_str());
  }
  return t;
}

// The model's chat template, rendered by the server's code (server/chat_prompt.h): the same
// text /v1/chat/completions and /tokenize make of the same messages, tools and
// chat_template_kwargs, checked by the same parser (openai_schema.h: /tokenize's body).
class ChatRenderer {
 public:
  explicit ChatRenderer(const LlmSession& s) {
    prompt_ = detllm::server::ChatPrompt::from_tokenizer(s.tokenizer());  // throws: no tokenizer
    if (!prompt_) {
      throw nb::value_error(fmt::format("{} has no chat template: pass prompts as text or token "
                                        "ids to generate() instead of chat()", s.model_name())
                                .c_str());
    }
  }
  // body: {"messages": [...], "add_generation_prompt": bool, "tools": [...],
  // "chat_template_kwargs": {...}} as JSON text (the client's key order is kept).
  std::string render(const std::string& body, bool continue_final_message) const {
    try {
      const detllm::server::TokenizeRequest r =
          detllm::server::parse_tokenize_body(body, detllm::server::RequestLimits{});
      if (r.prompt) throw nb::value_error("chat: give messages, not a prompt");
      return prompt_->render(r.messages, r.add_generation_prompt, r.tools, r.chat_template_kwargs,
                             continue_final_message);
    } catch (const detllm::server::ApiError& e) {
      // A bad message or tool, or a conversation the template refuses: the server's 400 text.
      throw nb::value_error(e.what());
    }
  }
  const std::string& source() const { return prompt_->source(); }

 private:
  std::unique_ptr<detllm::server::ChatPrompt> prompt_;
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "detllm engine bindings (use the detllm package, not this module)";
  nb::exception<detllm::Error>(m, "Error", PyExc_RuntimeError);
  m.attr("__version__") = DETLLM_VERSION;

  nb::class_<detllm::SamplingParams>(m, "EngineSamplingParams")
      .def(nb::init<>())
      .def_rw("temperature", &detllm::SamplingParams::temperature)
      .def_rw("top_k", &detllm::SamplingParams::top_k)
      .def_rw("top_p", &detllm::SamplingParams::top_p)
      .def_rw("min_p", &detllm::SamplingParams::min_p)
      .def_rw("seed", &detllm::SamplingParams::seed)
      .def_rw("n_logprobs", &detllm::SamplingParams::n_logprobs)
      .def_rw("presence_penalty", &detllm::SamplingParams::presence_penalty)
      .def_rw("frequency_penalty", &detllm::SamplingParams::frequency_penalty)
      .def_rw("repetition_penalty", &detllm::SamplingParams::repetition_penalty)
      .def_rw("logit_bias", &detllm::SamplingParams::logit_bias);  // ascending token ids

  nb::class_<detllm::LogitBias>(m, "LogitBias")
      .def(nb::init<>())
      .def("__init__",
           [](detllm::LogitBias* self, int32_t token, float bias) {
             new (self) detllm::LogitBias{token, bias};
           },
           "token"_a, "bias"_a)
      .def_rw("token", &detllm::LogitBias::token)
      .def_rw("bias", &detllm::LogitBias::bias);

  nb::class_<GenerateRequest>(m, "GenerateRequest")
      .def(nb::init<>())
      .def_rw("prompt", &GenerateRequest::prompt)
      .def_rw("sampling", &GenerateRequest::sampling)
      .def_rw("max_tokens", &GenerateRequest::max_tokens)
      .def_rw("n", &GenerateRequest::n)
      .def_rw("stop_token_ids", &GenerateRequest::stop_token_ids)
      .def_rw("stop", &GenerateRequest::stop)
      .def_rw("ignore_eos", &GenerateRequest::ignore_eos)
      .def_rw("prompt_logprobs", &GenerateRequest::prompt_logprobs)
      .def_rw("return_routed_experts", &GenerateRequest::return_routed_experts)
      .def_rw("min_tokens", &GenerateRequest::min_tokens)
      .def_rw("allowed_token_ids", &GenerateRequest::allowed_token_ids)
      .def_rw("bad_words", &GenerateRequest::bad_words)
      .def_rw("structured_kind", &GenerateRequest::structured_kind)
      .def_rw("structured_text", &GenerateRequest::structured_text)
      .def_rw("structured_choices", &GenerateRequest::structured_choices)
      .def_rw("speculative", &GenerateRequest::speculative);

  nb::class_<detllm::TokenLogprob>(m, "TokenLogprob")
      .def_ro("token", &detllm::TokenLogprob::token)
      .def_ro("logprob", &detllm::TokenLogprob::logprob);
  nb::class_<detllm::engine::PromptLogprob>(m, "PromptLogprob")
      .def_ro("position", &detllm::engine::PromptLogprob::position)
      .def_ro("token", &detllm::engine::PromptLogprob::token)
      .def_ro("logprob", &detllm::engine::PromptLogprob::logprob)
      .def_ro("top_logprobs", &detllm::engine::PromptLogprob::top_logprobs)
      .def_ro("routed_experts", &detllm::engine::PromptLogprob::routed_experts);
  nb::class_<detllm::engine::Usage>(m, "Usage")
      .def_ro("prompt_tokens", &detllm::engine::Usage::prompt_tokens)
      .def_ro("completion_tokens", &detllm::engine::Usage::completion_tokens)
      .def_ro("cached_tokens", &detllm::engine::Usage::cached_tokens)
      .def_ro("preemptions", &detllm::engine::Usage::preemptions);
  nb::class_<SampleOutput>(m, "SampleOutput")
      .def_ro("token_ids", &SampleOutput::token_ids)
      .def_ro("logprobs", &SampleOutput::logprobs)
      .def_ro("top_logprobs", &SampleOutput::top_logprobs)
      .def_ro("routed_experts", &SampleOutput::routed_experts)
      .def_ro("text", &SampleOutput::text)
      .def_ro("finish_reason", &SampleOutput::finish_reason)
      .def_ro("usage", &SampleOutput::usage);
  nb::class_<RequestOutput>(m, "RequestOutput")
      .def_ro("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_ro("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_ro("outputs", &RequestOutput::outputs)
      .def_ro("seed", &RequestOutput::seed);

  nb::class_<SessionOptions>(m, "SessionOptions")
      .def(nb::init<>())
      .def_rw("model", &SessionOptions::model)
      .def_rw("backend", &SessionOptions::backend)
      .def_rw("mode", &SessionOptions::mode)
      .def_rw("threads", &SessionOptions::threads)
      .def_rw("device", &SessionOptions::device)
      .def_rw("kv_cache_tokens", &SessionOptions::kv_cache_tokens)
      .def_rw("max_tokens_per_step", &SessionOptions::max_tokens_per_step)
      .def_rw("max_seqs", &SessionOptions::max_seqs)
      .def_rw("prefix_cache", &SessionOptions::prefix_cache)
      .def_rw("self_check", &SessionOptions::self_check)
      .def_rw("deterministic", &SessionOptions::deterministic)
      .def_rw("tensor_parallel", &SessionOptions::tensor_parallel)
      .def_rw("quantization", &SessionOptions::quantization)
      .def_rw("kv_cache_dtype", &SessionOptions::kv_cache_dtype)
      .def_rw("speculative_method", &SessionOptions::speculative_method)
      .def_rw("num_speculative_tokens", &SessionOptions::num_speculative_tokens)
      .def_rw("prompt_lookup_min", &SessionOptions::prompt_lookup_min)
      .def_rw("prompt_lookup_max", &SessionOptions::prompt_lookup_max)
      .def_rw("speculative_model", &SessionOptions::speculative_model)
      .def_rw("speculative_adaptive", &SessionOptions::speculative_adaptive);

  nb::class_<LlmSession>(m, "Session")
      .def(nb::init<const SessionOptions&>(), "options"_a, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "generate",
          [](LlmSession& s, std::vector<GenerateRequest> requests, nb::object progress) {
            // After every engine step, with the GIL: pending signals (Ctrl-C) are handled,
            // then progress(done, total) -> bool runs when given. A Python exception in either
            // stops the batch (its requests aborted) and is raised here.
            nb::object pending;  // the Python exception to re-raise, if any
            const detllm::api::ProgressFn fn = [&](int64_t done, int64_t total) {
              nb::gil_scoped_acquire gil;
              try {
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                return progress.is_none() || nb::cast<bool>(progress(done, total));
              } catch (nb::python_error& e) {
                pending = nb::borrow(e.value());
                return false;
              }
            };
            std::vector<RequestOutput> out;
            try {
              nb::gil_scoped_release release;
              out = s.generate(std::move(requests), fn);
            } catch (const detllm::Error&) {
              if (pending.is_valid()) {
                PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(pending.ptr())), pending.ptr());
                throw nb::python_error();
              }
              throw;
            }
            return out;
          },
          "requests"_a, "progress"_a = nb::none())
      .def(
          "update_weights",
          [](LlmSession& s, const std::vector<std::pair<std::string, AnyArray>>& tensors,
             const std::string& version) {
            std::vector<NamedTensor> named;
            named.reserve(tensors.size());
            for (const auto& [name, a] : tensors) named.push_back(named_tensor(name, a));
            nb::gil_scoped_release release;
            s.update_weights(named, version);
          },
          "tensors"_a, "version"_a)
      .def("parameter_shapes", &LlmSession::parameter_shapes)
      .def(
          "read_parameter",
          [](const LlmSession& s, const std::string& name,
             nb::ndarray<float, nb::c_contig, nb::device::cpu> dst) {
            s.read_parameter(name, dst.data(), dst.size());
          },
          "name"_a, "dst"_a)
      .def("sleep", &LlmSession::sleep, "level"_a = 1, nb::call_guard<nb::gil_scoped_release>())
      .def("wake", &LlmSession::wake, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("sleeping", &LlmSession::sleeping)
      .def_prop_ro("forward_reads_blocks", &LlmSession::forward_reads_blocks)
      .def_prop_ro("fingerprint", &LlmSession::fingerprint)
      .def_prop_ro("weight_version", &LlmSession::weight_version)
      .def_prop_ro("model_name", &LlmSession::model_name)
      .def_prop_ro("backend_description", &LlmSession::backend_description)
      .def_prop_ro("self_check_summary", &LlmSession::self_check_summary)
      .def_prop_ro("max_model_len", &LlmSession::max_model_len)
      .def_prop_ro("n_engine_steps_last_call", &LlmSession::n_engine_steps_last_call)
      .def_prop_ro("vocab_size", [](const LlmSession& s) { return s.config().vocab_size; })
      .def_prop_ro("config",
                   [](const LlmSession& s) {
                     const detllm::ModelConfig& c = s.config();
                     nb::dict d;
                     d["vocab_size"] = c.vocab_size;
                     d["dim"] = c.dim;
                     d["n_layers"] = c.n_layers;
                     d["n_heads"] = c.n_heads;
                     d["n_kv_heads"] = c.n_kv_heads;
                     d["head_dim"] = c.head_dim;
                     d["ffn_dim"] = c.ffn_dim;
                     d["rms_eps"] = c.rms_eps;
                     d["rope_theta"] = c.rope_theta;
                     d["max_position"] = c.max_position;
                     d["tied_embeddings"] = c.tied_embeddings;
                     d["qkv_bias"] = c.qkv_bias;
                     d["n_experts"] = c.moe.n_experts;            // 0: no experts
                     d["n_experts_used"] = c.moe.n_experts_used;  // top-k
                     // What a trainer-side reference forward needs to be this model
                     // (detllm/torch/reference.py): the architecture and the MoE rules.
                     d["arch"] = std::string(detllm::model_arch_name(c.arch));
                     d["norm_topk_prob"] = c.moe.renormalize;
                     d["expert_ffn_dim"] = c.moe.expert_ffn_dim;
                     d["shared_expert_ffn_dim"] = c.moe.shared_expert_ffn_dim;
                     d["qk_norm_full"] = c.qk_norm_full;
                     using Rope = detllm::RopeScaling::Type;
                     const Rope rt = c.rope_scaling.type;
                     d["rope_scaling"] = rt == Rope::kNone     ? "none"
                                         : rt == Rope::kLinear ? "linear"
                                                               : "llama3";
                     return d;
                   })
      .def("encode",
           [](const LlmSession& s, const std::string& text, bool add_special_tokens) {
             return s.tokenizer().encode(text, add_special_tokens);
           },
           "text"_a, "add_special_tokens"_a = true)
      .def("decode",
           [](const LlmSession& s, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return s.tokenizer().decode(ids, skip_special_tokens);
           },
           "ids"_a, "skip_special_tokens"_a = false)
      .def("token_text",
           [](const LlmSession& s, int32_t id) {
             // "" for a model without a tokenizer (synthetic:NAME): logprob dicts still work.
             if (!s.has_tokenizer()) return std::string();
             return s.tokenizer().decode(std::span<const int32_t>(&id, 1), false);
           })
      .def("token_to_id",
           [](const LlmSession& s, const std::string& token) -> std::optional<int32_t> {
             return s.tokenizer().token_to_id(token);
           })
      .def("id_to_token",
           [](const LlmSession& s, int32_t id) { return s.tokenizer().id_to_token(id); })
      .def_prop_ro("bos_token_id", [](const LlmSession& s) { return s.tokenizer().bos_id(); })
      .def_prop_ro("has_tokenizer", &LlmSession::has_tokenizer)
      .def_prop_ro("eos_token_id",
                   [](const LlmSession& s) { return s.tokenizer().eos_id(); });

  nb::class_<ChatRenderer>(m, "ChatRenderer")
      .def(nb::init<const LlmSession&>(), "session"_a)
      .def("render", &ChatRenderer::render, "body"_a, "continue_final_message"_a = false)
      .def_prop_ro("source", &ChatRenderer::source);

  // The engine's logprob of one token given a row of logits (the bits the engine reports).
  m.def("logprob_of",
        [](nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu> logits,
           int32_t token) {
          return detllm::logprob_of(std::span<const float>(logits.data(), logits.size()), token);
        },
        "logits"_a, "token"_a);
}
