// Whole-file reads and crash-safe writes.
#pragma once

#include <cstdio>
#include <string>

namespace kestrel {

// Reads a whole file; Error(kIo) names the path on failure.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string path_join(const std::string& dir, const std::string& name);

// Writes to "<path>.tmp-<pid>" and renames over `path` on commit(); a writer destroyed without
// commit() removes its temporary file, so a failure never leaves a half-written file behind.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
};

// Writes a small file atomically in one call.
void write_file_atomic(const std::string& path, const std::string& contents);

// Atomic directory creation: build in "<dir>.tmp-<pid>", rename into place on commit().
class AtomicDirectory {
 public:
  explicit AtomicDirectory(std::string path);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::string& temp_path() const { return temp_path_; }
  void commit();

 private:
  std::string path_, temp_path_;
  bool committed_ = false;
};

}  // namespace kestrel
