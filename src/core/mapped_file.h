// A read-only memory-mapped file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error(kIo) naming the path when the file cannot be opened or mapped.
  static MappedFile open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;  // [size_]
  size_t size_ = 0;
};

}  // namespace kestrel
