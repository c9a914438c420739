// StopFilter: the text of one streamed choice, cut at the first stop string as OpenAI does
// (the stop string itself is not returned). While streaming it holds back any tail that could
// still grow into a stop string, so text already sent never has to be taken back.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace detllm::server {

class StopFilter {
 public:
  // include_stop: the matched stop string stays in the text (vLLM's include_stop_str_in_output).
  explicit StopFilter(std::vector<std::string> stops = {}, bool include_stop = false);

  // Adds decoded text; returns the part that is now safe to send (possibly "").
  std::string push(std::string_view text);
  // The choice ended: returns whatever was held back (it is not a stop string's start after
  // all). Later pushes return "".
  std::string finish();
  // A stop string was found; everything from it on is dropped.
  bool stopped() const { return stopped_; }
  // The stop string that matched (the earliest in the text; the first listed on a tie).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string matched_;
  bool include_stop_ = false;
  std::string pending_;  // held back: a suffix that is a prefix of some stop string
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace detllm::server
