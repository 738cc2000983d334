package acc

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// ABIVersion is the libacc ABI this package was generated for.
const ABIVersion = raw.ACC_ABI_VERSION

var abiErr = wrap(raw.Acc_abi_check(ABIVersion))

// CheckABI reports whether the loaded libacc serves this package's ABI. Every constructor returns
// this error too, so a mismatch surfaces at the first call with a readable message (which names both
// versions and the library's path).
func CheckABI() error { return abiErr }

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return raw.Acc_version() }

// BuildInfo is the loaded library's build facts as JSON (torch version, compiler, CUDA, git revision).
func BuildInfo() string { return raw.Acc_build_info() }

// OnLeak, when set, is called with the type name ("Tensor", "Model", ...) each time the garbage
// collector releases a handle that was never closed. Handles are released either way; this hook is
// for finding the missing Close calls. It runs on the runtime's cleanup goroutine.
var OnLeak func(kind string)

var leaks atomic.Int64

// Leaks is the number of handles released by the garbage collector instead of Close.
func Leaks() int64 { return leaks.Load() }

// handle is what every wrapper embeds: the C pointer (0 once closed) and the GC safety net.
type handle struct {
	ptr     uintptr
	cleanup runtime.Cleanup
}

// track registers the safety net: when owner becomes unreachable without Close, destroy runs.
func track[T any](owner *T, h *handle, ptr uintptr, kind string, destroy func(uintptr)) {
	h.ptr = ptr
	h.cleanup = runtime.AddCleanup(owner, func(p uintptr) {
		leaks.Add(1)
		if f := OnLeak; f != nil {
			f(kind)
		}
		destroy(p)
	}, ptr)
}

// release returns the pointer and forgets it (the safety net is stopped); 0 when already closed.
func (h *handle) release() uintptr {
	p := h.ptr
	if p != 0 {
		h.cleanup.Stop()
		h.ptr = 0
	}
	return p
}

// jsonText accepts the JSON options of a call as nil (defaults), a string, []byte, or any value that
// encoding/json marshals to an object (map[string]any, a struct with json tags).
func jsonText(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case json.RawMessage:
		return string(x), nil
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", &Error{Code: CodeInvalidConfig, Message: fmt.Sprintf("cannot encode options as JSON: %v", err)}
		}
		return string(b), nil
	}
}

// SetGradEnabled is PyTorch's torch.set_grad_enabled for the calling OS thread: with false, forward
// passes record no autograd graph (evaluation and inference: less memory and time; Backward of such a
// loss fails), with true they do again (the default). It returns the setting before, to restore it.
// The setting is thread-local, as in PyTorch, and a goroutine may move between threads between two
// calls: call runtime.LockOSThread first (and keep it locked while the setting matters), or use NoGrad.
func SetGradEnabled(enabled bool) (previous bool, err error) {
	v := 0
	if enabled {
		v = 1
	}
	var prev int32
	err = wrap(raw.Acc_set_grad_enabled(v, &prev))
	return prev != 0, err
}

// NoGrad is PyTorch's torch.no_grad(): it runs f with gradients off, its goroutine locked to one OS
// thread meanwhile, and restores the previous setting afterwards (also when f panics). It returns f's
// error.
func NoGrad(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	previous, err := SetGradEnabled(false)
	if err != nil {
		return err
	}
	defer SetGradEnabled(previous) //nolint:errcheck // cannot fail for a valid setting
	return f()
}
