// Helpers for the malformed-checkpoint tests: build small (broken) safetensors files and model
// directories under the test scratch space, and check that loading them fails cleanly.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel::test {

// A fresh, empty directory under the scratch space.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = work_path("malformed/" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Raw safetensors bytes: the 8-byte little-endian length (`declared_len`, default the real one),
// the header text, then `data`.
inline std::string safetensors_bytes(const std::string& header, const std::string& data, int64_t declared_len = -1) {
  uint64_t len = declared_len < 0 ? header.size() : uint64_t(declared_len);
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + data;
}

inline void write_bytes(const std::string& path, const std::string& bytes) { write_file_atomic(path, bytes); }

// Copies a fixture checkpoint (config, generation config, weights) into a fresh directory.
inline std::string copy_fixture(const std::string& family, const std::string& name) {
  const std::string dir = fresh_dir(name);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
    const std::string src = data_path("fixtures/" + family + "/" + f);
    if (file_exists(src)) std::filesystem::copy_file(src, path_join(dir, f));
  }
  return dir;
}

// Reads a safetensors file into its header and data section.
inline void split_safetensors(const std::string& path, nlohmann::json* header, std::string* data) {
  const std::string bytes = read_file(path);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  *header = nlohmann::json::parse(bytes.substr(8, len));
  *data = bytes.substr(8 + len);
}

// Rewrites a (valid) safetensors file through `edit`, which may change the header and the data.
inline void edit_safetensors(const std::string& path, const std::function<void(nlohmann::json&, std::string&)>& edit) {
  nlohmann::json header;
  std::string data;
  split_safetensors(path, &header, &data);
  edit(header, data);
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // keep the data 8-aligned, as writers do
  write_bytes(path, safetensors_bytes(text, data));
}

// Removes one tensor and its bytes, shifting the later offsets so the file stays valid.
inline void drop_tensor(nlohmann::json& header, std::string& data, const std::string& name) {
  const uint64_t begin = header[name]["data_offsets"][0], end = header[name]["data_offsets"][1];
  data.erase(begin, end - begin);
  header.erase(name);
  for (auto& [key, entry] : header.items()) {
    if (key == "__metadata__") continue;
    for (auto& o : entry["data_offsets"]) {
      if (o.get<uint64_t>() >= end) o = o.get<uint64_t>() - (end - begin);
    }
  }
}

// Edits config.json in place (the text config of a multimodal wrapper when `text` is set).
inline void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = path_join(dir, "config.json");
  nlohmann::json cfg = nlohmann::json::parse(read_file(path));
  edit(cfg);
  write_bytes(path, cfg.dump(2));
}

// Runs `fn`, which must throw kestrel::Error whose message contains every one of `needles`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-kestrel exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error thrown";
}

}  // namespace kestrel::test
