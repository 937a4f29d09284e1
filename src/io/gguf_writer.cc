// GgufWriter: streams metadata, tensor infos and tensor data into a GGUF v3 file.
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"

namespace kestrel {
namespace {

void put_u32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void put_string(std::string* out, const std::string& s) {
  put_u64(out, s.size());
  out->append(s);
}

}  // namespace

struct GgufWriter::Impl {
  struct Declared {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;  // row-major
    uint64_t nbytes = 0;
    uint64_t offset = 0;  // in the data section, aligned
  };
  std::string path;
  uint32_t alignment;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::map<std::string, size_t> keys;
  std::vector<Declared> tensors;
  std::map<std::string, size_t> names;
  std::unique_ptr<AtomicFile> file;
  uint64_t written = 0;      // bytes written to the file so far
  size_t next = 0;           // next tensor to write
  bool in_tensor = false;
  uint64_t tensor_written = 0;

  void pad_to_alignment() {
    static const char zeros[256] = {};
    uint64_t pad = (alignment - written % alignment) % alignment;
    while (pad > 0) {
      const uint64_t n = std::min<uint64_t>(pad, sizeof(zeros));
      file->write(zeros, n);
      written += n;
      pad -= n;
    }
  }
};

GgufWriter::GgufWriter(std::string path, uint32_t alignment) : impl_(std::make_unique<Impl>()) {
  KCHECK_MSG(alignment > 0 && (alignment & (alignment - 1)) == 0, "GGUF alignment ", alignment,
             " is not a power of two");
  impl_->path = std::move(path);
  impl_->alignment = alignment;
  if (alignment != GgufFile::kDefaultAlignment) set("general.alignment", GgufValue::u32(alignment));
}

GgufWriter::~GgufWriter() = default;

void GgufWriter::set(const std::string& key, GgufValue value) {
  KCHECK_MSG(!impl_->file, "GGUF metadata set after begin(): ", key);
  KCHECK_MSG(!key.empty() && key.size() <= GgufFile::kMaxKeyBytes, "bad GGUF key '", key, "'");
  KCHECK_MSG(!(value.is_array() && value.elem_type() == GgufValueType::kArray), "nested arrays: ", key);
  auto it = impl_->keys.find(key);
  if (it != impl_->keys.end()) {
    KCHECK_MSG(key != "general.alignment", "general.alignment comes from the GgufWriter constructor");
    impl_->metadata[it->second].second = std::move(value);
    return;
  }
  impl_->keys[key] = impl_->metadata.size();
  impl_->metadata.emplace_back(key, std::move(value));
}

void GgufWriter::declare(const std::string& name, GgmlType type, std::vector<int64_t> shape) {
  KCHECK_MSG(!impl_->file, "GGUF tensor declared after begin(): ", name);
  if (name.empty() || name.size() > GgufFile::kMaxNameBytes)
    bad_input(impl_->path, ": tensor name '", name, "' must be 1..", GgufFile::kMaxNameBytes, " bytes");
  if (impl_->names.count(name)) bad_input(impl_->path, ": tensor '", name, "' declared twice");
  if (shape.empty() || shape.size() > size_t(GgufFile::kMaxDims))
    bad_input(impl_->path, ": tensor '", name, "' has ", shape.size(), " dimensions (GGUF allows 1..4)");
  unsigned __int128 numel = 1;
  for (int64_t d : shape) {
    if (d < 1) bad_input(impl_->path, ": tensor '", name, "' has a dimension ", d, " < 1");
    numel *= uint64_t(d);
    if (numel > (unsigned __int128)(1) << 62) bad_input(impl_->path, ": tensor '", name, "' is absurdly large");
  }
  const GgmlTypeTraits& tr = ggml_traits(type);
  if (shape.back() % tr.block_size != 0)
    bad_input(impl_->path, ": tensor '", name, "' cannot be stored as ", tr.name, ": its row length ", shape.back(),
              " is not a multiple of ", tr.block_size);
  Impl::Declared t{name, type, std::move(shape)};
  t.nbytes = uint64_t(numel) / uint64_t(tr.block_size) * uint64_t(tr.type_size);
  impl_->names[name] = impl_->tensors.size();
  impl_->tensors.push_back(std::move(t));
}

uint64_t GgufWriter::tensor_bytes(const std::string& name) const {
  auto it = impl_->names.find(name);
  KCHECK_MSG(it != impl_->names.end(), "undeclared tensor ", name);
  return impl_->tensors[it->second].nbytes;
}

void GgufWriter::begin() {
  KCHECK(!impl_->file);
  std::string head;
  head.append("GGUF", 4);
  put_u32(&head, GgufFile::kVersion);
  put_u64(&head, impl_->tensors.size());
  put_u64(&head, impl_->metadata.size());
  for (const auto& [key, value] : impl_->metadata) {
    put_string(&head, key);
    put_u32(&head, uint32_t(value.type()));
    value.encode(&head);
  }
  uint64_t offset = 0;
  const uint64_t align = impl_->alignment;
  for (auto& t : impl_->tensors) {
    t.offset = offset;
    offset += (t.nbytes + align - 1) / align * align;
    put_string(&head, t.name);
    put_u32(&head, uint32_t(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put_u64(&head, uint64_t(*it));  // ne[0] first
    put_u32(&head, uint32_t(t.type));
    put_u64(&head, t.offset);
  }
  impl_->file = std::make_unique<AtomicFile>(impl_->path);
  impl_->file->write(head);
  impl_->written = head.size();
  impl_->pad_to_alignment();
}

void GgufWriter::start_tensor(const std::string& name) {
  KCHECK_MSG(impl_->file, "GGUF tensor written before begin(): ", name);
  KCHECK_MSG(!impl_->in_tensor, "GGUF tensor ", name, " started inside another");
  KCHECK_MSG(impl_->next < impl_->tensors.size() && impl_->tensors[impl_->next].name == name, "GGUF tensor ", name,
             " written out of declaration order");
  impl_->in_tensor = true;
  impl_->tensor_written = 0;
}

void GgufWriter::append(const void* data, uint64_t nbytes) {
  KCHECK(impl_->in_tensor);
  const auto& t = impl_->tensors[impl_->next];
  KCHECK_MSG(impl_->tensor_written + nbytes <= t.nbytes, "GGUF tensor ", t.name, " given more than its ", t.nbytes,
             " bytes");
  impl_->file->write(data, nbytes);
  impl_->written += nbytes;
  impl_->tensor_written += nbytes;
}

void GgufWriter::end_tensor() {
  KCHECK(impl_->in_tensor);
  const auto& t = impl_->tensors[impl_->next];
  KCHECK_MSG(impl_->tensor_written == t.nbytes, "GGUF tensor ", t.name, " got ", impl_->tensor_written, " of ",
             t.nbytes, " bytes");
  impl_->pad_to_alignment();
  impl_->in_tensor = false;
  ++impl_->next;
}

void GgufWriter::write_tensor(const std::string& name, const void* data, uint64_t nbytes) {
  start_tensor(name);
  append(data, nbytes);
  end_tensor();
}

void GgufWriter::finish() {
  KCHECK_MSG(impl_->file, "GgufWriter::finish() before begin()");
  KCHECK_MSG(!impl_->in_tensor && impl_->next == impl_->tensors.size(), "GGUF file finished with ",
             impl_->tensors.size() - impl_->next, " declared tensors unwritten");
  impl_->file->commit();
  impl_->file.reset();
}

}  // namespace kestrel
