// EXPECT_BAD(call, param, needle): the call throws an ApiError 400 whose param is `param` and
// whose message contains `needle` — for the request-validation tests of tests/server.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"

namespace detllm::server {

// The ApiError a call throws (status 0 when none).
template <typename Fn>
ApiError error_of(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "no error");
}

}  // namespace detllm::server

#define EXPECT_BAD(body_call, param_name, needle)                                   \
  do {                                                                              \
    const ::detllm::server::ApiError e_ =                                           \
        ::detllm::server::error_of([&] { (void)(body_call); });                     \
    EXPECT_EQ(e_.status(), 400) << e_.what();                                       \
    EXPECT_EQ(e_.param(), param_name) << e_.what();                                 \
    EXPECT_NE(std::string(e_.what()).find(needle), std::string::npos) << e_.what(); \
  } while (0)
