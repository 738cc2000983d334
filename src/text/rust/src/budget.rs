//! A memory budget for work on untrusted input (a chat template) whose engine does not bound every allocation
//! itself: minijinja 3.1 charges the values a template makes to its fuel, but not a list concatenation it
//! materializes (`{% set l = l + l %}` doubled 33 times asked for 200 GB). While a budget is set on a thread, the
//! library's allocator counts what that thread allocates minus what it frees; an allocation past the budget fails,
//! and the allocation-error hook turns that failure into an unwind (instead of std's abort) which `within` catches.
//! The hook is std's unstable `alloc_error_hook`, hence RUSTC_BOOTSTRAP for this crate alone (../../cargo_build.sh).
use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

// Bytes this thread may still allocate (i64::MAX: no budget set), and whether an allocation was refused for it.
thread_local! {
    static LEFT: Cell<i64> = const { Cell::new(i64::MAX) };
    static EXCEEDED: Cell<bool> = const { Cell::new(false) };
}

// Threads inside `within` now. While none is, allocations skip the thread-local look-up (in a library loaded with
// dlopen every thread-local access is a call: 2.5% of tokenizing a dataset before this).
static BUDGETED_THREADS: AtomicUsize = AtomicUsize::new(0);

struct Budgeted;

/// Takes `bytes` from the thread's budget; false (nothing taken) when it is short.
fn take(bytes: usize) -> bool {
    if BUDGETED_THREADS.load(Ordering::Relaxed) == 0 {
        return true;
    }
    LEFT.try_with(|left| {
        let l = left.get();
        if l == i64::MAX {
            return true;
        }
        let after = l - bytes as i64;
        if after < 0 {
            EXCEEDED.with(|e| e.set(true));
            return false;
        }
        left.set(after);
        true
    })
    .unwrap_or(true)
}

fn give(bytes: usize) {
    if BUDGETED_THREADS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _ = LEFT.try_with(|left| {
        if left.get() != i64::MAX {
            left.set(left.get().saturating_add(bytes as i64).min(i64::MAX - 1));
        }
    });
}

unsafe impl GlobalAlloc for Budgeted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !take(layout.size()) {
            return std::ptr::null_mut();
        }
        MiMalloc.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !take(layout.size()) {
            return std::ptr::null_mut();
        }
        MiMalloc.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        give(layout.size());
        MiMalloc.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !take(new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        let p = MiMalloc.realloc(ptr, layout, new_size);
        if p.is_null() {
            give(new_size.saturating_sub(layout.size()));
        } else if new_size < layout.size() {
            give(layout.size() - new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Budgeted = Budgeted;

/// The unwind payload of an allocation past the budget.
struct Exceeded;

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::alloc::set_alloc_error_hook(|layout| {
            if EXCEEDED.with(|e| e.replace(false)) {
                resume_unwind(Box::new(Exceeded)); // no panic message: `within` reports it
            }
            // A real failure outside any budget: what std's default hook does before it aborts.
            eprintln!("memory allocation of {} bytes failed", layout.size());
        });
    });
}

/// Runs f with at most `bytes` allocated (net) on this thread; Err(()) when it would have allocated more.
pub fn within<T>(bytes: usize, f: impl FnOnce() -> T) -> Result<T, ()> {
    install_hook();
    BUDGETED_THREADS.fetch_add(1, Ordering::SeqCst);
    let saved = LEFT.with(|l| l.replace(bytes.min(i64::MAX as usize - 1) as i64));
    let result = catch_unwind(AssertUnwindSafe(f));
    LEFT.with(|l| l.set(saved));
    EXCEEDED.with(|e| e.set(false));
    BUDGETED_THREADS.fetch_sub(1, Ordering::SeqCst);
    match result {
        Ok(v) => Ok(v),
        Err(p) if p.is::<Exceeded>() => Err(()),
        Err(p) => resume_unwind(p),
    }
}
