// The boundary of the C ABI: every exported body runs inside guarded(), which clears the thread's
// error record, catches every exception and turns it into a status code plus a message.
#pragma once
#include <acc/acc.h>

#include <atomic>
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

// Throws std::invalid_argument("<what> is NULL") when p is null.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw std::invalid_argument(std::string(what) + " is NULL");
  return p;
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
