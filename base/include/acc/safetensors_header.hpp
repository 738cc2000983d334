// The header of a safetensors file, read without LibTorch (for `acc estimate-memory`; libacc may use it too):
// 8 bytes of little-endian length, then a JSON object {"__metadata__": {str: str}, name: {"dtype", "shape",
// "data_offsets": [begin, end]}, ...}; the tensor bytes follow. https://github.com/huggingface/safetensors
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "acc/config.hpp"  // Error

namespace acc::config {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;           // "F32", "BF16", "I64", ...: a dtype safetensors_dtype_size() knows
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t begin = 0, end = 0; // byte range in the data part (after the header)
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in the header's order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data part: 8 + header length
};

// Bytes per element of a safetensors dtype name; nullopt for an unknown one. *floating: a floating point type.
std::optional<int64_t> safetensors_dtype_size(std::string_view dtype, bool* floating = nullptr);

// Parses the header JSON as strictly as the safetensors library validates it: UTF-8 names without NUL, no
// duplicate names, a known dtype, a shape of integers >= 0 and data_offsets of integers as long as shape and dtype
// say, tensors that tile the data part without overlap or hole, and (when data_size is given) nothing after them. Throws Error starting with `where` (the file) and
// naming the entry: "m.safetensors: malformed header: malformed JSON at line 1, column 40: ...".
SafetensorsHeader parse_safetensors_header(std::string_view json, const std::string& where,
                                           std::optional<uint64_t> data_size = std::nullopt);

// The bytes that start a safetensors file holding `tensors` (whose begin/end are their byte ranges in the data part),
// as the safetensors library writes them: the 8-byte length, then the compact JSON padded with spaces to 8 bytes.
std::string format_safetensors_header(const std::vector<SafetensorsEntry>& tensors,
                                      const std::map<std::string, std::string>& metadata);

// Reads the header of the file at `path` (not the tensor data). Throws Error naming the file.
SafetensorsHeader read_safetensors_header(const std::string& path);

}  // namespace acc::config
