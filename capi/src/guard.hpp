// The boundary of the C ABI: every exported body runs inside guarded(), which clears the thread's
// error record, catches every exception and turns it into a status code plus a message.
#pragma once
#include <acc/acc.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace acc::capi {

void set_error(acc_status code, const std::string& message) noexcept;
void clear_error() noexcept;
// Runs body(); returns ACC_OK or the status of what it threw, with "<fn>: <message>" recorded.
acc_status run_guarded(const char* fn, void (*body)(void*), void* ctx) noexcept;

template <class F>
acc_status guarded(const char* fn, F&& f) noexcept {
  return run_guarded(fn, [](void* c) { (*static_cast<F*>(c))(); }, &f);
}

// The last member of every handle: a mark set while the handle exists and overwritten when it is destroyed, so
// that a destroyed (or foreign) pointer is refused with ACC_ERR_INVALID_ARGUMENT wherever its memory still holds
// what the destroy left. A cheap check, not a guarantee: memory reused by a new handle of the same type reads
// as live again (docs/abi.md says what stays undefined).
class Live {
 public:
  bool ok() const noexcept { return mark_ == kLive; }
  // Volatile: the store before the memory is freed must not be optimized away as dead.
  ~Live() { *static_cast<volatile uint64_t*>(&mark_) = kDead; }

 private:
  static constexpr uint64_t kLive = 0x6c69766520616363, kDead = 0x6465616420616363;
  uint64_t mark_ = kLive;
};

template <class T>
concept Handle = requires(const T& h) { h.live.ok(); };

// Throws std::invalid_argument("<what> is NULL") when p is null, and for a handle that is not live.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw std::invalid_argument(std::string(what) + " is NULL");
  if constexpr (Handle<T>)
    if (!p->live.ok())
      throw std::invalid_argument(std::string(what) + " is not a live handle (destroyed already, or not made by libacc)");
  return p;
}

// An optional handle argument: NULL stays NULL, anything else must be live.
template <Handle T>
T* optional_handle(T* p, const char* what) {
  return p ? need(p, what) : nullptr;
}

// The body of every acc_*_destroy: NULL is fine; a handle that is not live is recorded as an error (read with
// acc_last_error) and left alone rather than freed twice.
template <Handle T>
void destroy_handle(T* h, const char* fn) noexcept {
  if (!h) return;
  if (!h->live.ok()) {
    set_error(ACC_ERR_INVALID_ARGUMENT, std::string(fn) + ": not a live handle (destroyed already, or not made by libacc)");
    return;
  }
  delete h;
}

// One thread at a time per handle: a second concurrent caller gets ACC_ERR_BUSY, not a data race.
class HandleLock {
 public:
  HandleLock(std::atomic<bool>& busy, const char* what);
  ~HandleLock() { busy_.store(false, std::memory_order_release); }
  HandleLock(const HandleLock&) = delete;
  HandleLock& operator=(const HandleLock&) = delete;

 private:
  std::atomic<bool>& busy_;
};

// A caller's callback context, released with its free function exactly once, when the last user
// (a dataset, a loader through it) lets go.
struct UserData {
  void* data;
  void (*free_fn)(void*);
  ~UserData() {
    if (free_fn) free_fn(data);
  }
};

// An iterable dataset's start callback as the core's rewind function (empty for NULL): a non-zero
// status fails the pass with ACC_ERR_CALLBACK.
std::function<void(int64_t)> rewind_function(acc_iterator_start_fn start, std::shared_ptr<UserData> ud);

}  // namespace acc::capi
