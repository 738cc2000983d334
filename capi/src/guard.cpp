#include "guard.hpp"

#include <acc/config.hpp>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <ios>
#include <mutex>
#include <new>
#include <unordered_map>

#include "util/errors.hpp"
#include "util/options.hpp"

namespace acc::capi {

// Plain thread-locals only (no destructors run at thread exit): a malloc'd buffer per thread.
thread_local acc_status t_code = ACC_OK;
thread_local char* t_message = nullptr;
thread_local size_t t_capacity = 0;

void set_error(acc_status code, const std::string& message) noexcept {
  t_code = code;
  size_t need = message.size() + 1;
  if (need > t_capacity) {
    char* grown = static_cast<char*>(std::realloc(t_message, need));
    if (!grown) return;  // keep the code; the old (shorter) message buffer stays valid
    t_message = grown;
    t_capacity = need;
  }
  std::memcpy(t_message, message.c_str(), need);
}

void clear_error() noexcept {
  t_code = ACC_OK;
  if (t_message) t_message[0] = '\0';
}

namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, Kind> live;
};

// Never destroyed: handles may outlive static destruction (a caller's globals freed at exit).
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

const char* kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::accelerator: return "acc_accelerator";
    case Kind::tensor: return "acc_tensor";
    case Kind::model: return "acc_model";
    case Kind::optimizer: return "acc_optimizer";
    case Kind::scheduler: return "acc_scheduler";
    case Kind::dataset: return "acc_dataset";
    case Kind::batch: return "acc_batch";
    case Kind::bytes_list: return "acc_bytes_list";
    case Kind::dataloader: return "acc_dataloader";
    case Kind::tokenizer: return "acc_tokenizer";
    case Kind::encoding: return "acc_encoding";
  }
  return "handle";
}

void enroll(const void* mark, Kind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[mark] = kind;
}

void unenroll(const void* mark) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.erase(mark);
}

bool enrolled(const void* mark, Kind kind) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(mark);
  return it != r.live.end() && it->second == kind;
}

void throw_not_live(const char* what, Kind kind) {
  throw std::invalid_argument(std::string(what) + " is not a live handle of type " + kind_name(kind) +
                              " (destroyed already, a handle of another type, or not made by libacc)");
}

HandleLock::HandleLock(std::atomic<bool>& busy, const char* what) : busy_(busy) {
  if (busy_.exchange(true, std::memory_order_acquire))
    throw std::system_error(std::make_error_code(std::errc::device_or_resource_busy),
                            std::string(what) + " is in use by another thread");
}

acc_status run_guarded(const char* fn, void (*body)(void*), void* ctx) noexcept {
  clear_error();
  acc_status code = ACC_OK;
  std::string msg;
  try {
    body(ctx);
    return ACC_OK;
  } catch (const config::Error& e) {
    code = ACC_ERR_INVALID_CONFIG, msg = e.what();
  } catch (const core::OptionsError& e) {
    code = ACC_ERR_INVALID_CONFIG, msg = e.what();
  } catch (const std::invalid_argument& e) {
    code = ACC_ERR_INVALID_ARGUMENT, msg = e.what();
  } catch (const std::out_of_range& e) {
    code = ACC_ERR_INVALID_ARGUMENT, msg = e.what();
  } catch (const core::StateError& e) {
    code = ACC_ERR_INVALID_STATE, msg = e.what();
  } catch (const core::UnsupportedError& e) {
    code = ACC_ERR_UNSUPPORTED, msg = e.what();
  } catch (const core::DistributedError& e) {
    code = ACC_ERR_DISTRIBUTED, msg = e.what();
  } catch (const core::CallbackError& e) {
    code = ACC_ERR_CALLBACK, msg = e.what();
  } catch (const std::ios_base::failure& e) {
    code = ACC_ERR_IO, msg = e.what();
    // libstdc++ appends its error category's text (": iostream error", or strerror for an errno code): the
    // generic one says nothing the message does not.
    const std::string generic = ": iostream error";
    if (msg.size() > generic.size() && msg.compare(msg.size() - generic.size(), generic.size(), generic) == 0)
      msg.resize(msg.size() - generic.size());
  } catch (const std::filesystem::filesystem_error& e) {
    code = ACC_ERR_IO, msg = e.what();  // a path the caller gave: too long, a symlink loop, not permitted, ...
  } catch (const std::system_error& e) {
    code = e.code() == std::errc::device_or_resource_busy ? ACC_ERR_BUSY : ACC_ERR_INTERNAL;
    msg = e.what();
  } catch (const c10::OutOfMemoryError& e) {
    code = ACC_ERR_OUT_OF_MEMORY, msg = e.what_without_backtrace();
  } catch (const c10::DistError& e) {
    code = ACC_ERR_DISTRIBUTED, msg = e.what_without_backtrace();
  } catch (const c10::Error& e) {
    code = ACC_ERR_TORCH, msg = e.what_without_backtrace();
  } catch (const std::bad_alloc&) {
    code = ACC_ERR_OUT_OF_MEMORY, msg = "out of memory";
  } catch (const std::exception& e) {
    code = ACC_ERR_INTERNAL, msg = e.what();
  } catch (...) {
    code = ACC_ERR_INTERNAL, msg = "unknown exception";
  }
  try {
    set_error(code, std::string(fn) + ": " + msg);
  } catch (...) {
    t_code = code;
  }
  return code;
}

std::function<void(int64_t)> rewind_function(acc_iterator_start_fn start, std::shared_ptr<UserData> ud) {
  if (!start) return {};
  return [start, ud](int64_t epoch) {
    acc_status st = start(ud->data, epoch);
    if (st != ACC_OK)
      throw core::CallbackError("dataset start callback returned " + std::to_string(st) + " for epoch " +
                                std::to_string(epoch));
  };
}

}  // namespace acc::capi

extern "C" const char* acc_last_error_message(void) noexcept {
  return acc::capi::t_message ? acc::capi::t_message : "";
}

extern "C" acc_status acc_last_error_code(void) noexcept { return acc::capi::t_code; }
