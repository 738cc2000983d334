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
