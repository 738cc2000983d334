package acc

import (
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Parameter-efficient fine-tuning: frozen parameters and LoRA adapters as Hugging Face peft makes them.
// Parameter groups need no call of their own: they are NewOptimizer's "param_groups" option.

// SetRequiresGrad freezes (requiresGrad false) or unfreezes every parameter whose whole dotted name the
// regular expression pattern matches (Python's re syntax, matched by RE2 in linear time, as
// "param_groups": `model\.embed_tokens\..*`, `.*bias`), as torch's p.requires_grad_(), and returns how
// many matched. A frozen parameter gets no gradient, no optimizer state (create the optimizer after
// freezing) and no gradient all-reduce, and ClipGradNorm ignores it. A pattern matching nothing, or a bad
// expression, is ErrInvalidArgument naming it; a prepared model is ErrInvalidState (freeze before
// Prepare).
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

// AddLoRA is peft's get_peft_model with a LoraConfig (JSON text, a map or a struct): "r", "lora_alpha",
// "lora_dropout", "target_modules" (names, one regular expression, or "all-linear"), "bias",
// "use_rslora", "modules_to_save", "init_lora_weights", "layers_to_transform", "rank_pattern",
// "alpha_pattern", ... with peft's defaults, e.g.
//
//	{"r": 8, "lora_alpha": 16, "target_modules": "all-linear"}
//
// Each targeted linear layer computes base(x) + B(A(dropout(x))) * scaling and every other parameter is
// frozen. Targets matching nothing are ErrInvalidArgument listing the model's linear layers; a bad key or
// value is ErrInvalidArgument naming it; a model that has an adapter, or a prepared one, is
// ErrInvalidState. A is drawn from the CPU generator (seed it with the accelerator's "seed").
func (m *Model) AddLoRA(config any) error {
	text, err := jsonText(config)
	if err != nil {
		return err
	}
	err = wrap(raw.Acc_model_add_lora(m.p(), text))
	runtime.KeepAlive(m)
	return err
}

// LoadAdapter is peft's PeftModel.from_pretrained: it reads dir's adapter_config.json and
// adapter_model.safetensors (as peft or SaveAdapter wrote them), adds the adapter and loads its weights.
// options (nil for the defaults): {"is_trainable": false} (peft's default: the adapter is frozen too). A
// tensor the adapter does not have, one it lacks, or another shape is ErrInvalidArgument naming it, the
// model unchanged.
func (m *Model) LoadAdapter(dir string, options any) error {
	text, err := jsonText(options)
	if err != nil {
		return err
	}
	err = wrap(raw.Acc_model_load_adapter(m.p(), dir, text))
	runtime.KeepAlive(m)
	return err
}

// SaveAdapter is peft's save_pretrained of the adapter: adapter_config.json and
// adapter_model.safetensors in dir (created if missing), with peft's tensor names, so that peft's
// PeftModel.from_pretrained and LoadAdapter read it. A model without an adapter is ErrInvalidState. A
// prepared model is written by the main process, every process calling (collective).
func (m *Model) SaveAdapter(dir string) error {
	err := wrap(raw.Acc_model_save_adapter(m.p(), dir))
	runtime.KeepAlive(m)
	return err
}

// MergeAdapter is peft's merge_and_unload: each LoRA layer's B A * scaling is added to its base weight
// and the adapter removed, leaving a plain model (SavePretrained then writes a transformers checkpoint).
// A model without an adapter, or a prepared one, is ErrInvalidState.
func (m *Model) MergeAdapter() error {
	err := wrap(raw.Acc_model_merge_adapter(m.p()))
	runtime.KeepAlive(m)
	return err
}
