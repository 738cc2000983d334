package acc

import (
	"errors"
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Profile is a running profile (Accelerator.Profile), torch.profiler's prof.
type Profile struct {
	a *Accelerator
}

// Step is torch.profiler's step(): the current step ends and the next begins.
func (p *Profile) Step() error {
	err := wrap(raw.Acc_profile_step(p.a.p()))
	runtime.KeepAlive(p.a)
	return err
}

// Profile runs body inside Accelerate's profile(): LibTorch's Kineto profiler records the work of this
// goroutine's OS thread (locked to it meanwhile), with the config's "profile_kwargs" or, when
// profileKwargs is not nil, with those ProfileKwargs instead (JSON text, a map or a struct: "activities",
// "schedule_option" {"wait", "warmup", "active", "repeat", "skip_first"}, "record_shapes",
// "profile_memory", "with_stack", "with_flops", "with_modules", "output_trace_dir"). Call p.Step() at the
// end of each training step: the schedule records some steps, each a "ProfilerStep#N" range. The profile
// ends when body returns, even with an error (the first error is returned); with "output_trace_dir" that
// writes profile_<rank>.json there and waits for every process.
func (a *Accelerator) Profile(profileKwargs any, body func(p *Profile) error) error {
	kw, err := jsonText(profileKwargs)
	if err != nil {
		return err
	}
	runtime.LockOSThread() // Kineto profiles the thread that started it
	defer runtime.UnlockOSThread()
	if err := wrap(raw.Acc_profile_begin(a.p(), kw)); err != nil {
		runtime.KeepAlive(a)
		return err
	}
	bodyErr := body(&Profile{a: a})
	endErr := wrap(raw.Acc_profile_end(a.p()))
	runtime.KeepAlive(a)
	return errors.Join(bodyErr, endErr)
}
