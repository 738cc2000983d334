package acc

/*
#cgo pkg-config: acc
#include <acc/acc.h>
#include <stdio.h>
#include <stdint.h>

extern int32_t accGoCheckpointSave(uintptr_t user, acc_bytes_list* out);
extern int32_t accGoCheckpointLoad(uintptr_t user, void* data, size_t size);
extern void accGoCheckpointFree(uintptr_t user);

static acc_status accgo_checkpoint_save(void* user, acc_bytes_list* out) {
	return accGoCheckpointSave((uintptr_t)user, out);
}
static acc_status accgo_checkpoint_load(void* user, const void* data, size_t size) {
	return accGoCheckpointLoad((uintptr_t)user, (void*)data, size);
}
static void accgo_checkpoint_free(void* user) { accGoCheckpointFree((uintptr_t)user); }

// Registers and, on failure, copies the message within the same C call (the error record is
// thread-local and the goroutine may run on another thread for the next call).
static acc_status accgo_register_for_checkpointing(uintptr_t acc, uintptr_t user, char* msg, size_t cap) {
	acc_status st = acc_register_for_checkpointing((acc_accelerator*)acc, accgo_checkpoint_save,
	                                               accgo_checkpoint_load, (void*)user, accgo_checkpoint_free);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}

static acc_status accgo_bytes_append(acc_bytes_list* out, const void* data, size_t size, char* msg, size_t cap) {
	acc_status st = acc_bytes_list_append(out, data, size);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// checkpointFailure is what a registered object's function left for the caller of SaveState or
// LoadState. The registered objects share it with their accelerator but never refer to the
// accelerator itself (a cgo.Handle is a GC root: the accelerator would never be collected).
type checkpointFailure struct {
	mu  sync.Mutex
	err error
}

func (f *checkpointFailure) set(err error) C.int32_t {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	return C.ACC_ERR_CALLBACK
}

func (f *checkpointFailure) take() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.err
	f.err = nil
	return err
}

type checkpointObject struct {
	save    func() ([]byte, error)
	load    func(data []byte) error
	failure *checkpointFailure
}

// SaveState is Accelerate's save_state: it saves everything prepared with the accelerator (models,
// optimizers, schedulers, the fp16 scaler, data loader positions, random states) and every object
// registered with RegisterForCheckpointing into the directory dir, crash safe (docs/checkpoints.md
// lists the files). dir "" uses ProjectConfiguration's automatic naming ("project_config":
// {"automatic_checkpoint_naming": true, "project_dir": ...}): {project_dir}/checkpoints/checkpoint_{i}.
// Every process must call it. A registered save function's error (or panic) fails it with
// ErrCallback, which wraps that error.
func (a *Accelerator) SaveState(dir string) error {
	return a.checkpointCall(func(p uintptr) error { return raw.Acc_save_state(p, dir) })
}

// LoadState is Accelerate's load_state: it restores a checkpoint of SaveState into the objects
// prepared with the accelerator (the same kinds and numbers, prepared in the same order) and the
// registered objects. A directory without manifest.json is refused, naming it. dir "" loads the
// newest complete checkpoint under {project_dir}/checkpoints. Every process must call it. A registered
// load function's error (or panic) fails it with ErrCallback, which wraps that error.
func (a *Accelerator) LoadState(dir string) error {
	return a.checkpointCall(func(p uintptr) error { return raw.Acc_load_state(p, dir) })
}

// ResumeFromCheckpoint loads what the config's "resume_from_checkpoint" names: "latest", the newest
// complete checkpoint under {project_dir}/checkpoints, or a checkpoint directory, as LoadState does.
// It reports false when there is nothing to resume (the key unset, or "latest" before the first
// save: a fresh start). Call it after Prepare and RegisterForCheckpointing: a job restarted by
// `acc launch --max_restarts` then continues from its last save. Every process must call it. A
// registered load function's error (or panic) fails it with ErrCallback, as in LoadState.
func (a *Accelerator) ResumeFromCheckpoint() (bool, error) {
	var resumed int32
	err := a.checkpointCall(func(p uintptr) error { return raw.Acc_resume_from_checkpoint(p, &resumed) })
	return resumed != 0, err
}

func (a *Accelerator) checkpointCall(f func(uintptr) error) error {
	var failure *checkpointFailure
	if a != nil {
		failure = a.checkpoints
		failure.take() // nothing left from an earlier call
	}
	err := wrap(f(a.p()))
	runtime.KeepAlive(a)
	var e *Error
	if err != nil && failure != nil && errors.As(err, &e) {
		e.cause = failure.take()
	}
	return err
}

// RegisterForCheckpointing is Accelerate's register_for_checkpointing: an object of the caller's that
// SaveState saves (save returns its bytes; called on the main process only, the bytes go to
// custom_checkpoint_{i}.bin in registration order) and LoadState restores (load receives those bytes,
// on every process). Both run on the goroutine that calls SaveState or LoadState while the accelerator
// is in use (calling the accelerator from inside them fails with ErrBusy); load gets its own copy of
// the bytes. An encoding.BinaryMarshaler / BinaryUnmarshaler fits as
//
//	a.RegisterForCheckpointing(obj.MarshalBinary, obj.UnmarshalBinary)
//
// The functions are released when libacc lets go of the accelerator.
func (a *Accelerator) RegisterForCheckpointing(save func() ([]byte, error), load func(data []byte) error) error {
	if save == nil || load == nil {
		return &Error{Code: CodeInvalidArgument, Message: "RegisterForCheckpointing: save and load must not be nil"}
	}
	failure := &checkpointFailure{}
	if a != nil {
		failure = a.checkpoints
	}
	h := cgo.NewHandle(&checkpointObject{save: save, load: load, failure: failure}) // released by accGoCheckpointFree, also on failure
	var msg [512]C.char
	st := C.accgo_register_for_checkpointing(C.uintptr_t(a.p()), C.uintptr_t(h), &msg[0], C.size_t(len(msg)))
	runtime.KeepAlive(a)
	if st != C.ACC_OK {
		return &Error{Code: Code(st), Message: C.GoString(&msg[0])}
	}
	return nil
}

//export accGoCheckpointSave
func accGoCheckpointSave(user C.uintptr_t, out *C.acc_bytes_list) (status C.int32_t) {
	obj := cgo.Handle(user).Value().(*checkpointObject)
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			status = obj.failure.set(fmt.Errorf("acc: checkpoint save function panicked: %v", r))
		}
	}()
	b, err := obj.save()
	if err != nil {
		return obj.failure.set(err)
	}
	if len(b) == 0 {
		return C.ACC_OK
	}
	var msg [512]C.char
	st := C.accgo_bytes_append(out, unsafe.Pointer(&b[0]), C.size_t(len(b)), &msg[0], C.size_t(len(msg))) // copied
	if st != C.ACC_OK {
		return obj.failure.set(&Error{Code: Code(st), Message: C.GoString(&msg[0])})
	}
	return C.ACC_OK
}

//export accGoCheckpointLoad
func accGoCheckpointLoad(user C.uintptr_t, data unsafe.Pointer, size C.size_t) (status C.int32_t) {
	obj := cgo.Handle(user).Value().(*checkpointObject)
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			status = obj.failure.set(fmt.Errorf("acc: checkpoint load function panicked: %v", r))
		}
	}()
	b := make([]byte, int(size)) // a copy: the function may keep it
	if size > 0 {
		copy(b, unsafe.Slice((*byte)(data), int(size)))
	}
	if err := obj.load(b); err != nil {
		return obj.failure.set(err)
	}
	return C.ACC_OK
}

//export accGoCheckpointFree
func accGoCheckpointFree(user C.uintptr_t) { cgo.Handle(user).Delete() }
