// libFuzzer target for the GGUF reader: parse arbitrary bytes, then read every metadata value
// through the typed getters and load every tensor. Any outcome but success or detllm::Error
// (a crash, a sanitizer report, another exception type) is a bug.
// Build and run: scripts/fuzz.sh 60 gguf_fuzz
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using detllm::Error;
  std::unique_ptr<detllm::GgufFile> file;
  try {
    file = detllm::GgufFile::parse(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  for (const auto& [key, value] : file->metadata()) {
    // Each getter either returns or throws detllm::Error for the wrong type.
    try {
      (void)file->get_int(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_float(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_string(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_bool(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_int_array(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_float_array(key);
    } catch (const Error&) {
    }
    try {
      (void)file->get_string_array(key);
    } catch (const Error&) {
    }
  }
  for (const detllm::GgufTensorInfo& t : file->tensor_infos()) {
    try {
      const detllm::HostTensor h = file->load_f32(t.name);
      if (static_cast<int64_t>(h.data.size()) != h.numel()) __builtin_trap();
    } catch (const Error&) {  // unsupported type
    }
    try {  // kept as stored: whole rows of whole blocks, and they decode without reading past
      detllm::HostTensor s = file->load_stored(t.name);
      if (static_cast<int64_t>(s.n_bytes()) != detllm::dtype_row_bytes(s.dtype, s.numel()))
        __builtin_trap();
      detllm::dequantize_tensor(s);
      if (static_cast<int64_t>(s.data.size()) != s.numel()) __builtin_trap();
    } catch (const Error&) {
    }
  }
  return 0;
}
