// detllm bench request files: a built workload (any kind) saved as JSON lines, so a compact
// file can travel where its source cannot (the 125 MB ShareGPT dataset to a GPU machine) and
// be run again with `--workload file --requests FILE`, its conditions kept.
//
//   line 1   header: {"format":"detllm-requests-v1","workload":"sharegpt","description":"...",
//            "model":"synthetic:llama-3.1-8b","vocab_size":128256,"tokenizer":"...","seed":0,
//            "n_requests":4096,"prompt_tokens":...,"output_tokens":...,"created_by":"..."}
//   line 2…  one request per line: {"prompt":[ids...],"output_len":N}
//
// Compact JSON (no spaces), one object per line, '\n' line ends. The loader checks every line
// against the model actually loaded (vocabulary, context) and throws detllm::Error naming
// file:line, what is wrong and what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bench/workload.h"

namespace detllm::bench {

inline constexpr std::string_view kRequestFileFormat = "detllm-requests-v1";

// The header line: where the requests came from.
struct RequestFileHeader {
  std::string workload;     // the original workload's name (sharegpt, fixed, long, …)
  std::string description;  // the original workload's description (its conditions)
  std::string model;        // --model the file was made with ("default", "synthetic:…", a path)
  int32_t vocab_size = 0;   // the vocabulary the ids are in (random ids / the tokenizer's)
  std::string tokenizer;    // what counted the lengths; "" = lengths not counted from text
  uint64_t seed = 0;        // the seed the requests were made with
  int64_t n_requests = 0, prompt_tokens = 0, output_tokens = 0;
  std::string created_by;  // "detllm VERSION, commit C"
};

// The header for `w`: its name, description, vocabulary, counter, seed and token counts.
RequestFileHeader request_file_header(const Workload& w, const std::string& model,
                                      const std::string& created_by);

// Writes the header and every request of `w` to `path` (replacing it). Throws detllm::Error
// when the file cannot be written.
void save_requests(const std::string& path, const Workload& w, const RequestFileHeader& header);

struct RequestFile {
  RequestFileHeader header;
  Workload workload;  // name "<original> (file <file name>)", description says where from
};

// Reads `path` and checks every request against the model that will run it: token ids in
// [0, vocab_size), prompt + output <= max_context, lengths >= 1, the header's count. n > 0:
// keep the first n requests (every line is still checked); n = 0: all. Throws detllm::Error.
RequestFile load_requests(const std::string& path, int32_t vocab_size, int32_t max_context,
                          int32_t n = 0);

}  // namespace detllm::bench
