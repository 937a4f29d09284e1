// GgufFile::open: parses and validates a GGUF v3 file before anything in it is used.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"

namespace kestrel {

// Reads the mapping front to back; every read is checked against the file size first, and
// every failure names the file, the section and the key or tensor being read.
class GgufParser {
 public:
  GgufParser(GgufFile& f) : f_(f), base_(f.file_.data()), size_(f.file_.size()), path_(f.file_.path()) {}

  void parse();

 private:
  uint64_t left() const { return size_ - pos_; }
  void need(uint64_t n, const std::string& what) {
    if (n > left())
      bad_input(path_, ": truncated file: ", what, " at byte ", pos_, " needs ", n, " bytes but only ", left(),
                " remain (file size ", size_, ")");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what, uint64_t max_len) {
    const uint64_t len = read<uint64_t>(what + " length");
    if (len > max_len) bad_input(path_, ": ", what, " is ", len, " bytes long, over the limit of ", max_len);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }
  GgufValue read_value(GgufValueType type, const std::string& key);
  GgufValueType read_type(const std::string& key, const char* role);
  void parse_tensor_info(uint64_t index);
  void check_layout();

  GgufFile& f_;
  const uint8_t* base_;
  uint64_t size_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

GgufValueType GgufParser::read_type(const std::string& key, const char* role) {
  const uint32_t t = read<uint32_t>(std::string("the ") + role + " type of key '" + key + "'");
  if (t > uint32_t(GgufValueType::kF64))
    bad_input(path_, ": key '", key, "' has unknown ", role, " type ", t, " (known: 0..12)");
  return GgufValueType(t);
}

GgufValue GgufParser::read_value(GgufValueType type, const std::string& key) {
  const std::string what = "the value of key '" + key + "'";
  if (type == GgufValueType::kString) return GgufValue::string(read_string(what, left()));
  if (type != GgufValueType::kArray) {
    const size_t n = gguf_scalar_size(type);
    need(n, what);
    if (type == GgufValueType::kBool && base_[pos_] > 1)
      bad_input(path_, ": key '", key, "' is a bool with byte value ", int(base_[pos_]), " (must be 0 or 1)");
    GgufValue v = GgufValue::scalar(type, base_ + pos_);
    pos_ += n;
    return v;
  }
  const GgufValueType elem = read_type(key, "array element");
  if (elem == GgufValueType::kArray) unsupported(path_, ": key '", key, "' is an array of arrays (not supported)");
  const uint64_t count = read<uint64_t>("the array length of key '" + key + "'");
  // Every element takes at least min_size bytes, so the count is bounded by what is left.
  const uint64_t min_size = elem == GgufValueType::kString ? 8 : gguf_scalar_size(elem);
  if (count > left() / min_size)
    bad_input(path_, ": key '", key, "' declares an array of ", count, " ", gguf_value_type_name(elem),
              " elements, more than the ", left(), " bytes left in the file could hold: truncated or corrupt file");
  if (elem == GgufValueType::kString) {
    std::vector<std::string> strs;
    strs.reserve(std::min<uint64_t>(count, 1 << 16));  // the count is only bounded by the file size
    for (uint64_t i = 0; i < count; ++i)
      strs.push_back(read_string("element " + std::to_string(i) + " of key '" + key + "'", left()));
    return GgufValue::strings(std::move(strs));
  }
  const uint64_t nbytes = count * min_size;
  if (elem == GgufValueType::kBool) {
    for (uint64_t i = 0; i < count; ++i)
      if (base_[pos_ + i] > 1)
        bad_input(path_, ": key '", key, "' element ", i, " is a bool with byte value ", int(base_[pos_ + i]));
  }
  std::vector<uint8_t> bytes(base_ + pos_, base_ + pos_ + nbytes);
  pos_ += nbytes;
  return GgufValue::array_raw(elem, count, std::move(bytes));
}

void GgufParser::parse_tensor_info(uint64_t index) {
  const std::string which = "tensor info " + std::to_string(index);
  GgufTensor t;
  t.name = read_string("the name of " + which, GgufFile::kMaxNameBytes);
  if (t.name.empty()) bad_input(path_, ": ", which, " has an empty name");
  if (f_.tensor_index_.count(t.name)) bad_input(path_, ": duplicate tensor name '", t.name, "'");
  const std::string tn = "tensor '" + t.name + "'";
  const uint32_t n_dims = read<uint32_t>("the n_dims of " + tn);
  if (n_dims < 1 || n_dims > uint32_t(GgufFile::kMaxDims))
    bad_input(path_, ": ", tn, " has n_dims ", n_dims, " (must be 1..", GgufFile::kMaxDims, ")");
  std::vector<int64_t> ne(n_dims);
  unsigned __int128 numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t v = read<uint64_t>("dimension " + std::to_string(d) + " of " + tn);
    if (v == 0) bad_input(path_, ": ", tn, " has dimension ", d, " equal to 0");
    if (v > (uint64_t(1) << 62)) bad_input(path_, ": ", tn, " has dimension ", d, " = ", v, ", absurdly large");
    numel *= v;
    if (numel > (unsigned __int128)(1) << 62)
      bad_input(path_, ": ", tn, " has dimensions whose product overflows (over 2^62 elements)");
    ne[d] = int64_t(v);
  }
  const uint32_t type_id = read<uint32_t>("the ggml type of " + tn);
  const auto traits = ggml_type_traits(type_id);
  if (!traits) bad_input(path_, ": ", tn, " has unknown ggml type id ", type_id);
  t.type = traits->type;
  if (ne[0] % traits->block_size != 0)
    bad_input(path_, ": ", tn, " is ", traits->name, " (blocks of ", traits->block_size,
              ") but its first dimension ", ne[0], " is not a multiple of the block size");
  t.offset = read<uint64_t>("the data offset of " + tn);
  unsigned __int128 nbytes = (unsigned __int128)(numel / uint64_t(traits->block_size)) * uint64_t(traits->type_size);
  t.nbytes = uint64_t(nbytes);
  t.shape.assign(ne.rbegin(), ne.rend());
  f_.tensor_index_[t.name] = f_.tensors_.size();
  f_.tensors_.push_back(std::move(t));
}

void GgufParser::check_layout() {
  const uint64_t align = f_.alignment_;
  const uint64_t data_start = (pos_ + align - 1) / align * align;
  f_.data_offset_ = data_start;
  if (f_.tensors_.empty()) return;
  if (data_start > size_)
    bad_input(path_, ": truncated file: the data section would start at byte ", data_start, " past the end (", size_,
              " bytes)");
  const uint64_t data_size = size_ - data_start;
  std::vector<const GgufTensor*> order;
  for (GgufTensor& t : f_.tensors_) {
    if (t.offset % align != 0)
      bad_input(path_, ": tensor '", t.name, "' has data offset ", t.offset, ", not a multiple of the alignment ",
                align);
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      bad_input(path_, ": tensor '", t.name, "' data [", t.offset, ", ", uint64_t(t.offset + t.nbytes),
                ") runs past the end of the data section (", data_size, " bytes): truncated file?");
    t.data = base_ + data_start + t.offset;
    order.push_back(&t);
  }
  std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& prev = *order[i - 1];
    if (order[i]->offset < prev.offset + prev.nbytes)
      bad_input(path_, ": tensor '", order[i]->name, "' (data at ", order[i]->offset, ") overlaps tensor '", prev.name,
                "' (data [", prev.offset, ", ", prev.offset + prev.nbytes, "))");
  }
}

