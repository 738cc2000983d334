package acc

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// DType is a tensor element type.
type DType int32

// Element types (acc.h ACC_FLOAT32, ...).
const (
	Float32  DType = DType(raw.ACC_FLOAT32)
	Float64  DType = DType(raw.ACC_FLOAT64)
	BFloat16 DType = DType(raw.ACC_BFLOAT16)
	Float16  DType = DType(raw.ACC_FLOAT16)
	Int32    DType = DType(raw.ACC_INT32)
	Int64    DType = DType(raw.ACC_INT64)
	Uint8    DType = DType(raw.ACC_UINT8)
	Bool     DType = DType(raw.ACC_BOOL)
)

// DTypes lists every element type.
var DTypes = []DType{Float32, Float64, BFloat16, Float16, Int32, Int64, Uint8, Bool}

// Size is the element size in bytes (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case BFloat16, Float16:
		return 2
	case Uint8, Bool:
		return 1
	}
	return 0
}

func (d DType) String() string {
	names := [...]string{"float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8", "bool"}
	if d >= 0 && int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("DType(%d)", int32(d))
}

// Tensor is a tensor owned by libacc (CPU or device memory). Close it when done; the garbage
// collector releases a forgotten one eventually (see OnLeak).
type Tensor struct{ handle }

func (t *Tensor) p() uintptr {
	if t == nil {
		return 0
	}
	return t.ptr
}

func newTensor(ptr uintptr) *Tensor {
	if ptr == 0 {
		return nil
	}
	t := &Tensor{}
	track(t, &t.handle, ptr, "Tensor", raw.Acc_tensor_destroy)
	return t
}

// Close releases the tensor. It is idempotent and never fails.
func (t *Tensor) Close() error {
	if t != nil {
		raw.Acc_tensor_destroy(t.release())
	}
	return nil
}

// NewTensor copies data (row-major, native byte order) into a new CPU tensor. len(data) must be the
// element count of shape times dtype.Size(); no shape means a scalar.
func NewTensor(data []byte, dtype DType, shape ...int64) (*Tensor, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var out uintptr
	if shape == nil {
		shape = []int64{}
	}
	err := wrap(raw.Acc_tensor_from_host(data, int(dtype), shape, &out))
	return newTensor(out), err
}

func bytesOf[T any](v []T) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// FromFloat32 copies values into a float32 tensor of the given shape (default: a vector).
func FromFloat32(values []float32, shape ...int64) (*Tensor, error) {
	return NewTensor(bytesOf(values), Float32, shapeOr(shape, len(values))...)
}

// FromFloat64 copies values into a float64 tensor of the given shape (default: a vector).
func FromFloat64(values []float64, shape ...int64) (*Tensor, error) {
	return NewTensor(bytesOf(values), Float64, shapeOr(shape, len(values))...)
}

// FromInt64 copies values into an int64 tensor of the given shape (default: a vector).
func FromInt64(values []int64, shape ...int64) (*Tensor, error) {
	return NewTensor(bytesOf(values), Int64, shapeOr(shape, len(values))...)
}

// FromInt32 copies values into an int32 tensor of the given shape (default: a vector).
func FromInt32(values []int32, shape ...int64) (*Tensor, error) {
	return NewTensor(bytesOf(values), Int32, shapeOr(shape, len(values))...)
}

func shapeOr(shape []int64, n int) []int64 {
	if len(shape) == 0 {
		return []int64{int64(n)}
	}
	return shape
}

// Shape returns the dimensions.
func (t *Tensor) Shape() ([]int64, error) {
	var nd int32
	if err := wrap(raw.Acc_tensor_ndim(t.p(), &nd)); err != nil {
		return nil, err
	}
	shape := make([]int64, nd)
	var err error
	if nd > 0 {
		err = wrap(raw.Acc_tensor_shape(t.p(), shape))
	}
	runtime.KeepAlive(t)
	return shape, err
}

// DType returns the element type.
func (t *Tensor) DType() (DType, error) {
	var d int32
	err := wrap(raw.Acc_tensor_dtype(t.p(), &d))
	runtime.KeepAlive(t)
	return DType(d), err
}

// Numel returns the number of elements.
func (t *Tensor) Numel() (int64, error) {
	var n int64
	err := wrap(raw.Acc_tensor_numel(t.p(), &n))
	runtime.KeepAlive(t)
	return n, err
}

// NBytes returns the size of the tensor's data in bytes.
func (t *Tensor) NBytes() (int, error) {
	var n uint64
	err := wrap(raw.Acc_tensor_nbytes(t.p(), &n))
	runtime.KeepAlive(t)
	return int(n), err
}

// Item returns the value of a one-element tensor as float64.
func (t *Tensor) Item() (float64, error) {
	var v float64
	err := wrap(raw.Acc_tensor_item(t.p(), &v))
	runtime.KeepAlive(t)
	return v, err
}

