// safetensors: memory-mapped reading (single file or sharded) and streaming writing.
//
// Reading validates the file the way the reference implementation does before anything is
// used: header length bounded (<= 100 MB) and inside the file, a JSON object header, known
// dtypes, shape x dtype size == byte range, ranges contiguous, in order and non-overlapping,
// and the data ending exactly at the end of the file. Every failure names file and tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace kestrel {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; [nbytes]
  uint64_t nbytes = 0;
  const std::string* file = nullptr;  // the file it came from, for error messages

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

  // Maps and validates; throws Error(kBadInput/kIo) naming the file (and tensor).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All the safetensors of a checkpoint directory: model.safetensors, or the shards named by
// model.safetensors.index.json (every listed shard must exist and hold what the index says).
class Checkpoint {
 public:
  static Checkpoint open_dir(const std::string& dir);
  static Checkpoint open_file(const std::string& path);
  // Tensors that live elsewhere (a GGUF file, converted buffers): `keep_alive` owns the memory
  // their data points into; `source` names them in error messages.
  static Checkpoint from_tensors(std::string source, std::vector<TensorInfo> tensors,
                                 std::shared_ptr<const void> keep_alive);

  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, const TensorInfo*>& tensors() const { return index_; }
  const std::string& dir() const { return dir_; }
  uint64_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
  std::vector<std::unique_ptr<TensorInfo>> owned_;  // from_tensors()
  std::unique_ptr<std::string> source_;             // what owned_[i].file points to
  std::shared_ptr<const void> keep_alive_;
};

// Streams tensors into a safetensors file: declare every tensor first (the header needs all
// offsets), then write their bytes in order. Written to a temporary name, renamed on finish().
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path);
  ~SafetensorsWriter();

  void declare(const std::string& name, DType dtype, std::vector<int64_t> shape);
  void set_metadata(const std::string& key, const std::string& value);
  // Writes the header; afterwards call write_tensor for every declared tensor in declaration order.
  void begin();
  void write_tensor(const std::string& name, const void* data, uint64_t nbytes);
  // Streams a tensor in pieces: consecutive calls for the same tensor append until its declared
  // byte count is reached, so a large tensor never has to be held in memory whole.
  void write_chunk(const std::string& name, const void* data, uint64_t nbytes);
  void finish();

 private:
  struct Pending;
  std::string path_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<std::string, std::string> metadata_;
  size_t next_ = 0;
  uint64_t partial_ = 0;  // bytes of pending_[next_] written so far by write_chunk
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
