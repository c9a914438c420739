// A read-only memory map of a whole file (RAII). Weight files are mapped rather than read so
// that opening a multi-GB model costs no copy and tensors are paged in only when loaded.
// Failures (missing file, directory, mmap error) throw detllm::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace detllm {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to data() == nullptr, size() == 0. Anything but
  // a regular file (a FIFO, a directory, a device) is refused at once, without blocking.
  static MappedFile open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole of a regular file as a string (config and tokenizer JSON), through open() above:
// a FIFO or directory in its place is refused with the same message, never waited on.
std::string read_regular_file(const std::string& path);

}  // namespace detllm
