// Malformed safetensors files and shard indexes: each gives an Error naming the file and the
// tensor or field at fault, never a crash (these also run under ASan/UBSan in scripts/test.sh).
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "malformed_support.h"

namespace kestrel {
namespace {

using nlohmann::json;
using test::expect_error;
using test::fresh_dir;
using test::safetensors_bytes;
using test::write_bytes;

// One F32 tensor "w" [2, 2] (16 bytes): the smallest valid file, before corruption.
const std::string kData16(16, '\x01');

std::string write_file_in(const std::string& test, const std::string& bytes) {
  const std::string path = path_join(fresh_dir(test), "model.safetensors");
  write_bytes(path, bytes);
  return path;
}

std::string header_with(const json& entries) { return entries.dump(); }

json f32(std::vector<int64_t> shape, uint64_t begin, uint64_t end) {
  return {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

void expect_open_error(const std::string& path, std::initializer_list<std::string> needles) {
  std::vector<std::string> all(needles);
  all.push_back(path);
  try {
    SafetensorsFile::open(path);
  } catch (const Error& e) {
    for (const auto& n : all) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " not in: " << e.what();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-kestrel exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error for " << path;
}

TEST(SafetensorsMalformed, ValidBaselineOpens) {
  const std::string path = write_file_in("baseline", safetensors_bytes(header_with({{"w", f32({2, 2}, 0, 16)}}), kData16));
  SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().count("w"), 1u);
  EXPECT_EQ(f.tensors().at("w").nbytes, 16u);
}

TEST(SafetensorsMalformed, EmptyFile) {
  expect_open_error(write_file_in("empty", ""), {"shorter than the 8-byte header length"});
}

TEST(SafetensorsMalformed, TruncatedInsideTheLengthPrefix) {
  expect_open_error(write_file_in("trunc-prefix", std::string("\x10\x00\x00", 3)), {"not a safetensors file"});
}

TEST(SafetensorsMalformed, TruncatedData) {
  // A real fixture cut short: the last tensors' byte ranges run past the end.
  const std::string full = read_file(test::data_path("fixtures/qwen3/model.safetensors"));
  const std::string path = write_file_in("trunc-data", full.substr(0, full.size() - 1000));
  expect_open_error(path, {"truncated file?", "tensor '"});
}

TEST(SafetensorsMalformed, TruncatedInsideTheHeader) {
  const std::string full = read_file(test::data_path("fixtures/qwen3/model.safetensors"));
  expect_open_error(write_file_in("trunc-header", full.substr(0, 200)), {"runs past the end of the file"});
}

TEST(SafetensorsMalformed, HeaderLengthBeyondTheFile) {
  const std::string h = header_with({{"w", f32({2, 2}, 0, 16)}});
  expect_open_error(write_file_in("hdr-beyond", safetensors_bytes(h, kData16, int64_t(h.size() + 17))),
                    {"header length", "runs past the end of the file"});
}

TEST(SafetensorsMalformed, HeaderLengthOver100MB) {
  const std::string h = header_with({{"w", f32({2, 2}, 0, 16)}});
  expect_open_error(write_file_in("hdr-huge", safetensors_bytes(h, kData16, int64_t(200) * 1000 * 1000)),
                    {"exceeds the 100 MB limit"});
}

TEST(SafetensorsMalformed, HeaderLengthAbsurd) {  // 2^64 - 1: must not overflow the bound checks
  expect_open_error(write_file_in("hdr-max", safetensors_bytes("{}", "", -1) .replace(0, 8, std::string(8, '\xff'))),
                    {"exceeds the 100 MB limit"});
}

TEST(SafetensorsMalformed, HeaderLengthZero) {
  expect_open_error(write_file_in("hdr-zero", safetensors_bytes("", "")), {"not a JSON object"});
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  expect_open_error(write_file_in("hdr-notjson", safetensors_bytes("{\"w\": {\"dtype\": F32}}", "")),
                    {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  expect_open_error(write_file_in("hdr-array", safetensors_bytes("[1, 2, 3]", "")), {"not a JSON object"});
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  expect_open_error(write_file_in("entry-scalar", safetensors_bytes(header_with({{"w", 5}}), "")),
                    {"tensor 'w'", "not an object"});
}

TEST(SafetensorsMalformed, MissingDtype) {
  json e = f32({2, 2}, 0, 16);
  e.erase("dtype");
  expect_open_error(write_file_in("no-dtype", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "'dtype'"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  json e = f32({2, 2}, 0, 16);
  e["dtype"] = "F12";
  expect_open_error(write_file_in("bad-dtype", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "unknown dtype 'F12'"});
}

TEST(SafetensorsMalformed, ShapeTimesDtypeIsNotTheByteRange) {
  // [2, 3] F32 is 24 bytes but the range holds 16.
  expect_open_error(write_file_in("size-mismatch", safetensors_bytes(header_with({{"w", f32({2, 3}, 0, 16)}}), kData16)),
                    {"tensor 'w'", "shape x dtype size is 24 bytes", "span 16 bytes"});
}

TEST(SafetensorsMalformed, WrongDtypeSizeForTheRange) {
  json e = f32({2, 2}, 0, 16);
  e["dtype"] = "BF16";  // 8 bytes of BF16 in a 16-byte range
  expect_open_error(write_file_in("dtype-size", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "8 bytes"});
}

TEST(SafetensorsMalformed, OverlappingOffsets) {
  json h = {{"a", f32({2, 2}, 0, 16)}, {"b", f32({2, 2}, 8, 24)}};
  expect_open_error(write_file_in("overlap", safetensors_bytes(h.dump(), std::string(24, '\0'))),
                    {"tensor 'b'", "overlaps"});
}

TEST(SafetensorsMalformed, GappedOffsets) {
  json h = {{"a", f32({2, 2}, 0, 16)}, {"b", f32({2, 2}, 24, 40)}};
  expect_open_error(write_file_in("gap", safetensors_bytes(h.dump(), std::string(40, '\0'))),
                    {"gap of 8 bytes before tensor 'b'"});
}

TEST(SafetensorsMalformed, DataNotStartingAtZero) {
  json h = {{"a", f32({2, 2}, 4, 20)}};
  expect_open_error(write_file_in("gap-start", safetensors_bytes(h.dump(), std::string(20, '\0'))),
                    {"gap of 4 bytes before tensor 'a'"});
}

TEST(SafetensorsMalformed, TrailingBytesAfterTheData) {
  expect_open_error(
      write_file_in("trailing", safetensors_bytes(header_with({{"w", f32({2, 2}, 0, 16)}}), kData16 + "junk")),
      {"trailing bytes"});
}

TEST(SafetensorsMalformed, NegativeShape) {
  json e = f32({2, 2}, 0, 16);
  e["shape"] = {-2, -2};
  expect_open_error(write_file_in("neg-shape", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "shape entries must be non-negative integers"});
}

TEST(SafetensorsMalformed, NonIntegerShape) {
  json e = f32({2, 2}, 0, 16);
  e["shape"] = {2.5, 1.6};
  expect_open_error(write_file_in("float-shape", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "shape entries must be non-negative integers"});
}

TEST(SafetensorsMalformed, ShapeOverflowingSizeMath) {
  json e = f32({2, 2}, 0, 16);
  e["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40};
  expect_open_error(write_file_in("huge-shape", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "absurdly large"});
}

TEST(SafetensorsMalformed, DataOffsetsWrongArity) {
  json e = f32({2, 2}, 0, 16);
  e["data_offsets"] = {0, 8, 16};
  expect_open_error(write_file_in("offsets-arity", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "'data_offsets' must be an array of two integers"});
}

TEST(SafetensorsMalformed, DataOffsetsNegative) {
  json e = f32({2, 2}, 0, 16);
  e["data_offsets"] = {-16, 0};
  expect_open_error(write_file_in("offsets-neg", safetensors_bytes(header_with({{"w", e}}), kData16)),
                    {"tensor 'w'", "data_offsets must be non-negative integers"});
}

TEST(SafetensorsMalformed, DataOffsetsReversed) {
  expect_open_error(write_file_in("offsets-rev", safetensors_bytes(header_with({{"w", f32({2, 2}, 16, 0)}}), kData16)),
                    {"tensor 'w'", "end 0 < begin 16"});
}

TEST(SafetensorsMalformed, MetadataNotStrings) {
  json h = {{"__metadata__", {{"format", 1}}}, {"w", f32({2, 2}, 0, 16)}};
  expect_open_error(write_file_in("metadata", safetensors_bytes(h.dump(), kData16)), {"__metadata__", "'format'"});
}

// ---- sharded checkpoints --------------------------------------------------------------------

// Two valid shards holding "a" and "b", and an index mapping them; `edit` corrupts the index.
std::string sharded_dir(const std::string& name, const std::function<void(json&)>& edit) {
  const std::string dir = fresh_dir(name);
  write_bytes(path_join(dir, "model-00001-of-00002.safetensors"),
              safetensors_bytes(header_with({{"a", f32({2, 2}, 0, 16)}}), kData16));
  write_bytes(path_join(dir, "model-00002-of-00002.safetensors"),
              safetensors_bytes(header_with({{"b", f32({2, 2}, 0, 16)}}), kData16));
  json index = {{"metadata", {{"total_size", 32}}},
                {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  edit(index);
  write_bytes(path_join(dir, "model.safetensors.index.json"), index.dump());
  return dir;
}

TEST(SafetensorsShardedMalformed, ValidBaselineOpens) {
  Checkpoint ck = Checkpoint::open_dir(sharded_dir("shards-ok", [](json&) {}));
  EXPECT_EQ(ck.tensors().size(), 2u);
  EXPECT_EQ(ck.total_bytes(), 32u);
}

TEST(SafetensorsShardedMalformed, IndexNamesAMissingShard) {
  const std::string dir = sharded_dir("shards-missing", [](json& ix) {
    ix["weight_map"]["b"] = "model-00003-of-00002.safetensors";
  });
  expect_error([&] { Checkpoint::open_dir(dir); },
               {"model.safetensors.index.json", "tensor 'b'", "model-00003-of-00002.safetensors", "does not exist"});
}

TEST(SafetensorsShardedMalformed, IndexNamesATensorTheShardLacks) {
  const std::string dir = sharded_dir("shards-lacks", [](json& ix) {
    ix["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  });
  expect_error([&] { Checkpoint::open_dir(dir); },
               {"model.safetensors.index.json", "tensor 'c'", "model-00001-of-00002.safetensors", "does not hold it"});
}

TEST(SafetensorsShardedMalformed, TensorInAShardButNotInTheIndex) {
  const std::string dir = sharded_dir("shards-unlisted", [](json& ix) { ix["weight_map"].erase("b"); });
  // Only shard 1 is opened then; make shard 1 hold an unlisted tensor too.
  write_bytes(path_join(dir, "model-00001-of-00002.safetensors"),
              safetensors_bytes(header_with({{"a", f32({2, 2}, 0, 16)}, {"z", f32({2, 2}, 16, 32)}}),
                                kData16 + kData16));
  expect_error([&] { Checkpoint::open_dir(dir); },
               {"model-00001-of-00002.safetensors", "tensor 'z'", "not listed in model.safetensors.index.json"});
}

TEST(SafetensorsShardedMalformed, TensorInTwoShards) {
  const std::string dir = sharded_dir("shards-dup", [](json&) {});
  write_bytes(path_join(dir, "model-00002-of-00002.safetensors"),
              safetensors_bytes(header_with({{"a", f32({2, 2}, 0, 16)}, {"b", f32({2, 2}, 16, 32)}}),
                                kData16 + kData16));
  expect_error([&] { Checkpoint::open_dir(dir); },
               {"model-00002-of-00002.safetensors", "tensor 'a'", "more than one shard"});
}

TEST(SafetensorsShardedMalformed, IndexShardNameEscapesTheDirectory) {
  const std::string dir = sharded_dir("shards-escape", [](json& ix) { ix["weight_map"]["a"] = "../model.safetensors"; });
  expect_error([&] { Checkpoint::open_dir(dir); }, {"model.safetensors.index.json", "weight_map['a']", "../model"});
}

TEST(SafetensorsShardedMalformed, IndexNotJson) {
  const std::string dir = sharded_dir("shards-notjson", [](json&) {});
  write_bytes(path_join(dir, "model.safetensors.index.json"), "{\"weight_map\": ");
  expect_error([&] { Checkpoint::open_dir(dir); }, {"model.safetensors.index.json", "not valid JSON"});
}

TEST(SafetensorsShardedMalformed, IndexWithoutWeightMap) {
  const std::string dir = sharded_dir("shards-nomap", [](json& ix) { ix.erase("weight_map"); });
  expect_error([&] { Checkpoint::open_dir(dir); }, {"model.safetensors.index.json", "'weight_map'"});
}

TEST(SafetensorsShardedMalformed, IndexValueNotAFileName) {
  const std::string dir = sharded_dir("shards-notname", [](json& ix) { ix["weight_map"]["a"] = 3; });
  expect_error([&] { Checkpoint::open_dir(dir); }, {"model.safetensors.index.json", "weight_map['a']"});
}

TEST(SafetensorsShardedMalformed, CorruptShardIsNamed) {
  const std::string dir = sharded_dir("shards-corrupt", [](json&) {});
  write_bytes(path_join(dir, "model-00002-of-00002.safetensors"),
              safetensors_bytes(header_with({{"b", f32({2, 2}, 0, 16)}}), kData16 + "xx"));
  expect_error([&] { Checkpoint::open_dir(dir); }, {"model-00002-of-00002.safetensors", "trailing bytes"});
}

TEST(SafetensorsShardedMalformed, DirectoryWithoutWeights) {
  const std::string dir = fresh_dir("no-weights");
  expect_error([&] { Checkpoint::open_dir(dir); }, {dir, "no model.safetensors"});
}

}  // namespace
}  // namespace kestrel
