// safetensors files: an 8-byte little-endian header length, a JSON header of name -> {dtype, shape,
// data_offsets}, then the raw row-major little-endian bytes. No pickles anywhere.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "data/batch.hpp"

namespace acc::core {

// Written through acc/files.hpp (base/) (a temporary in the same directory, fsync, rename): a crash never
// leaves a half file.
void save_safetensors(const NamedTensors& tensors, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});
// CPU tensors in file order: views on a copy-on-write mapping of the file, which lives as long as any of them
// (copy what you keep for long; the file is never changed). Throws std::ios_base::failure naming the file and
// what is wrong.
NamedTensors load_safetensors(const std::string& path);
// The dtype of a safetensors dtype name ("F32", "BF16", "I64", ...); nullopt for one libacc does not load.
std::optional<at::ScalarType> safetensors_scalar_type(const std::string& dtype);

}  // namespace acc::core
