// Library facts, errors and tensors.
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>
#include <dlfcn.h>

#include <cstring>

#include "runtime/build_info.hpp"
#include "guard.hpp"
#include "handles.hpp"

using acc::capi::guarded;
using acc::capi::need;

namespace {

const std::pair<acc_dtype, at::ScalarType> kDtypes[] = {{ACC_FLOAT32, at::kFloat},     {ACC_FLOAT64, at::kDouble},
                                                        {ACC_BFLOAT16, at::kBFloat16}, {ACC_FLOAT16, at::kHalf},
                                                        {ACC_INT32, at::kInt},         {ACC_INT64, at::kLong},
                                                        {ACC_UINT8, at::kByte},        {ACC_BOOL, at::kBool}};

at::ScalarType to_scalar_type(acc_dtype d) {
  for (auto& [a, s] : kDtypes)
    if (a == d) return s;
  throw std::invalid_argument("unknown dtype " + std::to_string(d) + " (ACC_FLOAT32 .. ACC_BOOL are 0..7)");
}

acc_dtype to_acc_dtype(at::ScalarType s) {
  for (auto& [a, t] : kDtypes)
    if (t == s) return a;
  throw std::invalid_argument("tensor dtype " + std::string(c10::toString(s)) + " has no acc_dtype");
}

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&acc_version), &info) && info.dli_fname) return info.dli_fname;
  return "libacc";
}

}  // namespace

extern "C" {

const char* acc_version(void) noexcept { return ACC_VERSION_STRING; }

acc_status acc_abi_check(int32_t abi_version) noexcept {
  acc::capi::clear_error();
  if (abi_version == ACC_ABI_VERSION) return ACC_OK;
  try {
    acc::capi::set_error(ACC_ERR_ABI_MISMATCH, "acc_abi_check: built for ABI " + std::to_string(abi_version) +
                                                   ", but libacc " + ACC_VERSION_STRING + " loaded from " +
                                                   library_path() + " serves ABI " + std::to_string(ACC_ABI_VERSION));
  } catch (...) {
  }
  return ACC_ERR_ABI_MISMATCH;
}

const char* acc_build_info(void) noexcept { return acc::core::build_info().c_str(); }

const char* acc_status_name(acc_status s) noexcept {
  switch (s) {
    case ACC_OK: return "ACC_OK";
    case ACC_ERR_INVALID_ARGUMENT: return "ACC_ERR_INVALID_ARGUMENT";
    case ACC_ERR_INVALID_CONFIG: return "ACC_ERR_INVALID_CONFIG";
    case ACC_ERR_INVALID_STATE: return "ACC_ERR_INVALID_STATE";
    case ACC_ERR_UNSUPPORTED: return "ACC_ERR_UNSUPPORTED";
    case ACC_ERR_IO: return "ACC_ERR_IO";
    case ACC_ERR_OUT_OF_MEMORY: return "ACC_ERR_OUT_OF_MEMORY";
    case ACC_ERR_DISTRIBUTED: return "ACC_ERR_DISTRIBUTED";
    case ACC_ERR_TORCH: return "ACC_ERR_TORCH";
    case ACC_ERR_ABI_MISMATCH: return "ACC_ERR_ABI_MISMATCH";
    case ACC_ERR_BUSY: return "ACC_ERR_BUSY";
    case ACC_ERR_CALLBACK: return "ACC_ERR_CALLBACK";
    case ACC_ERR_INTERNAL: return "ACC_ERR_INTERNAL";
    default: return "ACC_ERR_UNKNOWN";
  }
}

acc_status acc_tensor_from_host(const void* data, size_t nbytes, acc_dtype dtype, const int64_t* shape, int32_t ndim,
                                acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    if (ndim < 0 || ndim > 64) throw std::invalid_argument("ndim " + std::to_string(ndim) + " outside 0..64");
    if (ndim > 0) need(shape, "shape");
    std::vector<int64_t> dims(shape, shape + ndim);
    int64_t numel = 1;
    for (int32_t i = 0; i < ndim; ++i) {
      if (dims[i] < 0) throw std::invalid_argument("shape[" + std::to_string(i) + "] is negative");
      numel *= dims[i];
    }
    at::Tensor t = at::empty(dims, at::TensorOptions().dtype(to_scalar_type(dtype)));
    if (t.nbytes() != nbytes)
      throw std::invalid_argument("nbytes is " + std::to_string(nbytes) + " but shape and dtype need " +
                                  std::to_string(t.nbytes()));
    if (nbytes) std::memcpy(t.data_ptr(), need(data, "data"), nbytes);
    *out = new acc_tensor{std::move(t)};
  });
}

