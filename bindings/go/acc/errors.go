package acc

import (
	"errors"
	"fmt"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Code is a libacc status code. Codes are stable and never reused; an unknown code from a newer
// library prints as ACC_ERR_UNKNOWN and still compares by value.
type Code int32

// The status codes of acc.h.
const (
	CodeOK              Code = 0
	CodeInvalidArgument Code = 1  // a NULL (nil or closed) handle, a bad value, a bad shape
	CodeInvalidConfig   Code = 2  // config or options JSON: unknown key, wrong type, bad value
	CodeInvalidState    Code = 3  // call order: prepared twice, stepped before prepare, ...
	CodeUnsupported     Code = 4  // valid, but not available in this build or on this machine
	CodeIO              Code = 5  // a file could not be read or written
	CodeOutOfMemory     Code = 6  // out of host or device memory
	CodeDistributed     Code = 7  // rendezvous, a collective, a peer that went away
	CodeTorch           Code = 8  // an error raised inside LibTorch
	CodeABIMismatch     Code = 9  // the loaded libacc does not serve this binding's ABI
	CodeBusy            Code = 10 // the handle is in use by another goroutine
	CodeCallback        Code = 11 // a Go callback returned an error or panicked
	CodeInternal        Code = 12 // a bug in libacc
)

// String returns the C name of the code, e.g. "ACC_ERR_INVALID_CONFIG".
func (c Code) String() string { return raw.Acc_status_name(int32(c)) }

// Error is a failed libacc call: its status code and the message libacc gave for it. The message is
// read inside the same C call that failed, so it is right even though goroutines move between OS
// threads. Compare codes with errors.Is against the sentinels (ErrInvalidConfig, ...) and read the
// details with errors.As:
//
//	var e *acc.Error
//	if errors.As(err, &e) { fmt.Println(e.Code, e.Message) }
type Error struct {
	Code    Code
	Message string
	cause   error // a Go error behind CodeCallback, when there is one
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "acc: " + e.Code.String()
	}
	return fmt.Sprintf("acc: %s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error with the same code (and, when target has a message, the
// same message). This makes the sentinels work with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Unwrap returns the Go error that a callback (a dataset function, a checkpoint save or load
// function) returned, if any.
func (e *Error) Unwrap() error { return e.cause }

// Sentinels for errors.Is: errors.Is(err, acc.ErrInvalidConfig).
var (
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrInvalidConfig   = &Error{Code: CodeInvalidConfig}
	ErrInvalidState    = &Error{Code: CodeInvalidState}
	ErrUnsupported     = &Error{Code: CodeUnsupported}
	ErrIO              = &Error{Code: CodeIO}
	ErrOutOfMemory     = &Error{Code: CodeOutOfMemory}
	ErrDistributed     = &Error{Code: CodeDistributed}
	ErrTorch           = &Error{Code: CodeTorch}
	ErrABIMismatch     = &Error{Code: CodeABIMismatch}
	ErrBusy            = &Error{Code: CodeBusy}
	ErrCallback        = &Error{Code: CodeCallback}
	ErrInternal        = &Error{Code: CodeInternal}
)

// wrap turns the raw layer's error into an *Error.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var se *raw.StatusError
	if errors.As(err, &se) {
		return &Error{Code: Code(se.Code), Message: se.Message}
	}
	return err
}
