// transformers' names of the floating dtypes a model is kept in ("float32", "bfloat16", "float16"): the one mapping
// for config.json's dtype, from_pretrained's and the device map's "dtype" option, FSDP's mixed-precision policy and
// save_pretrained.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string_view>

namespace acc::core {

inline std::optional<at::ScalarType> float_dtype_named(std::string_view name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return std::nullopt;
}

// What an error says the names are.
inline constexpr const char* kFloatDtypeNames = "float32, bfloat16 or float16";

// The name of a floating dtype of float_dtype_named ("float32" for any other).
inline const char* float_dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bfloat16" : t == at::kHalf ? "float16" : "float32";
}

}  // namespace acc::core
