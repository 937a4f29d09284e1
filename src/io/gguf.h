// GGUF v3: memory-mapped reading and streaming writing.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the
// metadata key/values (string key, u32 value type, value); the tensor infos (string name,
// u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type, u64 offset into the data section);
// zero padding to the alignment (`general.alignment`, u32, default 32); the data section, each
// tensor at an aligned offset. Strings are u64 length + bytes; arrays are u32 element type +
// u64 count + elements.
//
// Reading validates everything before use, like the safetensors loader: the header's counts are
// bounded by what the file could hold, every string, array, dimension list and offset is checked
// against the file size before it is read, value and ggml type ids must be known, keys and tensor
// names unique, n_dims in 1..4 with every dimension >= 1 and no overflowing product, block formats
// need a first dimension divisible by their block size, and tensor data must be aligned, inside
// the file and non-overlapping. Every failure names the file and the key, tensor or field.
//
// Shapes: kestrel's GgufTensor::shape is row-major, outermost first (like safetensors, numpy and
// torch); the file stores the reverse (ggml's ne[0] is the innermost, contiguous dimension). A
// weight [out_features, in_features] therefore has ne = {in_features, out_features}, and block
// formats quantize along in_features.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "quant/ggml_type.h"

namespace kestrel {

enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);
size_t gguf_scalar_size(GgufValueType t);  // bytes of a fixed-size scalar; 0 for string and array

// One metadata value: a scalar, a string, or an array of scalars or strings.
class GgufValue {
 public:
  static GgufValue u8(uint8_t v);
  static GgufValue i8(int8_t v);
  static GgufValue u16(uint16_t v);
  static GgufValue i16(int16_t v);
  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue i64(int64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue strings(std::vector<std::string> v);
  static GgufValue i32s(const std::vector<int32_t>& v);
  static GgufValue u32s(const std::vector<uint32_t>& v);
  static GgufValue f32s(const std::vector<float>& v);
  // An array of fixed-size scalars from raw little-endian bytes ([count * scalar size]).
  static GgufValue array_raw(GgufValueType elem, uint64_t count, std::vector<uint8_t> bytes);

  GgufValueType type() const { return type_; }
  GgufValueType elem_type() const { return elem_; }  // arrays only
  bool is_array() const { return type_ == GgufValueType::kArray; }

  // Scalars: the value if it has that kind (any integer type for to_int, which refuses u64
  // values above INT64_MAX; f32/f64 for to_float), else nullopt.
  std::optional<int64_t> to_int() const;
  std::optional<double> to_float() const;
  std::optional<bool> to_bool() const;
  const std::string* str() const;  // nullptr unless a string

  // Arrays.
  uint64_t size() const { return count_; }
  const std::vector<std::string>& strings() const { return strs_; }  // string arrays
  const std::vector<uint8_t>& raw() const { return raw_; }           // numeric arrays, packed
  std::optional<int64_t> int_at(uint64_t i) const;
  std::optional<double> float_at(uint64_t i) const;

  // A short human-readable rendering ("u32 4096", "[151936 strings]", "\"qwen3\"").
  std::string summary() const;

  // Appends the value's encoding (without its type id) to out.
  void encode(std::string* out) const;

 private:
  friend class GgufParser;
  static GgufValue scalar(GgufValueType type, const void* bytes);
  GgufValueType type_ = GgufValueType::kU8;
  GgufValueType elem_ = GgufValueType::kU8;
  uint64_t bits_ = 0;  // scalar bytes, little-endian, zero-extended
  std::string str_;
  std::vector<std::string> strs_;
  std::vector<uint8_t> raw_;
  uint64_t count_ = 0;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first (the reverse of the file's ne[])
  uint64_t offset = 0;         // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; [nbytes]

  int64_t numel() const;
  int64_t row_length() const { return shape.back(); }  // ne[0]: the quantized dimension
};

// Whether `path` is a GGUF file (a regular file starting with the GGUF magic).
bool is_gguf_file(const std::string& path);

class GgufFile {
 public:
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr uint64_t kMaxKeyBytes = 65535;  // the spec's limit on key length
  static constexpr uint64_t kMaxNameBytes = 63;    // ggml's GGML_MAX_NAME (64) less the NUL
  static constexpr int kMaxDims = 4;

  // Maps and validates; throws Error(kBadInput/kUnsupported/kIo) naming the file and field.
  static GgufFile open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }  // file order
  const GgufValue* find(const std::string& key) const;
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // file order
  const GgufTensor* find_tensor(const std::string& name) const;

  // Typed lookups whose errors name the file and key: missing keys and wrong types are bad input.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // accepts integers too
  std::string get_string(const std::string& key) const;

 private:
  MappedFile file_;
  uint32_t version_ = 0, alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
  friend class GgufParser;
};

// Streams a GGUF file: set metadata and declare every tensor (the header needs all offsets),
// begin(), then write each tensor's bytes in declaration order (whole, or in pieces with
// append()), then finish(). Written to a temporary name and renamed on finish(), so a failure
// never leaves a half-written file.
class GgufWriter {
 public:
  explicit GgufWriter(std::string path, uint32_t alignment = GgufFile::kDefaultAlignment);
  ~GgufWriter();

  // Setting a key again replaces its value. `general.alignment` is written from the
  // constructor's alignment (when not the default).
  void set(const std::string& key, GgufValue value);
  // shape: row-major, outermost first. Refuses (bad input) names over 63 bytes, duplicate names,
  // empty or > 4-dim shapes, dimensions < 1, and block formats whose innermost dimension is not
  // a multiple of the block size.
  void declare(const std::string& name, GgmlType type, std::vector<int64_t> shape);
  uint64_t tensor_bytes(const std::string& name) const;

  void begin();
  void write_tensor(const std::string& name, const void* data, uint64_t nbytes);
  // Piecewise: start the next tensor, append its bytes in any number of pieces, end it.
  void start_tensor(const std::string& name);
  void append(const void* data, uint64_t nbytes);
  void end_tensor();
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
