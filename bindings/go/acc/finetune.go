package acc

import (
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Parameter-efficient fine-tuning: frozen parameters and LoRA adapters as Hugging Face peft makes them.
// Parameter groups need no call of their own: they are NewOptimizer's "param_groups" option.

// SetRequiresGrad freezes (requiresGrad false) or unfreezes every parameter whose whole dotted name the
// regular expression pattern matches (ECMAScript, as "param_groups": `model\.embed_tokens\..*`,
// `.*bias`), as torch's p.requires_grad_(), and returns how many matched. A frozen parameter gets no
// gradient, no optimizer state (create the optimizer after freezing) and no gradient all-reduce, and
// ClipGradNorm ignores it. A pattern matching nothing, or a bad expression, is ErrInvalidArgument naming
// it; a prepared model is ErrInvalidState (freeze before Prepare).
func (m *Model) SetRequiresGrad(pattern string, requiresGrad bool) (int64, error) {
	v := 0
	if requiresGrad {
		v = 1
	}
	var n int64
	err := wrap(raw.Acc_model_set_requires_grad(m.p(), pattern, v, &n))
	runtime.KeepAlive(m)
	return n, err
}
