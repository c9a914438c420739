// detllm bench request files (src/bench/request_file.h): save → load gives the same requests
// and keeps where they came from; every broken file is refused with a detllm::Error that names
// file:line and what is wrong, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/request_file.h"
#include "bench/workload.h"
#include "core/error.h"

namespace detllm::bench {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("detllm_request_file_test_" + name)).string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// Requests of mixed lengths (ids in [0, 100)), as a ShareGPT run with a counter would make.
Workload sample_workload() {
  Workload w =
      random_token_workload(WorkloadKind::kFixed, {{5, 3}, {1, 1}, {40, 20}, {17, 2}}, 100, 64, 7);
  w.name = "sharegpt";
  w.description = "sharegpt: 4 requests from mem, lengths counted with a tokenizer…";
  w.counted_with = "the tokenizer of tok.json";
  w.seed = 7;
  return w;
}

TEST(BenchRequestFile, SaveThenLoadGivesTheSameRequests) {
  const std::string path = temp_path("roundtrip.jsonl");
  const Workload w = sample_workload();
  save_requests(path, w, request_file_header(w, "synthetic:tiny-llama", "detllm test"));
  const RequestFile f = load_requests(path, 100, 64);
  ASSERT_EQ(f.workload.requests.size(), w.requests.size());
  for (size_t i = 0; i < w.requests.size(); ++i) {
    EXPECT_EQ(f.workload.requests[i].prompt, w.requests[i].prompt) << i;
    EXPECT_EQ(f.workload.requests[i].output_len, w.requests[i].output_len) << i;
  }
  EXPECT_EQ(f.header.workload, "sharegpt");
  EXPECT_EQ(f.header.description, w.description);
  EXPECT_EQ(f.header.model, "synthetic:tiny-llama");
  EXPECT_EQ(f.header.vocab_size, 100);
  EXPECT_EQ(f.header.tokenizer, "the tokenizer of tok.json");
  EXPECT_EQ(f.header.seed, 7u);
  EXPECT_EQ(f.header.n_requests, 4);
  EXPECT_EQ(f.header.prompt_tokens, w.n_prompt_tokens());
  EXPECT_EQ(f.header.output_tokens, w.n_output_tokens());
  // The report says where the requests came from: original name, file name, description.
  EXPECT_EQ(f.workload.name, "sharegpt (file detllm_request_file_test_roundtrip.jsonl)");
  for (const std::string& part : {std::string("from request file ") + path, w.description,
                                  std::string("synthetic:tiny-llama"), std::string("tok.json")}) {
    EXPECT_NE(f.workload.description.find(part), std::string::npos) << f.workload.description;
  }
  EXPECT_EQ(f.workload.vocab_size, 100);
  EXPECT_EQ(f.workload.counted_with, w.counted_with);

  // Compact: no spaces in the request lines; one line per request after the header.
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  int n_lines = 0;
  while (std::getline(in, line)) {
    ++n_lines;
    EXPECT_EQ(line.find(' '), std::string::npos) << line;
    EXPECT_EQ(line.rfind("{\"prompt\":[", 0), 0u) << line;
  }
  EXPECT_EQ(n_lines, 4);

  // Saved again from the loaded workload: the same request lines.
  const std::string again = temp_path("roundtrip2.jsonl");
  save_requests(again, f.workload, request_file_header(f.workload, "m", "t"));
  const RequestFile g = load_requests(again, 100, 64);
  for (size_t i = 0; i < w.requests.size(); ++i) {
    EXPECT_EQ(g.workload.requests[i].prompt, w.requests[i].prompt);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(again);
}

TEST(BenchRequestFile, FirstNRequests) {
  const std::string path = temp_path("first_n.jsonl");
  const Workload w = sample_workload();
  save_requests(path, w, request_file_header(w, "m", "t"));
  const RequestFile f = load_requests(path, 100, 64, 2);
  ASSERT_EQ(f.workload.requests.size(), 2u);
  EXPECT_EQ(f.workload.requests[1].prompt, w.requests[1].prompt);
  EXPECT_NE(f.workload.description.find("the first 2 of its 4 requests"), std::string::npos)
      << f.workload.description;
  EXPECT_EQ(load_requests(path, 100, 64, 4).workload.requests.size(), 4u);
  try {
    (void)load_requests(path, 100, 64, 5);
    FAIL() << "5 of 4 requests";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--n"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(BenchRequestFile, SaveToAMissingFolderIsRefused) {
  const Workload w = sample_workload();
  EXPECT_THROW(
      save_requests("/nonexistent-detllm-folder/x.jsonl", w, request_file_header(w, "m", "t")),
      Error);
}

const std::string kHeader =
    R"({"format":"detllm-requests-v1","workload":"fixed","description":"d","model":"m",)"
    R"("vocab_size":100,"tokenizer":"","seed":1,"n_requests":2})";
const std::string kRequest = R"({"prompt":[1,2,3],"output_len":4})";

struct BrokenFile {
  const char* name;
  std::string text;
  int line;            // the line the message must name (0: the file as a whole)
  const char* expect;  // part of the message
};

// Every broken file: load_requests (vocabulary 100, context 64) throws detllm::Error naming
// the file (and line) and what is wrong.
TEST(BenchRequestFile, BrokenFilesAreRefusedWithAClearMessage) {
  const std::string deep(200000, '[');
  const std::vector<BrokenFile> cases = {
      {"empty file", "", 0, "empty"},
      {"header not JSON", "{format: detllm}\n" + kRequest + "\n", 1, "not valid JSON"},
      {"header is a list", "[1,2]\n", 1, "must be a JSON object"},
      {"a request first (no header)", kRequest + "\n" + kRequest + "\n", 1,
       "not a detllm request file"},
      {"the ShareGPT dataset", R"([{"id":"x","conversations":[]}])", 1, "ShareGPT dataset"},
      {"the ShareGPT dataset, first line", "[\n  {\"id\": \"x\"}\n]\n", 1, "ShareGPT dataset"},
      {"other format tag",
       R"({"format":"detllm-requests-v2","workload":"w","description":"d","vocab_size":9,)"
       R"("n_requests":1})"
       "\n" +
           kRequest + "\n",
       1, "this detllm reads \"detllm-requests-v1\""},
      {"format not a string", R"({"format":1})", 1, "format 1"},
      {"header without vocab_size",
       R"({"format":"detllm-requests-v1","workload":"w","description":"d","n_requests":1})", 1,
       "\"vocab_size\""},
      {"header without workload",
       R"({"format":"detllm-requests-v1","description":"d","vocab_size":9,"n_requests":1})", 1,
       "\"workload\""},
      {"n_requests zero",
       R"({"format":"detllm-requests-v1","workload":"w","description":"d","vocab_size":9,)"
       R"("n_requests":0})",
       1, "\"n_requests\""},
      {"n_requests a string",
       R"({"format":"detllm-requests-v1","workload":"w","description":"d","vocab_size":9,)"
       R"("n_requests":"2"})",
       1, "\"n_requests\""},
      {"negative seed",
       R"({"format":"detllm-requests-v1","workload":"w","description":"d","vocab_size":9,)"
       R"("n_requests":1,"seed":-1})",
       1, "\"seed\""},
      {"invalid UTF-8 in the header", kHeader.substr(0, kHeader.size() - 1) + ",\"x\":\"\xff\"}\n",
       1, "not valid JSON"},
      {"request cut mid-line", kHeader + "\n" + kRequest + "\n{\"prompt\":[1,2\n", 3,
       "not valid JSON"},
      {"deeply nested garbage", kHeader + "\n" + deep + "\n", 2, "not valid JSON"},
      {"request is a list", kHeader + "\n[1,2,3]\n" + kRequest + "\n", 2, "must be a JSON object"},
      {"no prompt", kHeader + "\n{\"output_len\":4}\n" + kRequest + "\n", 2, "no \"prompt\""},
      {"no output_len", kHeader + "\n{\"prompt\":[1]}\n" + kRequest + "\n", 2, "no \"output_len\""},
      {"unknown field", kHeader + "\n" + kRequest + "\n{\"prompt\":[1],\"output_len\":1,\"x\":1}\n",
       3, "unexpected field \"x\""},
      {"output_len zero", kHeader + "\n{\"prompt\":[1],\"output_len\":0}\n" + kRequest + "\n", 2,
       "\"output_len\" must be an integer >= 1"},
      {"output_len negative", kHeader + "\n{\"prompt\":[1],\"output_len\":-3}\n" + kRequest + "\n",
       2, "\"output_len\" must be an integer >= 1"},
      {"output_len fractional",
       kHeader + "\n{\"prompt\":[1],\"output_len\":1.5}\n" + kRequest + "\n", 2,
       "\"output_len\" must be an integer >= 1"},
      {"output_len huge",
       kHeader + "\n{\"prompt\":[1],\"output_len\":18446744073709551615}\n" + kRequest + "\n", 2,
       "context"},
      {"empty prompt", kHeader + "\n{\"prompt\":[],\"output_len\":1}\n" + kRequest + "\n", 2,
       "the prompt is empty"},
      {"prompt not a list",
       kHeader + "\n{\"prompt\":\"hello\",\"output_len\":1}\n" + kRequest + "\n", 2,
       "list of token ids"},
      {"negative token id", kHeader + "\n" + kRequest + "\n{\"prompt\":[1,-1],\"output_len\":1}\n",
       3, "prompt[1] = -1 is outside the vocabulary"},
      {"token id = vocabulary",
       kHeader + "\n{\"prompt\":[100],\"output_len\":1}\n" + kRequest + "\n", 2,
       "prompt[0] = 100 is outside the vocabulary of the model loaded (ids 0…99)"},
      {"token id beyond int64",
       kHeader + "\n{\"prompt\":[18446744073709551615],\"output_len\":1}\n" + kRequest + "\n", 2,
       "outside the vocabulary"},
      {"fractional token id", kHeader + "\n{\"prompt\":[3.5],\"output_len\":1}\n" + kRequest + "\n",
       2, "prompt[0] is 3.5, not a token id"},
      {"string token id", kHeader + "\n{\"prompt\":[\"5\"],\"output_len\":1}\n" + kRequest + "\n",
       2, "not a token id"},
      {"nested token id", kHeader + "\n{\"prompt\":[[5]],\"output_len\":1}\n" + kRequest + "\n", 2,
       "not a token id"},
      {"longer than the context",
       kHeader + "\n" + kRequest + "\n{\"prompt\":[1,2,3,4,5,6,7,8,9,10],\"output_len\":55}\n", 3,
       "context of 64 tokens"},
      {"fewer requests than the header", kHeader + "\n" + kRequest + "\n", 0,
       "the header says 2 requests, the file holds 1"},
      {"more requests than the header",
       kHeader + "\n" + kRequest + "\n" + kRequest + "\n" + kRequest + "\n", 4,
       "more requests than the header's n_requests = 2"},
      {"blank line", kHeader + "\n" + kRequest + "\n\n" + kRequest + "\n", 3, "empty line"},
      {"prompt_tokens edited",
       R"({"format":"detllm-requests-v1","workload":"w","description":"d","vocab_size":100,)"
       R"("n_requests":1,"prompt_tokens":4})"
       "\n" +
           kRequest + "\n",
       0, "counts 4 prompt tokens, the requests hold 3"},
  };
  const std::string path = temp_path("broken.jsonl");
  for (const BrokenFile& c : cases) {
    write_file(path, c.text);
    try {
      (void)load_requests(path, 100, 64);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
      const std::string where = c.line > 0 ? path + ":" + std::to_string(c.line) + ":" : path;
      EXPECT_EQ(msg.rfind(where, 0), 0u) << c.name << ": " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << ": not a detllm::Error: " << e.what();
    }
  }
  std::filesystem::remove(path);
  try {
    (void)load_requests(path, 100, 64);
    FAIL() << "a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open the request file"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("--save-requests"), std::string::npos);
  }
}

// A request line whose ids are valid: a file with CRLF line ends loads too.
TEST(BenchRequestFile, CrLfLineEndsAreAccepted) {
  const std::string path = temp_path("crlf.jsonl");
  write_file(path, kHeader + "\r\n" + kRequest + "\r\n" + kRequest + "\r\n");
  const RequestFile f = load_requests(path, 100, 64);
  ASSERT_EQ(f.workload.requests.size(), 2u);
  EXPECT_EQ(f.workload.requests[0].prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(f.workload.requests[0].output_len, 4);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace detllm::bench
