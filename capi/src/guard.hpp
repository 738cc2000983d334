// The boundary of the C ABI: every exported body runs inside guarded(), which clears the thread's
// error record, catches every exception and turns it into a status code plus a message.
#pragma once
#include <acc/acc.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
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

// What each handle is, so that one kind passed where another is expected (an acc_batch* as an acc_bytes_list*) is
// refused rather than read as the wrong type.
enum class Kind : uint8_t {
  accelerator,
  tensor,
  model,
  optimizer,
  scheduler,
  dataset,
  batch,
  bytes_list,
  dataloader,
  tokenizer,
  encoding
};
const char* kind_name(Kind kind) noexcept;  // "acc_batch", ...

// The registry of live handles (guard.cpp): the address of each handle's Live member and its kind. A lookup only
// compares addresses, so a destroyed, foreign or mistyped pointer is never read.
void enroll(const void* mark, Kind kind);
void unenroll(const void* mark) noexcept;
bool enrolled(const void* mark, Kind kind) noexcept;

// A member of every handle: enrolled while the handle exists, so that a destroyed, foreign or other-kind pointer is
// refused with ACC_ERR_INVALID_ARGUMENT. What it cannot see: a new handle of the same kind that the allocator put
// at the old address reads as live (docs/abi.md says what stays undefined).
template <Kind K>
class Live {
 public:
  static constexpr Kind kind = K;
  Live() { enroll(this, K); }
  ~Live() { unenroll(this); }
  Live(const Live&) = delete;
  Live& operator=(const Live&) = delete;
  bool ok() const noexcept { return enrolled(this, K); }

  // A handle libacc lends a callback for one call (the sample batch it fills): the callback's _destroy of it is
  // refused and remembered, so that the lender fails the callback instead of the handle being freed twice.
  void lend() noexcept { lent_ = true; }
  bool lent() const noexcept { return lent_; }
  void refuse_destroy() noexcept { destroy_refused_ = true; }
  bool destroy_refused() const noexcept { return destroy_refused_; }

 private:
  bool lent_ = false, destroy_refused_ = false;
};

template <class T>
concept Handle = requires(const T& h) { h.live.ok(); };

[[noreturn]] void throw_not_live(const char* what, Kind kind);

// Throws std::invalid_argument("<what> is NULL") when p is null, and for a handle that is not a live one of T's kind.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw std::invalid_argument(std::string(what) + " is NULL");
  if constexpr (Handle<T>)
    if (!p->live.ok()) throw_not_live(what, decltype(p->live)::kind);
  return p;
}

// An optional handle argument: NULL stays NULL, anything else must be live.
template <Handle T>
T* optional_handle(T* p, const char* what) {
  return p ? need(p, what) : nullptr;
}

// The body of every acc_*_destroy: NULL is fine; a handle that is not live (or not of this kind) is recorded as an
// error (read with acc_last_error) and left alone rather than freed twice, as is one libacc lent a callback.
template <Handle T>
void destroy_handle(T* h, const char* fn) noexcept {
  if (!h) return;
  if (!h->live.ok()) {
    set_error(ACC_ERR_INVALID_ARGUMENT, std::string(fn) + ": not a live handle of type " +
                                            kind_name(decltype(h->live)::kind) +
                                            " (destroyed already, a handle of another type, or not made by libacc)");
    return;
  }
  if (h->live.lent()) {
    h->live.refuse_destroy();
    set_error(ACC_ERR_INVALID_ARGUMENT,
              std::string(fn) + ": this " + kind_name(decltype(h->live)::kind) +
                  " belongs to libacc, which lent it to the callback: not the callback's to destroy");
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
