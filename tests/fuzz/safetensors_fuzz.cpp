// libFuzzer target for the safetensors reader: parse arbitrary bytes, then take the raw view
// of and load every tensor. Any outcome but success or detllm::Error (a crash, a sanitizer
// report, another exception type) is a bug.
// Build and run: scripts/fuzz.sh 60 safetensors_fuzz
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using detllm::Error;
  std::unique_ptr<detllm::SafetensorsFile> file;
  try {
    file = detllm::SafetensorsFile::parse(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  for (const detllm::SafetensorsTensorInfo& t : file->tensor_infos()) {
    if (t.offset + t.n_bytes > size) __builtin_trap();  // validated: inside the input
    try {
      const detllm::RawTensorView v = file->raw_view(t.name);
      const detllm::HostTensor h = file->load_f32(t.name);
      if (static_cast<int64_t>(h.data.size()) != h.numel() ||
          v.n_bytes != static_cast<uint64_t>(h.numel()) * detllm::dtype_size(v.dtype)) {
        __builtin_trap();
      }
    } catch (const Error&) {  // a dtype detllm does not load
    }
  }
  return 0;
}
