package acc

/*
#cgo pkg-config: acc
#include <acc/acc.h>
#include <stdio.h>
#include <stdint.h>

extern int32_t accGoDatasetGet(uintptr_t user, int64_t index, acc_tensor** input, acc_tensor** target);
extern void accGoDatasetFree(uintptr_t user);

static acc_status accgo_get(void* user, int64_t index, acc_tensor** input, acc_tensor** target) {
	return accGoDatasetGet((uintptr_t)user, index, input, target);
}
static void accgo_free(void* user) { accGoDatasetFree((uintptr_t)user); }

extern int32_t accGoDatasetGetBatch(uintptr_t user, int64_t index, acc_batch* sample);

static acc_status accgo_get_batch(void* user, int64_t index, acc_batch* sample) {
	return accGoDatasetGetBatch((uintptr_t)user, index, sample);
}

static acc_status accgo_dataset_from_batch_func(int64_t length, uintptr_t user, acc_dataset** out, char* msg,
                                                size_t cap) {
	acc_status st = acc_dataset_from_batch_callback(length, accgo_get_batch, (void*)user, accgo_free, out);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}

// Puts every entry of src into dst (sharing the tensors); on failure copies the message.
static acc_status accgo_batch_copy(uintptr_t src_handle, acc_batch* dst, char* msg, size_t cap) {
	const acc_batch* src = (const acc_batch*)src_handle;
	int64_t n = 0;
	acc_status st = acc_batch_count(src, &n);
	for (int64_t i = 0; st == ACC_OK && i < n; ++i) {
		const char* name = NULL;
		acc_tensor* t = NULL;
		st = acc_batch_name(src, i, &name);
		if (st == ACC_OK) st = acc_batch_get(src, name, &t);
		if (st == ACC_OK) st = acc_batch_set(dst, name, t);
		acc_tensor_destroy(t);
	}
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}

// Creates the dataset and, on failure, copies the message within the same C call (the error record
// is thread-local and the goroutine may run on another thread for the next call).
static acc_status accgo_dataset_from_func(int64_t length, uintptr_t user, acc_dataset** out, char* msg,
                                          size_t cap) {
	acc_status st = acc_dataset_from_callback(length, accgo_get, (void*)user, accgo_free, out);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"
)

// SampleFunc produces sample index of a DatasetFromFunc: the input tensor and, optionally, the
// target. The dataset takes ownership of both (do not close them). A returned error or a panic fails
// the batch being loaded with ErrCallback, which wraps that error.
type SampleFunc func(index int64) (input, target *Tensor, err error)

// BatchFunc produces sample index of a DatasetFromBatchFunc as a named batch ({"input_ids": ...,
// "labels": ...}); every sample names the same tensors in the same order. The dataset takes ownership
// of the batch (it is closed for the caller). A returned error or a panic fails the batch being loaded
// with ErrCallback, which wraps that error.
type BatchFunc func(index int64) (*Batch, error)

type funcSource struct {
	fn      SampleFunc
	batchFn BatchFunc
	mu      sync.Mutex
	err     error
}

func (s *funcSource) fail(err error) C.int32_t {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	return C.ACC_ERR_CALLBACK
}

func (s *funcSource) takeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.err
	s.err = nil
	return err
}

// DatasetFromFunc makes a dataset of length samples produced by fn, which libacc calls on the
// goroutine that calls DataLoader.Next.
func DatasetFromFunc(length int64, fn SampleFunc) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	src := &funcSource{fn: fn}
	h := cgo.NewHandle(src) // released by accGoDatasetFree, also when creation fails
	var out *C.acc_dataset
	var msg [512]C.char
	st := C.accgo_dataset_from_func(C.int64_t(length), C.uintptr_t(h), &out, &msg[0], C.size_t(len(msg)))
	if st != C.ACC_OK {
		return nil, &Error{Code: Code(st), Message: C.GoString(&msg[0])}
	}
	d := &Dataset{fn: src}
	track(d, &d.handle, uintptr(unsafe.Pointer(out)), "Dataset", destroyDataset)
	return d, nil
}

// DatasetFromBatchFunc makes a dataset of length named samples produced by fn, which libacc calls on
// the goroutine that calls DataLoader.NextBatch (or Next).
func DatasetFromBatchFunc(length int64, fn BatchFunc) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	src := &funcSource{batchFn: fn}
	h := cgo.NewHandle(src) // released by accGoDatasetFree, also when creation fails
	var out *C.acc_dataset
	var msg [512]C.char
	st := C.accgo_dataset_from_batch_func(C.int64_t(length), C.uintptr_t(h), &out, &msg[0], C.size_t(len(msg)))
	if st != C.ACC_OK {
		return nil, &Error{Code: Code(st), Message: C.GoString(&msg[0])}
	}
	d := &Dataset{fn: src}
	track(d, &d.handle, uintptr(unsafe.Pointer(out)), "Dataset", destroyDataset)
	return d, nil
}

//export accGoDatasetGetBatch
func accGoDatasetGetBatch(user C.uintptr_t, index C.int64_t, sample *C.acc_batch) (status C.int32_t) {
	src := cgo.Handle(user).Value().(*funcSource)
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			status = src.fail(fmt.Errorf("acc: dataset callback panicked at index %d: %v", int64(index), r))
		}
	}()
	if src.batchFn == nil {
		return src.fail(fmt.Errorf("acc: no batch function"))
	}
	b, err := src.batchFn(int64(index))
	defer b.Close() // the dataset owns it; libacc keeps what it needs
	if err != nil {
		return src.fail(err)
	}
	if b == nil || b.ptr == 0 {
		return src.fail(fmt.Errorf("acc: dataset callback returned no batch for index %d", int64(index)))
	}
	var msg [512]C.char
	st := C.accgo_batch_copy(C.uintptr_t(b.ptr), sample, &msg[0], C.size_t(len(msg)))
	runtime.KeepAlive(b)
	if st != C.ACC_OK {
		return src.fail(&Error{Code: Code(st), Message: C.GoString(&msg[0])})
	}
	return C.ACC_OK
}

func destroyDataset(p uintptr) { C.acc_dataset_destroy((*C.acc_dataset)(unsafe.Pointer(p))) }

//export accGoDatasetGet
func accGoDatasetGet(user C.uintptr_t, index C.int64_t, input, target **C.acc_tensor) (status C.int32_t) {
	src := cgo.Handle(user).Value().(*funcSource)
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			src.mu.Lock()
			src.err = fmt.Errorf("acc: dataset callback panicked at index %d: %v", int64(index), r)
			src.mu.Unlock()
			status = C.ACC_ERR_CALLBACK
		}
	}()
	x, y, err := src.fn(int64(index))
	if err != nil {
		x.Close()
		y.Close()
		src.mu.Lock()
		src.err = err
		src.mu.Unlock()
		return C.ACC_ERR_CALLBACK
	}
	if x == nil || x.ptr == 0 {
		y.Close()
		src.mu.Lock()
		src.err = fmt.Errorf("acc: dataset callback returned no input for index %d", int64(index))
		src.mu.Unlock()
		return C.ACC_ERR_CALLBACK
	}
	*input = (*C.acc_tensor)(unsafe.Pointer(x.release())) // ownership moves to libacc
	if y != nil && y.ptr != 0 {
		*target = (*C.acc_tensor)(unsafe.Pointer(y.release()))
	}
	return C.ACC_OK
}

//export accGoDatasetFree
func accGoDatasetFree(user C.uintptr_t) { cgo.Handle(user).Delete() }
