// The real-model conformance tests (default_model_suite.h) on the CPU backend of this binary
// (suite_make_ops in conformance_test.cpp). Run: build/tests/test_conformance
// --gtest_filter='DefaultModel*'.
#include "conformance/default_model_suite.h"