acc_status acc_tensor_to_host(const acc_tensor* t, void* dst, size_t nbytes) noexcept {
  return guarded(__func__, [&] {
    at::Tensor c = need(t, "tensor")->t.detach().to(at::kCPU).contiguous();
    if (c.nbytes() != nbytes)
      throw std::invalid_argument("nbytes is " + std::to_string(nbytes) + " but the tensor holds " +
                                  std::to_string(c.nbytes()) + " bytes");
    if (nbytes) std::memcpy(need(dst, "dst"), c.data_ptr(), nbytes);
  });
}

void acc_tensor_destroy(acc_tensor* t) noexcept { acc::capi::destroy_handle(t, __func__); }

acc_status acc_tensor_ndim(const acc_tensor* t, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = static_cast<int32_t>(need(t, "tensor")->t.dim()); });
}

acc_status acc_tensor_shape(const acc_tensor* t, int64_t* shape, int32_t capacity) noexcept {
  return guarded(__func__, [&] {
    const at::Tensor& x = need(t, "tensor")->t;
    if (capacity < x.dim())
      throw std::invalid_argument("capacity " + std::to_string(capacity) + " is less than ndim " +
                                  std::to_string(x.dim()));
    if (x.dim() > 0) need(shape, "shape");
    for (int64_t i = 0; i < x.dim(); ++i) shape[i] = x.size(i);
  });
}

acc_status acc_tensor_numel(const acc_tensor* t, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(t, "tensor")->t.numel(); });
}

acc_status acc_tensor_nbytes(const acc_tensor* t, size_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(t, "tensor")->t.nbytes(); });
}

acc_status acc_tensor_dtype(const acc_tensor* t, acc_dtype* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = to_acc_dtype(need(t, "tensor")->t.scalar_type()); });
}

acc_status acc_tensor_item(const acc_tensor* t, double* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] {
    const at::Tensor& x = need(t, "tensor")->t;
    need(out, "out");
    if (x.numel() != 1)
      throw std::invalid_argument("item needs a one-element tensor; this one has " + std::to_string(x.numel()));
    *out = x.item<double>();
  });
}

acc_status acc_tensor_from_dlpack(DLManagedTensorVersioned* src, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    if (!out) {
      if (src && src->deleter) src->deleter(src);  // ownership was passed to us either way
      throw std::invalid_argument("out is NULL");
    }
    need(src, "src");
    if (src->version.major != DLPACK_MAJOR_VERSION) {
      uint32_t major = src->version.major;
      if (src->deleter) src->deleter(src);
      throw std::invalid_argument("DLPack major version " + std::to_string(major) + " is not supported (need " +
                                  std::to_string(DLPACK_MAJOR_VERSION) + ")");
    }
    // What fromDLPack trusts, checked first (a NULL shape with ndim 2 crashed it).
    const DLTensor& d = src->dl_tensor;
    std::string problem;
    if (d.ndim < 0 || d.ndim > 64) problem = "ndim " + std::to_string(d.ndim) + " is outside 0..64";
    else if (d.ndim > 0 && !d.shape) problem = "shape is NULL with ndim " + std::to_string(d.ndim);
    int64_t numel = 1;
    for (int32_t i = 0; problem.empty() && i < d.ndim; ++i)
      if (d.shape[i] < 0 || __builtin_mul_overflow(numel, d.shape[i], &numel))
        problem = "shape[" + std::to_string(i) + "] = " + std::to_string(d.shape[i]) + " is negative or overflows";
    if (problem.empty() && numel > 0 && !d.data) problem = "data is NULL for " + std::to_string(numel) + " elements";
    if (!problem.empty()) {
      if (src->deleter) src->deleter(src);
      throw std::invalid_argument("src: " + problem);
    }
    // Our own deleter records that ownership reached a tensor; if conversion fails before that,
    // we call src's deleter here, so it runs exactly once either way.
    auto owned = std::make_shared<bool>(false);
    at::Tensor t;
    try {
      t = at::fromDLPackVersioned(src, [src, owned](void*) {
        *owned = true;
        if (src->deleter) src->deleter(src);
      });
    } catch (...) {
      if (!*owned && src->deleter) src->deleter(src);
      throw;
    }
    *out = new acc_tensor{std::move(t)};
  });
}

acc_status acc_tensor_to_dlpack(const acc_tensor* t, DLManagedTensorVersioned** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] { *need(out, "out") = at::toDLPackVersioned(need(t, "tensor")->t.detach()); });
}

}  // extern "C"
