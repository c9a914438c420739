// What the loader tests of tests/formats share: the fixture folder (tests/data/loaders, made by
// scripts/ref/make_loader_fixtures.py) and reading a file whole.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace detllm::testing {

inline const std::string kLoaderDataDir = std::string(DETLLM_SOURCE_DIR) + "/tests/data/loaders/";

// The bytes of `path` (a failed expectation, and no bytes, when it cannot be opened).
inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace detllm::testing
