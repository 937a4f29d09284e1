// GgufValue: construction, typed access and encoding of GGUF metadata values.
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"

namespace kestrel {
namespace {

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kU16: case GgufValueType::kI16:
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kU64: case GgufValueType::kI64:
      return true;
    default: return false;
  }
}

// Interprets `size` little-endian bytes as the integer type t.
std::optional<int64_t> decode_int(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kU8: return int64_t(p[0]);
    case GgufValueType::kI8: return int64_t(int8_t(p[0]));
    case GgufValueType::kU16: { uint16_t v; std::memcpy(&v, p, 2); return int64_t(v); }
    case GgufValueType::kI16: { int16_t v; std::memcpy(&v, p, 2); return int64_t(v); }
    case GgufValueType::kU32: { uint32_t v; std::memcpy(&v, p, 4); return int64_t(v); }
    case GgufValueType::kI32: { int32_t v; std::memcpy(&v, p, 4); return int64_t(v); }
    case GgufValueType::kU64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      if (v > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return int64_t(v);
    }
    case GgufValueType::kI64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return std::nullopt;
  }
}

std::optional<double> decode_float(GgufValueType t, const uint8_t* p) {
  if (t == GgufValueType::kF32) { float v; std::memcpy(&v, p, 4); return double(v); }
  if (t == GgufValueType::kF64) { double v; std::memcpy(&v, p, 8); return v; }
  return std::nullopt;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: return "u8";
    case GgufValueType::kI8: return "i8";
    case GgufValueType::kU16: return "u16";
    case GgufValueType::kI16: return "i16";
    case GgufValueType::kU32: return "u32";
    case GgufValueType::kI32: return "i32";
    case GgufValueType::kF32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "u64";
    case GgufValueType::kI64: return "i64";
    case GgufValueType::kF64: return "f64";
  }
  return "?";
}

size_t gguf_scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

GgufValue GgufValue::scalar(GgufValueType type, const void* bytes) {
  GgufValue v;
  v.type_ = type;
  std::memcpy(&v.bits_, bytes, gguf_scalar_size(type));
  return v;
}

GgufValue GgufValue::u8(uint8_t v) { return scalar(GgufValueType::kU8, &v); }
GgufValue GgufValue::i8(int8_t v) { return scalar(GgufValueType::kI8, &v); }
GgufValue GgufValue::u16(uint16_t v) { return scalar(GgufValueType::kU16, &v); }
GgufValue GgufValue::i16(int16_t v) { return scalar(GgufValueType::kI16, &v); }
GgufValue GgufValue::u32(uint32_t v) { return scalar(GgufValueType::kU32, &v); }
GgufValue GgufValue::i32(int32_t v) { return scalar(GgufValueType::kI32, &v); }
GgufValue GgufValue::u64(uint64_t v) { return scalar(GgufValueType::kU64, &v); }
GgufValue GgufValue::i64(int64_t v) { return scalar(GgufValueType::kI64, &v); }
GgufValue GgufValue::f32(float v) { return scalar(GgufValueType::kF32, &v); }
GgufValue GgufValue::f64(double v) { return scalar(GgufValueType::kF64, &v); }
GgufValue GgufValue::boolean(bool v) {
  const uint8_t b = v ? 1 : 0;
  return scalar(GgufValueType::kBool, &b);
}

GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type_ = GgufValueType::kString;
  out.str_ = std::move(v);
  return out;
}

GgufValue GgufValue::strings(std::vector<std::string> v) {
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.elem_ = GgufValueType::kString;
  out.count_ = v.size();
  out.strs_ = std::move(v);
  return out;
}

GgufValue GgufValue::array_raw(GgufValueType elem, uint64_t count, std::vector<uint8_t> bytes) {
  KCHECK_MSG(gguf_scalar_size(elem) > 0, "array_raw needs a fixed-size element type");
  KCHECK(bytes.size() == count * gguf_scalar_size(elem));
  GgufValue out;
  out.type_ = GgufValueType::kArray;
  out.elem_ = elem;
  out.count_ = count;
  out.raw_ = std::move(bytes);
  return out;
}

namespace {
template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
}  // namespace

GgufValue GgufValue::i32s(const std::vector<int32_t>& v) { return array_raw(GgufValueType::kI32, v.size(), to_bytes(v)); }
GgufValue GgufValue::u32s(const std::vector<uint32_t>& v) { return array_raw(GgufValueType::kU32, v.size(), to_bytes(v)); }
GgufValue GgufValue::f32s(const std::vector<float>& v) { return array_raw(GgufValueType::kF32, v.size(), to_bytes(v)); }

std::optional<int64_t> GgufValue::to_int() const {
  if (!is_integer_type(type_)) return std::nullopt;
  uint8_t b[8];
  std::memcpy(b, &bits_, 8);
  return decode_int(type_, b);
}

std::optional<double> GgufValue::to_float() const {
  uint8_t b[8];
  std::memcpy(b, &bits_, 8);
  return decode_float(type_, b);
}

std::optional<bool> GgufValue::to_bool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return bits_ != 0;
}

const std::string* GgufValue::str() const { return type_ == GgufValueType::kString ? &str_ : nullptr; }

std::optional<int64_t> GgufValue::int_at(uint64_t i) const {
  if (!is_array() || i >= count_ || !is_integer_type(elem_)) return std::nullopt;
  return decode_int(elem_, raw_.data() + i * gguf_scalar_size(elem_));
}

std::optional<double> GgufValue::float_at(uint64_t i) const {
  if (!is_array() || i >= count_) return std::nullopt;
  return decode_float(elem_, raw_.data() + i * gguf_scalar_size(elem_));
}

std::string GgufValue::summary() const {
  std::ostringstream s;
  if (is_array()) {
    s << "[" << count_ << " x " << gguf_value_type_name(elem_) << "]";
  } else if (type_ == GgufValueType::kString) {
    s << '"' << (str_.size() > 60 ? str_.substr(0, 57) + "..." : str_) << '"';
  } else if (auto i = to_int()) {
    s << gguf_value_type_name(type_) << " " << *i;
  } else if (auto f = to_float()) {
    s << gguf_value_type_name(type_) << " " << *f;
  } else if (auto b = to_bool()) {
    s << (*b ? "true" : "false");
  } else {
    s << gguf_value_type_name(type_) << " " << bits_;  // u64 above INT64_MAX
  }
  return s.str();
}

namespace {
void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void put_string(std::string* out, const std::string& s) {
  put_u64(out, s.size());
  out->append(s);
}
}  // namespace

void GgufValue::encode(std::string* out) const {
  if (type_ == GgufValueType::kString) return put_string(out, str_);
  if (!is_array()) {
    out->append(reinterpret_cast<const char*>(&bits_), gguf_scalar_size(type_));
    return;
  }
  const uint32_t elem = uint32_t(elem_);
  out->append(reinterpret_cast<const char*>(&elem), 4);
  put_u64(out, count_);
  if (elem_ == GgufValueType::kString) {
    for (const auto& s : strs_) put_string(out, s);
  } else {
    out->append(reinterpret_cast<const char*>(raw_.data()), raw_.size());
  }
}

}  // namespace kestrel