// CopyTo copies the tensor's data (from any device, made contiguous) into dst, which must be exactly
// NBytes long.
func (t *Tensor) CopyTo(dst []byte) error {
	err := wrap(raw.Acc_tensor_to_host(t.p(), dst))
	runtime.KeepAlive(t)
	return err
}

// Bytes returns a copy of the tensor's data.
func (t *Tensor) Bytes() ([]byte, error) {
	n, err := t.NBytes()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	return b, t.CopyTo(b)
}

func copyOut[T any](t *Tensor, want DType) ([]T, error) {
	d, err := t.DType()
	if err != nil {
		return nil, err
	}
	if d != want {
		return nil, &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("tensor is %s, not %s", d, want)}
	}
	n, err := t.Numel()
	if err != nil {
		return nil, err
	}
	v := make([]T, n)
	return v, t.CopyTo(bytesOf(v))
}

// Float32s returns a copy of a float32 tensor's elements.
func (t *Tensor) Float32s() ([]float32, error) { return copyOut[float32](t, Float32) }

// Float64s returns a copy of a float64 tensor's elements.
func (t *Tensor) Float64s() ([]float64, error) { return copyOut[float64](t, Float64) }

// Int64s returns a copy of an int64 tensor's elements.
func (t *Tensor) Int64s() ([]int64, error) { return copyOut[int64](t, Int64) }

// Int32s returns a copy of an int32 tensor's elements.
func (t *Tensor) Int32s() ([]int32, error) { return copyOut[int32](t, Int32) }

// HostBuffer is C memory that Go code fills through Bytes and then hands to TensorFromHostBuffer,
// which wraps it without a copy (Go memory is never retained by C: that is why the buffer lives in C).
// Free it if it is not handed over.
type HostBuffer struct {
	mem  unsafe.Pointer
	data []byte
}

// NewHostBuffer allocates n zeroed bytes of C memory.
func NewHostBuffer(n int) *HostBuffer {
	mem := raw.Accx_alloc(int64(n))
	return &HostBuffer{mem: mem, data: unsafe.Slice((*byte)(mem), n)}
}

// Bytes is the buffer's memory. It is valid until Free, or until the tensor made from it is closed.
func (b *HostBuffer) Bytes() []byte { return b.data }

// Free releases a buffer that was not handed to TensorFromHostBuffer. Idempotent.
func (b *HostBuffer) Free() {
	if b != nil && b.mem != nil {
		raw.Accx_free(b.mem)
		b.mem, b.data = nil, nil
	}
}

// TensorFromHostBuffer makes a tensor that views buf's memory without copying (zero-copy through
// DLPack). The tensor takes ownership: buf.Bytes() stays a live view of the tensor's data until the
// tensor (and every view of it) is closed, and the memory is freed then. On failure the buffer is
// freed too.
func TensorFromHostBuffer(buf *HostBuffer, dtype DType, shape ...int64) (*Tensor, error) {
	if buf == nil || buf.mem == nil {
		return nil, &Error{Code: CodeInvalidArgument, Message: "buffer is nil or already handed over"}
	}
	if shape == nil {
		shape = []int64{}
	}
	var out uintptr
	mem, n := buf.mem, len(buf.data)
	buf.mem = nil // ownership moves to libacc whatever happens
	err := wrap(raw.Accx_tensor_from_alloc(mem, int64(n), int(dtype), shape, &out))
	if err != nil {
		buf.data = nil
	}
	return newTensor(out), err
}

// View is a zero-copy view of a CPU tensor's memory, exported through DLPack. Its Bytes stay valid
// until Close, even after the tensor itself is closed. Use Tensor.Bytes for a copy instead.
type View struct {
	handle
	data []byte
}

// View exports the tensor's memory without copying. The tensor must be in CPU memory and contiguous.
func (t *Tensor) View() (*View, error) {
	var m uintptr
	if err := wrap(raw.Acc_tensor_to_dlpack(t.p(), &m)); err != nil {
		return nil, err
	}
	runtime.KeepAlive(t)
	var data unsafe.Pointer
	var n uint64
	if err := wrap(raw.Accx_dlpack_bytes(m, &data, &n)); err != nil {
		raw.Accx_dlpack_release(m)
		return nil, err
	}
	v := &View{}
	track(v, &v.handle, m, "View", raw.Accx_dlpack_release)
	if n > 0 {
		v.data = unsafe.Slice((*byte)(data), n)
	} else {
		v.data = []byte{}
	}
	return v, nil
}

// Bytes is the tensor's memory itself (valid until Close).
func (v *View) Bytes() []byte { return v.data }

// Close releases the view. Idempotent.
func (v *View) Close() error {
	if v != nil {
		v.data = nil
		raw.Accx_dlpack_release(v.release())
	}
	return nil
}
