#include "core/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kestrel {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, path, ": cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(ErrorKind::kIo, path, ": read failed");
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string path_join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = cat(path_, ".tmp-", ::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) fail(ErrorKind::kIo, temp_path_, ": cannot create: ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, file_) != n)
    fail(ErrorKind::kIo, temp_path_, ": write failed: ", std::strerror(errno));
}

void AtomicFile::commit() {
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0)
    fail(ErrorKind::kIo, temp_path_, ": flush failed: ", std::strerror(errno));
  std::fclose(file_);
  file_ = nullptr;
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    std::remove(temp_path_.c_str());
    fail(ErrorKind::kIo, "cannot rename ", temp_path_, " to ", path_, ": ", std::strerror(err));
  }
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

AtomicDirectory::AtomicDirectory(std::string path) : path_(std::move(path)) {
  while (!path_.empty() && path_.back() == '/') path_.pop_back();
  if (path_.empty()) bad_input("output directory path is empty");
  temp_path_ = cat(path_, ".tmp-", ::getpid());
  std::error_code ec;
  std::filesystem::remove_all(temp_path_, ec);
  if (!std::filesystem::create_directories(temp_path_, ec) || ec)
    fail(ErrorKind::kIo, temp_path_, ": cannot create directory: ", ec.message());
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove_all(temp_path_, ec);
  }
}

void AtomicDirectory::commit() {
  std::error_code ec;
  if (std::filesystem::exists(path_, ec)) {
    if (!std::filesystem::is_directory(path_, ec))
      bad_input(path_, ": exists and is not a directory");
    std::filesystem::remove_all(path_, ec);
    if (ec) fail(ErrorKind::kIo, path_, ": cannot replace existing directory: ", ec.message());
  }
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) fail(ErrorKind::kIo, "cannot rename ", temp_path_, " to ", path_, ": ", ec.message());
  committed_ = true;
}

}  // namespace kestrel
