// StopFilter: text is cut at the first stop string, and a tail that could still become a stop
// string is held back until it cannot — for any way the text is split into pushes.
#include <gtest/gtest.h>

#include "server/stop_filter.h"

namespace detllm::server {
namespace {

std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                bool* stopped = nullptr) {
  StopFilter f(stops);
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  out += f.finish();
  if (stopped) *stopped = f.stopped();
  return out;
}

TEST(StopFilter, NoStopsPassesEverything) {
  StopFilter f;
  EXPECT_EQ(f.push("abc"), "abc");
  EXPECT_EQ(f.push(""), "");
  EXPECT_EQ(f.finish(), "");
  EXPECT_FALSE(f.stopped());
}

TEST(StopFilter, CutsAtTheStopString) {
  bool stopped = false;
  EXPECT_EQ(run({"END"}, {"hello E", "N", "D world"}, &stopped), "hello ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(run({"b", "a"}, {"xxab"}), "xx");  // the earliest occurrence wins
}

TEST(StopFilter, HoldsBackAPossibleStart) {
  StopFilter f({"STOP"});
  EXPECT_EQ(f.push("abc ST"), "abc ");
  EXPECT_EQ(f.push("O"), "");
  EXPECT_EQ(f.push("x"), "STOx");  // it was not a stop string after all
  EXPECT_EQ(f.push("S"), "");
  EXPECT_EQ(f.finish(), "S");  // the end releases what was held
}

TEST(StopFilter, EveryPushSplitGivesTheSameText) {
  const std::string text = "one, two; three END four";
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      const std::string out =
          run({"END", "; t"}, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_EQ(out, "one, two") << a << " " << b;
    }
  }
}

TEST(StopFilter, NothingAfterStopOrFinish) {
  StopFilter f({"x"});
  EXPECT_EQ(f.push("axb"), "a");
  EXPECT_EQ(f.push("more"), "");
  EXPECT_EQ(f.finish(), "");
  StopFilter g({"zz"});
  EXPECT_EQ(g.push("a"), "a");
  EXPECT_EQ(g.finish(), "");
  EXPECT_EQ(g.push("b"), "");
}

TEST(StopFilter, MultiByteTextStaysWhole) {
  // "é" is 2 bytes; the stop string starts with it, so the hold-back keeps it whole.
  StopFilter f({"éé"});
  EXPECT_EQ(f.push("café"), "caf");
  EXPECT_EQ(f.push("s"), "és");
}

}  // namespace
}  // namespace detllm::server

namespace detllm::server {
namespace {

TEST(StopFilter, NamesTheStopStringThatMatched) {
  StopFilter f({"zz", "b", "cd"});
  EXPECT_EQ(f.push("acd"), "a");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "cd");
  StopFilter tie({"bc", "b"});  // both start at 1: the first listed
  EXPECT_EQ(tie.push("abc"), "a");
  EXPECT_EQ(tie.matched(), "bc");
  StopFilter none({"x"});
  none.push("abc");
  none.finish();
  EXPECT_EQ(none.matched(), "");
}

}  // namespace
}  // namespace detllm::server
