#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

namespace kestrel {

using nlohmann::json;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile st;
  st.file_ = MappedFile::open(path);
  const uint8_t* base = st.file_.data();
  const uint64_t size = st.file_.size();
  if (size < 8) bad_input(path, ": not a safetensors file: ", size, " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian on every platform kestrel runs on
  if (header_len > kMaxHeaderBytes)
    bad_input(path, ": safetensors header length ", header_len, " exceeds the 100 MB limit");
  if (header_len > size - 8)
    bad_input(path, ": safetensors header length ", header_len, " runs past the end of the file (",
              size, " bytes): truncated file?");
  const char* hdr = reinterpret_cast<const char*>(base + 8);
  if (header_len < 2 || hdr[0] != '{')
    bad_input(path, ": safetensors header is not a JSON object");
  json header;
  try {
    header = json::parse(hdr, hdr + header_len);
  } catch (const json::exception& e) {
    bad_input(path, ": safetensors header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) bad_input(path, ": safetensors header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) bad_input(path, ": __metadata__ must be an object of strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) bad_input(path, ": __metadata__ value '", m.key(), "' is not a string");
        st.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) bad_input(path, ": tensor '", name, "': entry is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string())
      bad_input(path, ": tensor '", name, "': missing string field 'dtype'");
    if (!entry.contains("shape") || !entry["shape"].is_array())
      bad_input(path, ": tensor '", name, "': missing array field 'shape'");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      bad_input(path, ": tensor '", name, "': 'data_offsets' must be an array of two integers");
    TensorInfo info;
    info.name = name;
    std::string dtype_str = entry["dtype"].get<std::string>();
    if (!dtype_from_name(dtype_str, &info.dtype))
      bad_input(path, ": tensor '", name, "': unknown dtype '", dtype_str, "'");
    unsigned __int128 numel = 1;
    for (const json& d : entry["shape"]) {
      if (!d.is_number_unsigned())
        bad_input(path, ": tensor '", name, "': shape entries must be non-negative integers");
      uint64_t v = d.get<uint64_t>();
      numel *= v;
      if (numel > (unsigned __int128)(1) << 62)
        bad_input(path, ": tensor '", name, "': shape is absurdly large");
      info.shape.push_back(int64_t(v));
    }
    for (const json& o : entry["data_offsets"]) {
      if (!o.is_number_unsigned())
        bad_input(path, ": tensor '", name, "': data_offsets must be non-negative integers");
    }
    uint64_t begin = entry["data_offsets"][0].get<uint64_t>();
    uint64_t end = entry["data_offsets"][1].get<uint64_t>();
    if (end < begin) bad_input(path, ": tensor '", name, "': data_offsets end ", end, " < begin ", begin);
    unsigned __int128 expect = numel * dtype_size(info.dtype);
    if (expect != end - begin)
      bad_input(path, ": tensor '", name, "': shape x dtype size is ", uint64_t(expect), " bytes but data_offsets span ",
                end - begin, " bytes");
    if (end > data_size)
      bad_input(path, ": tensor '", name, "': data_offsets [", begin, ", ", end, ") run past the end of the data (",
                data_size, " bytes): truncated file?");
    info.data = base + data_start + begin;
    info.nbytes = end - begin;
    info.file = &st.file_.path();
    ranges.push_back({begin, end, name});
    st.tensors_.emplace(name, std::move(info));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const Range& r : ranges) {
    if (r.begin < cursor)
      bad_input(path, ": tensor '", r.name, "' overlaps the previous tensor (starts at ", r.begin, ", previous ends at ",
                cursor, ")");
    if (r.begin > cursor)
      bad_input(path, ": gap of ", r.begin - cursor, " bytes before tensor '", r.name, "' (data must be contiguous)");
    cursor = r.end;
  }
  if (cursor != data_size)
    bad_input(path, ": tensor data ends at byte ", cursor, " of the data section but the file holds ", data_size,
              " bytes after the header (trailing bytes)");
  // The map holds pointers to file_.path(); they stay valid across moves of the std::string
  // only if we fix them up after the move, so Checkpoint keeps files behind unique_ptr.
  return st;
}

Checkpoint Checkpoint::open_file(const std::string& path) {
  Checkpoint ck;
  auto slash = path.find_last_of('/');
  ck.dir_ = slash == std::string::npos ? "." : path.substr(0, slash);
  ck.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(path)));
  for (auto& [name, info] : ck.files_.back()->tensors()) {
    const_cast<TensorInfo&>(info).file = &ck.files_.back()->path();
    ck.index_[name] = &info;
  }
  return ck;
}

