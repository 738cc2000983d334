#include "train/verify.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "util/errors.hpp"

namespace acc::core {
namespace {

// One process's description, int64 slots: op, arg, dtype, device type, ndim, then the dims. A shape with more
// dims than fit keeps the first kDims - 1 and a hash of the rest in the last slot (compared, printed as "...").
constexpr int64_t kDims = 24;
constexpr int64_t kSlots = 5 + kDims;
enum Slot : int64_t { kOp, kArg, kDtype, kDevice, kNdim, kShape };

constexpr int64_t code(CollectiveOp op) { return static_cast<int64_t>(op); }
constexpr int64_t code(ReduceOp op) { return static_cast<int64_t>(op); }

const char* op_name(int64_t op) {
  switch (static_cast<CollectiveOp>(op)) {
    case CollectiveOp::gather: return "gather";
    case CollectiveOp::gather_for_metrics: return "gather_for_metrics";
    case CollectiveOp::reduce: return "reduce";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::pad_across_processes: return "pad_across_processes";
    case CollectiveOp::gather_object: return "gather_object";
    case CollectiveOp::gather_object_for_metrics: return "gather_object_for_metrics";
    case CollectiveOp::broadcast_object: return "broadcast_object";
  }
  return "?";
}

std::string dtype_name(int64_t code) {
  switch (static_cast<at::ScalarType>(code)) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(static_cast<at::ScalarType>(code));
  }
}

bool is_gather(int64_t op) { return op == code(CollectiveOp::gather) || op == code(CollectiveOp::gather_for_metrics); }

// Whether process b's description is compatible with process a's (see verify.hpp for what must agree).
bool agree(const int64_t* a, const int64_t* b) {
  if (a[kOp] != b[kOp] || a[kArg] != b[kArg]) return false;
  const int64_t op = a[kOp];
  if (op == code(CollectiveOp::gather_object) || op == code(CollectiveOp::gather_object_for_metrics) ||
      op == code(CollectiveOp::broadcast_object))
    return true;
  if (a[kNdim] != b[kNdim]) return false;
  if (op == code(CollectiveOp::pad_across_processes)) return true;
  if (a[kDtype] != b[kDtype] || a[kDevice] != b[kDevice]) return false;
  const int64_t n = std::min(a[kNdim], kDims);
  for (int64_t d = is_gather(op) ? 1 : 0; d < n; ++d)
    if (a[kShape + d] != b[kShape + d]) return false;
  return true;
}

std::string describe(const int64_t* r) {
  const int64_t op = r[kOp];
  std::string s = std::string("`") + op_name(op) + "`";
  if (op == code(CollectiveOp::reduce))
    s += r[kArg] == code(ReduceOp::Sum) ? " (sum)" : r[kArg] == code(ReduceOp::Mean) ? " (mean)" : " (max)";
  else if (op == code(CollectiveOp::broadcast) || op == code(CollectiveOp::broadcast_object))
    s += " from process " + std::to_string(r[kArg]);
  else if (op == code(CollectiveOp::pad_across_processes)) s += " along dim " + std::to_string(r[kArg]);
  if (r[kNdim] < 0) return s;  // an object collective: no tensor
  s += ": " + dtype_name(r[kDtype]) + " [";
  const int64_t n = r[kNdim];
  for (int64_t d = 0; d < n; ++d) {
    if (d) s += ", ";
    if (n > kDims && d == kDims - 1) {
      s += "...";
      break;
    }
    s += std::to_string(r[kShape + d]);
  }
  s += "] on ";
  s += c10::DeviceTypeName(static_cast<c10::DeviceType>(r[kDevice]), /*lower_case=*/true);
  return s;
}

}  // namespace

void verify_collective(Comm& comm, CollectiveOp op, int64_t arg, const at::Tensor* t) {
  // Every process writes its row of a zeroed [size, kSlots] table; one sum all-reduce gives all rows to all.
  const int64_t world = comm.size();
  at::Tensor table = at::zeros({world, kSlots}, at::kLong);
  int64_t* mine = table.data_ptr<int64_t>() + comm.rank() * kSlots;
  mine[kOp] = static_cast<int64_t>(op);
  mine[kArg] = arg;
  mine[kNdim] = -1;
  if (t && t->defined()) {
    mine[kDtype] = static_cast<int64_t>(t->scalar_type());
    mine[kDevice] = static_cast<int64_t>(t->device().type());
    // gather sends a 0-d tensor as [1] (Comm::all_gather_cat), so that is its shape here too.
    std::vector<int64_t> shape = t->sizes().vec();
    if (shape.empty() && is_gather(mine[kOp])) shape = {1};
    const int64_t n = static_cast<int64_t>(shape.size());
    mine[kNdim] = n;
    for (int64_t d = 0; d < std::min(n, kDims); ++d) mine[kShape + d] = shape[static_cast<size_t>(d)];
    if (n > kDims) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the dims that do not fit
      for (int64_t d = kDims - 1; d < n; ++d)
        h = (h ^ static_cast<uint64_t>(shape[static_cast<size_t>(d)])) * 1099511628211ull;
      mine[kShape + kDims - 1] = static_cast<int64_t>(h);
    }
  }
  comm.all_reduce(table, ReduceOp::Sum);
  const int64_t* rows = table.data_ptr<int64_t>();
  bool same = true;
  for (int64_t r = 1; r < world && same; ++r) same = agree(rows, rows + r * kSlots);
  if (same) return;
  // The same message on every process: built from the table only.
  bool one_op = true;
  for (int64_t r = 1; r < world; ++r) one_op = one_op && rows[r * kSlots + kOp] == rows[kOp];
  std::string msg = "Cannot apply desired operation due to shape mismatches (debug mode): ";
  if (!one_op) msg += "the processes are in different collectives";
  else
    msg += std::string("`") + op_name(rows[kOp]) + "` needs the same " +
           (is_gather(rows[kOp])                                    ? "dtype, device and every dim but the first"
            : rows[kOp] == code(CollectiveOp::pad_across_processes) ? "dim and number of dims"
            : rows[kNdim] < 0                                       ? "source process"
                                                                    : "arguments, dtype, device and shape") +
           " on every process";
  msg += ". Operation and input shapes:";
  for (int64_t r = 0; r < world; ++r)
    msg += (r ? "; process " : " process ") + std::to_string(r) + ": " + describe(rows + r * kSlots);
  throw DistributedError(msg);
}

}  // namespace acc::core
