#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace kestrel {

MappedFile MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::kIo, path, ": cannot open: ", std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(ErrorKind::kIo, path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad_input(path, ": not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = size_t(st.st_size);
  if (file.size_ > 0) {
    void* ptr = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (ptr == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(ErrorKind::kIo, path, ": cannot mmap ", file.size_, " bytes: ", std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(ptr);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kestrel
