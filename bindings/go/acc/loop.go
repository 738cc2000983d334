package acc

import (
	"errors"
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Accumulate runs step inside Accelerate's accumulate(model) scope: with gradient_accumulation_steps
// = N, only every N-th call (and the last batch of the active loader) synchronizes gradients; in the
// others the model's gradient all-reduce is skipped and optimizer steps, scheduler steps and ZeroGrad
// on prepared objects do nothing. Backward divides the loss by N. The scope is closed even when step
// fails; the first error is returned.
func (a *Accelerator) Accumulate(model *Model, step func() error) error {
	if err := wrap(raw.Acc_accumulate_begin(a.p(), model.p())); err != nil {
		return err
	}
	stepErr := step()
	endErr := wrap(raw.Acc_accumulate_end(a.p(), model.p()))
	runtime.KeepAlive(a)
	runtime.KeepAlive(model)
	return errors.Join(stepErr, endErr)
}

// SyncGradients reports whether the current micro-step synchronizes gradients and steps the optimizer.
func (a *Accelerator) SyncGradients() (bool, error) {
	v, err := a.int32Query(func(p uintptr, out *int32) error { return raw.Acc_sync_gradients(p, out) })
	return v != 0, err
}

// ClipGradNorm clips the model's gradients to a total norm of maxNorm (normType 2 is the Euclidean
// norm; under fp16 they are unscaled first) and returns the total norm before clipping.
func (a *Accelerator) ClipGradNorm(model *Model, maxNorm, normType float64) (float64, error) {
	var total float64
	err := wrap(raw.Acc_clip_grad_norm(a.p(), model.p(), maxNorm, normType, &total))
	runtime.KeepAlive(a)
	runtime.KeepAlive(model)
	return total, err
}

// ClipGradValue clamps every gradient of the model to [-clip, clip].
func (a *Accelerator) ClipGradValue(model *Model, clip float64) error {
	err := wrap(raw.Acc_clip_grad_value(a.p(), model.p(), clip))
	runtime.KeepAlive(a)
	runtime.KeepAlive(model)
	return err
}

// Broadcast returns process from's tensor on every process (shape and dtype must agree). A collective.
func (a *Accelerator) Broadcast(t *Tensor, from int) (*Tensor, error) {
	var out uintptr
	err := wrap(raw.Acc_broadcast(a.p(), t.p(), from, &out))
	runtime.KeepAlive(a)
	runtime.KeepAlive(t)
	return newTensor(out), err
}

// SetSeed is Accelerate's set_seed: seeds every generator of this process (plus the process index
// when deviceSpecific); deterministic also selects deterministic algorithms.
func (a *Accelerator) SetSeed(seed uint64, deviceSpecific, deterministic bool) error {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	err := wrap(raw.Acc_set_seed(a.p(), seed, b(deviceSpecific), b(deterministic)))
	runtime.KeepAlive(a)
	return err
}

// StepWasSkipped reports whether the last Step was skipped (fp16 found inf/nan gradients).
func (o *Optimizer) StepWasSkipped() (bool, error) {
	var v int32
	err := wrap(raw.Acc_optimizer_step_was_skipped(o.p(), &v))
	runtime.KeepAlive(o)
	return v != 0, err
}