void GgufParser::parse() {
  need(4, "the magic");
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    bad_input(path_, ": not a GGUF file (magic bytes ", std::hex, int(base_[0]), " ", int(base_[1]), " ",
              int(base_[2]), " ", int(base_[3]), ", expected \"GGUF\")");
  }
  pos_ = 4;
  const uint32_t version = read<uint32_t>("the version");
  if (version != GgufFile::kVersion) {
    if (version == 0x03000000u) unsupported(path_, ": big-endian GGUF files are not supported");
    if (version == 1 || version == 2)
      unsupported(path_, ": GGUF version ", version, " is not supported (kestrel reads version 3; re-convert the model)");
    bad_input(path_, ": unknown GGUF version ", version, " (kestrel reads version 3)");
  }
  f_.version_ = version;
  const uint64_t n_tensors = read<uint64_t>("the tensor count");
  const uint64_t n_kv = read<uint64_t>("the metadata count");
  // A key/value takes at least 8 + 1 + 4 + 1 bytes and a tensor info 8 + 1 + 4 + 8 + 4 + 8.
  if (n_kv > left() / 14)
    bad_input(path_, ": header declares ", n_kv, " metadata key/values, more than the file (", size_,
              " bytes) could hold: truncated or corrupt file");
  if (n_tensors > left() / 33)
    bad_input(path_, ": header declares ", n_tensors, " tensors, more than the file (", size_,
              " bytes) could hold: truncated or corrupt file");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = read_string("the key of metadata entry " + std::to_string(i), GgufFile::kMaxKeyBytes);
    if (key.empty()) bad_input(path_, ": metadata entry ", i, " has an empty key");
    if (f_.key_index_.count(key)) bad_input(path_, ": duplicate metadata key '", key, "'");
    const GgufValueType type = read_type(key, "value");
    GgufValue value = read_value(type, key);
    f_.key_index_[key] = f_.metadata_.size();
    f_.metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = f_.find("general.alignment")) {
    if (a->type() != GgufValueType::kU32)
      bad_input(path_, ": general.alignment must be a u32, found ", gguf_value_type_name(a->type()));
    const uint64_t align = uint64_t(*a->to_int());
    if (align == 0 || (align & (align - 1)) != 0)
      bad_input(path_, ": general.alignment ", align, " is not a power of two");
    f_.alignment_ = uint32_t(align);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) parse_tensor_info(i);
  check_layout();
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.file_ = MappedFile::open(path);
  GgufParser(f).parse();
  return f;
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
const GgufValue& require(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) bad_input(f.path(), ": metadata key '", key, "' is missing");
  return *v;
}
}  // namespace

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  auto i = v.to_int();
  if (!i) bad_input(path(), ": metadata key '", key, "' is ", v.summary(), ", expected an integer");
  return *i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  if (auto f = v.to_float()) return *f;
  if (auto i = v.to_int()) return double(*i);
  bad_input(path(), ": metadata key '", key, "' is ", v.summary(), ", expected a number");
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  if (!v.str()) bad_input(path(), ": metadata key '", key, "' is ", v.summary(), ", expected a string");
  return *v.str();
}

bool is_gguf_file(const std::string& path) {
  if (!file_exists(path) || is_directory(path)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace kestrel
