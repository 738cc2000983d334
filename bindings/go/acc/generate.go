package acc

/*
#cgo pkg-config: acc
#include <acc/acc.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

extern int32_t accGoGenerateTokens(uintptr_t user, int64_t* tokens, int64_t batch);

static int32_t accgo_generate_tokens(void* user, const int64_t* tokens, int64_t batch) {
	return accGoGenerateTokens((uintptr_t)user, (int64_t*)tokens, batch);
}

// Generates and, on failure, copies the message within the same C call (the error record is
// thread-local and the goroutine may run on another thread for the next call). user 0: no callback.
static acc_status accgo_generate(uintptr_t model, uintptr_t input_ids, uintptr_t attention_mask, const char* options,
                                 uintptr_t user, acc_tensor** out, char* msg, size_t cap) {
	acc_status st = acc_generate((acc_model*)model, (const acc_tensor*)input_ids, (const acc_tensor*)attention_mask,
	                             options, user ? accgo_generate_tokens : NULL, (void*)user, out);
	if (st != ACC_OK) snprintf(msg, cap, "%s", acc_last_error_message());
	return st;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// tokenStream is the Go side of Generate's callback: the function, and its panic for the caller.
type tokenStream struct {
	fn    func(tokens []int64) bool
	steps int
	err   error
}

// Generate is transformers' generate for a model of ModelFromPretrained: it continues inputIDs
// [batch, time] (integer token ids, left-padded where attentionMask, [batch, time] of 0/1, has zeros;
// nil: no padding) and returns the whole sequences [batch, time + n] (int64), n <= max_new_tokens:
// fewer when every sequence has emitted a stop token or onTokens stopped it. options (nil for the
// model's generation_config.json; JSON text, a map or a struct): {"max_new_tokens": 20, "do_sample":
// false, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0, "eos_token_id": id
// or [ids], "pad_token_id": id, "seed": n}; greedy decoding equals transformers'.
//
// onTokens (nil: none) is called on this goroutine after every step with the tokens just chosen, one
// per sequence (a finished sequence gets the pad token); it returns true to go on, false to stop there
// (the sequences so far are the result). The model is in use meanwhile (calling it from onTokens fails
// with ErrBusy). A panic in onTokens stops generating and fails Generate with ErrCallback, which wraps
// the panic.
func (m *Model) Generate(inputIDs, attentionMask *Tensor, options any, onTokens func(tokens []int64) bool) (*Tensor, error) {
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var opts *C.char // NULL: {}
	if text != "" {
		opts = C.CString(text)
		defer C.free(unsafe.Pointer(opts))
	}
	var stream *tokenStream
	var user C.uintptr_t
	if onTokens != nil {
		stream = &tokenStream{fn: onTokens}
		h := cgo.NewHandle(stream)
		defer h.Delete()
		user = C.uintptr_t(h)
	}
	var out *C.acc_tensor
	var msg [512]C.char
	st := C.accgo_generate(C.uintptr_t(m.p()), C.uintptr_t(inputIDs.p()), C.uintptr_t(attentionMask.p()), opts, user,
		&out, &msg[0], C.size_t(len(msg)))
	runtime.KeepAlive(m)
	runtime.KeepAlive(inputIDs)
	runtime.KeepAlive(attentionMask)
	if st != C.ACC_OK {
		return nil, &Error{Code: Code(st), Message: C.GoString(&msg[0])}
	}
	t := newTensor(uintptr(unsafe.Pointer(out)))
	if stream != nil && stream.err != nil {
		t.Close()
		return nil, &Error{
			Code:    CodeCallback,
			Message: fmt.Sprintf("the token callback panicked at step %d; generation stopped", stream.steps),
			cause:   stream.err,
		}
	}
	return t, nil
}

//export accGoGenerateTokens
func accGoGenerateTokens(user C.uintptr_t, tokens *C.int64_t, batch C.int64_t) (stop C.int32_t) {
	s := cgo.Handle(user).Value().(*tokenStream)
	s.steps++
	defer func() {
		if r := recover(); r != nil { // a panic must not unwind through C frames
			s.err = fmt.Errorf("acc: generate token callback panicked: %v", r)
			stop = 1
		}
	}()
	b := make([]int64, int(batch)) // a copy: the function may keep it
	if batch > 0 {
		copy(b, unsafe.Slice((*int64)(unsafe.Pointer(tokens)), int(batch)))
	}
	if s.fn(b) {
		return 0
	}
	return 1
}
