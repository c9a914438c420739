// detllm bench workloads: the request lists (prompt token ids + output lengths), which of them
// are deterministic (a share, seeded) and when they arrive (Poisson, seeded). Everything is a
// pure function of its options and seed, so every mode and every deterministic share of one
// invocation runs the very same requests.
//   fixed     every request --input-len prompt tokens, --output-len output tokens
//   long      inputs uniform in 4096…8192 tokens, outputs uniform in 16…64
//   sharegpt  ShareGPT V3 lengths (bench/sharegpt.h; vLLM's filter, as benchmarks/engine_bench.cpp)
//   file      the requests of a request file written by --save-requests (bench/request_file.h)
// Prompts are random token ids, except sharegpt on a model with a tokenizer, where the prompt
// is the tokenized human turn.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/sharegpt.h"

namespace detllm {
class Tokenizer;
}

namespace detllm::bench {

enum class WorkloadKind : uint8_t { kFixed, kLong, kShareGpt, kFile };
std::string_view workload_kind_name(WorkloadKind kind);   // "fixed", "long", "sharegpt", "file"
WorkloadKind parse_workload_kind(std::string_view name);  // throws detllm::Error

struct WorkloadOptions {
  WorkloadKind kind = WorkloadKind::kFixed;
  int32_t n = 32;            // requests
  uint64_t seed = 0;         // lengths, prompt ids, ShareGPT order
  int32_t input_len = 128;   // fixed
  int32_t output_len = 128;  // fixed
  int32_t max_output = 0;    // sharegpt: cap on output lengths; 0 = none
};

struct BenchRequest {
  std::vector<int32_t> prompt;  // (n_prompt) token ids
  int32_t output_len = 0;       // tokens to generate (ignore_eos)
};

struct Workload {
  std::string name;         // workload_kind_name (file: "<original name> (file <file name>)")
  std::string description;  // one line: how the requests were made (part of the conditions)
  std::vector<BenchRequest> requests;
  int32_t vocab_size = 0;    // the vocabulary the ids were drawn from / tokenized with
  std::string counted_with;  // sharegpt: what counted the lengths; "" for random lengths
  uint64_t seed = 0;         // the seed the requests were made with

  int64_t n_prompt_tokens() const;
  int64_t n_output_tokens() const;
  int32_t max_request_tokens() const;  // longest prompt + output
};

struct LengthPair {
  int32_t input = 0;
  int32_t output = 0;
};

std::vector<LengthPair> fixed_lengths(int32_t n, int32_t input, int32_t output);
// Inputs uniform in [4096, 8192], outputs uniform in [16, 64] (seeded, portable).
std::vector<LengthPair> long_lengths(int32_t n, uint64_t seed);
inline constexpr int32_t kLongInputMin = 4096, kLongInputMax = 8192;
inline constexpr int32_t kLongOutputMin = 16, kLongOutputMax = 64;

// Requests of the given lengths with token ids uniform in [0, vocab_size) (seeded). Throws
// detllm::Error, saying what to change, when a request is longer than max_context.
Workload random_token_workload(WorkloadKind kind, const std::vector<LengthPair>& lengths,
                               int32_t vocab_size, int32_t max_context, uint64_t seed);
// fixed or long from the options.
Workload synthetic_workload(const WorkloadOptions& o, int32_t vocab_size, int32_t max_context);

// ShareGPT: conversations in seeded order (portable Fisher–Yates), each prompt and completion
// counted with `counter` — or, with no counter, estimated as ceil(UTF-8 bytes / 4) — kept when
// prompt >= 4, output >= 4, prompt <= 1024, prompt + output <= min(2048, max_context) (vLLM's
// filter), first o.n kept, outputs capped at o.max_output. prompt_from_text: the prompt is the
// counter's token ids (a real model: counter is its tokenizer); otherwise random ids in
// [0, vocab_size) of that length (a synthetic model). Throws when fewer than o.n pass.
Workload sharegpt_workload(const ShareGptFile& file, const std::string& path,
                           const Tokenizer* counter, const std::string& counter_name,
                           bool prompt_from_text, const WorkloadOptions& o, int32_t vocab_size,
                           int32_t max_context);

// Which requests are deterministic for a share in percent (0…100): exactly
// round(n * percent / 100) of them, the first of one seeded permutation — so a larger share
// keeps every request a smaller share made deterministic.
std::vector<bool> deterministic_mask(int32_t n, double percent, uint64_t seed);

// Poisson arrivals at `rate` requests/s: (n) times in seconds, ascending, with independent
// exponential gaps (mean 1/rate): -ln(1 - u) / rate, u from mt19937_64(seed) (portable draws).
std::vector<double> poisson_arrivals(int32_t n, double rate, uint64_t seed);

// Unbiased bounded draw and Fisher–Yates over mt19937_64 (std::shuffle and the std
// distributions are implementation-defined).
void seeded_shuffle(std::vector<size_t>& v, uint64_t seed);

}  // namespace detllm::bench