Checkpoint Checkpoint::open_dir(const std::string& dir) {
  std::string index_path = path_join(dir, "model.safetensors.index.json");
  std::string single = path_join(dir, "model.safetensors");
  if (!file_exists(index_path)) {
    if (!file_exists(single))
      bad_input(dir, ": no model.safetensors or model.safetensors.index.json in the model directory");
    Checkpoint ck = open_file(single);
    ck.dir_ = dir;
    return ck;
  }
  json index;
  try {
    index = json::parse(read_file(index_path));
  } catch (const json::exception& e) {
    bad_input(index_path, ": not valid JSON: ", e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    bad_input(index_path, ": expected an object with a 'weight_map' object");
  Checkpoint ck;
  ck.dir_ = dir;
  std::map<std::string, SafetensorsFile*> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it.value().is_string()) bad_input(index_path, ": weight_map['", it.key(), "'] is not a file name");
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "..")
      bad_input(index_path, ": weight_map['", it.key(), "'] names '", shard, "', not a file in the model directory");
    if (!shards.count(shard)) {
      if (!file_exists(path_join(dir, shard)))
        bad_input(index_path, ": tensor '", it.key(), "' is mapped to shard ", shard, ", which does not exist in ", dir);
      ck.files_.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(path_join(dir, shard))));
      shards[shard] = ck.files_.back().get();
    }
    SafetensorsFile* file = shards[shard];
    auto t = file->tensors().find(it.key());
    if (t == file->tensors().end())
      bad_input(index_path, ": tensor '", it.key(), "' is mapped to ", shard, " but that shard does not hold it");
    ck.index_[it.key()] = &t->second;
  }
  for (auto& file : ck.files_) {
    for (auto& [name, info] : file->tensors()) {
      const_cast<TensorInfo&>(info).file = &file->path();
      auto it = ck.index_.find(name);
      if (it == ck.index_.end())
        bad_input(file->path(), ": tensor '", name, "' is not listed in model.safetensors.index.json");
      if (it->second != &info)
        bad_input(file->path(), ": tensor '", name, "' appears in more than one shard");
    }
  }
  return ck;
}

Checkpoint Checkpoint::from_tensors(std::string source, std::vector<TensorInfo> tensors,
                                   std::shared_ptr<const void> keep_alive) {
  Checkpoint ck;
  ck.dir_ = source;
  ck.source_ = std::make_unique<std::string>(std::move(source));
  ck.keep_alive_ = std::move(keep_alive);
  for (TensorInfo& t : tensors) {
    t.file = ck.source_.get();
    ck.owned_.push_back(std::make_unique<TensorInfo>(std::move(t)));
    KCHECK_MSG(ck.index_.emplace(ck.owned_.back()->name, ck.owned_.back().get()).second, "duplicate tensor ",
               ck.owned_.back()->name);
  }
  return ck;
}

const TensorInfo* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (auto& [name, info] : index_) total += info->nbytes;
  return total;
}

// ---- writer ----------------------------------------------------------------------------------

struct SafetensorsWriter::Pending {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes;
};

struct SafetensorsWriter::Impl {
  std::unique_ptr<AtomicFile> file;
};

SafetensorsWriter::SafetensorsWriter(std::string path) : path_(std::move(path)), impl_(std::make_unique<Impl>()) {}
SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::declare(const std::string& name, DType dtype, std::vector<int64_t> shape) {
  KCHECK(!impl_->file);
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= uint64_t(d);
  pending_.push_back(std::make_unique<Pending>(Pending{name, dtype, std::move(shape), n}));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

void SafetensorsWriter::begin() {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (auto& p : pending_) {
    header[p->name] = {{"dtype", std::string(dtype_name(p->dtype))},
                       {"shape", p->shape},
                       {"data_offsets", {offset, offset + p->nbytes}}};
    offset += p->nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // align the data section to 8 bytes
  uint64_t len = text.size();
  impl_->file = std::make_unique<AtomicFile>(path_);
  impl_->file->write(&len, 8);
  impl_->file->write(text);
}

void SafetensorsWriter::write_tensor(const std::string& name, const void* data, uint64_t nbytes) {
  KCHECK(partial_ == 0);
  KCHECK_MSG(next_ < pending_.size() && pending_[next_]->nbytes == nbytes, "tensor ", name, " byte count mismatch");
  write_chunk(name, data, nbytes);
}

void SafetensorsWriter::write_chunk(const std::string& name, const void* data, uint64_t nbytes) {
  KCHECK(impl_->file);
  KCHECK_MSG(next_ < pending_.size() && pending_[next_]->name == name, "tensor ", name, " written out of order");
  KCHECK_MSG(partial_ + nbytes <= pending_[next_]->nbytes, "tensor ", name, " written past its declared size");
  impl_->file->write(data, nbytes);
  partial_ += nbytes;
  if (partial_ == pending_[next_]->nbytes) {
    partial_ = 0;
    ++next_;
  }
}

void SafetensorsWriter::finish() {
  KCHECK(impl_->file);
  KCHECK_MSG(next_ == pending_.size(), "not every declared tensor was written");
  impl_->file->commit();
}

}  // namespace kestrel
