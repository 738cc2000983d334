package acc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Model is a trainable model: a built-in family (MLP, GPT), a TorchScript module or a Hugging Face
// causal LM (ModelFromPretrained).
type Model struct{ handle }

func (m *Model) p() uintptr {
	if m == nil {
		return 0
	}
	return m.ptr
}

func newModel(out uintptr, err error) (*Model, error) {
	if err != nil {
		return nil, err
	}
	m := &Model{}
	track(m, &m.handle, out, "Model", raw.Acc_model_destroy)
	return m, nil
}

// NewModel creates a built-in model from its spec (JSON text, a map or a struct), e.g.
//
//	{"type": "mlp", "sizes": [4, 32, 1], "activation": "tanh", "loss": "mse"}
//	{"type": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 2, "n_head": 4, "n_embd": 64}
//
// Parameters are initialised from the CPU generator (seed it with the accelerator's "seed").
func NewModel(spec any) (*Model, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(spec)
	if err != nil {
		return nil, err
	}
	var out uintptr
	// Two statements: Go does not order reading out against the call that sets it.
	err = wrap(raw.Acc_model_create(text, &out))
	return newModel(out, err)
}

// LoadTorchScript loads a TorchScript module file; options: {"loss": "mse"|"cross_entropy"|"none"}.
func LoadTorchScript(path string, options any) (*Model, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	// Two statements: Go does not order reading out against the call that sets it.
	err = wrap(raw.Acc_model_load_torchscript(path, text, &out))
	return newModel(out, err)
}

// ModelFromPretrained is transformers' from_pretrained: it loads a Hugging Face model directory
// (config.json, and model.safetensors or the shards model.safetensors.index.json lists) of a
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or MixtralForCausalLM. options (nil for the
// defaults; JSON text, a map or a struct): {"dtype": "auto"|"float32"|"bfloat16"|"float16"}, "auto"
// being the dtype config.json records; with "device_map" ("auto", "balanced", "balanced_low_0",
// "sequential"), "max_memory", "no_split_module_classes" and "offload_folder" it is Accelerate's
// load_checkpoint_and_dispatch: each weight goes where InferAutoDeviceMap plans it, in memory ("cpu")
// or left on the disk (the mapped checkpoint, read layer by layer; for inference). A missing file is ErrIO naming it; names or shapes that differ
// from transformers' are ErrInvalidArgument, listing them. The model comes in eval mode; it takes the
// named batch "input_ids" (with optional "attention_mask", "position_ids", "labels") and returns
// "logits" (and "loss"). Generate continues token sequences with it. See docs/hf-models.md.
func ModelFromPretrained(dir string, options any) (*Model, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	// Two statements: Go does not order reading out against the call that sets it.
	err = wrap(raw.Acc_model_from_pretrained(dir, text, &out))
	return newModel(out, err)
}

// ModelFromConfig is transformers' from_config: the architecture a config.json text names (configJSON;
// those ModelFromPretrained knows, another is ErrUnsupported naming it) with fresh weights initialised
// as transformers does (normal(0, initializer_range), zero biases, unit norms) from the CPU generator
// (seed it with the accelerator's "seed"). options as ModelFromPretrained's (nil for the defaults),
// plus {"device": "meta"}: Accelerate's init_empty_weights, the names and shapes without weight memory
// (for ModuleSizes and InferAutoDeviceMap). SavePretrained writes it with its config.
func ModelFromConfig(configJSON string, options any) (*Model, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	// Two statements: Go does not order reading out against the call that sets it.
	err = wrap(raw.Acc_model_from_config(configJSON, text, &out))
	return newModel(out, err)
}

// Close releases the model. Idempotent.
func (m *Model) Close() error {
	if m != nil {
		raw.Acc_model_destroy(m.release())
	}
	return nil
}

// Forward runs the model. With targets it also returns the scalar loss (ready for Backward);
// without, loss is nil. Close both results when done.
func (m *Model) Forward(input, targets *Tensor) (output, loss *Tensor, err error) {
	var o, l uintptr
	lp := &l
	if targets == nil {
		lp = nil
	}
	err = wrap(raw.Acc_model_forward(m.p(), input.p(), targets.p(), &o, lp))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	runtime.KeepAlive(targets)
	return newTensor(o), newTensor(l), err
}

// Loss runs the model and returns only the scalar loss (for a training step).
func (m *Model) Loss(input, targets *Tensor) (*Tensor, error) {
	var l uintptr
	err := wrap(raw.Acc_model_forward(m.p(), input.p(), targets.p(), nil, &l))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	runtime.KeepAlive(targets)
	return newTensor(l), err
}

// Predict runs the model and returns only its output.
func (m *Model) Predict(input *Tensor) (*Tensor, error) {
	var o uintptr
	err := wrap(raw.Acc_model_forward(m.p(), input.p(), 0, &o, nil))
	runtime.KeepAlive(m)
	runtime.KeepAlive(input)
	return newTensor(o), err
}

// SetTraining switches between training (dropout on) and evaluation mode.
func (m *Model) SetTraining(training bool) error {
	v := 0
	if training {
		v = 1
	}
	err := wrap(raw.Acc_model_set_training(m.p(), v))
	runtime.KeepAlive(m)
	return err
}

// NumParameters is the number of scalar parameters.
func (m *Model) NumParameters() (int64, error) {
	var n int64
	err := wrap(raw.Acc_model_num_parameters(m.p(), &n))
	runtime.KeepAlive(m)
	return n, err
}

// ModuleSizes is Accelerate's compute_module_sizes: the bytes of every module and tensor by dotted
// name ("" the whole model, "model.layers.0", ...), counting floating tensors in dtype ("float32",
// "bfloat16", "float16"; "" for their own; as Accelerate, a dtype wider than a tensor's own does not
// grow it). A tied output embedding counts once. It works on an empty model (ModelFromConfig with
// {"device": "meta"}). See docs/big-models.md.
func (m *Model) ModuleSizes(dtype string) (map[string]int64, error) {
	var text string
	err := wrap(raw.Acc_model_module_sizes(m.p(), dtype, &text))
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	var sizes map[string]int64
	if err := json.Unmarshal([]byte(text), &sizes); err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("module sizes: %v", err)}
	}
	return sizes, nil
}

// InferAutoDeviceMap is Accelerate's infer_auto_device_map (with get_balanced_memory for "auto",
// "balanced" and "balanced_low_0") for the model, which may be empty (ModelFromConfig with {"device":
// "meta"}). options (nil for the defaults; JSON text, a map or a struct): {"device_map": "auto" |
// "balanced" | "balanced_low_0" | "sequential", "max_memory": {"0": "10GiB", "1": 8000000000, "cpu":
// "30GB", "disk": ...}, "no_split_module_classes": [...], "dtype", "offload_buffers",
// "fallback_allocation"}; an unknown key, device or size is ErrInvalidConfig naming it. The map goes
// from module name to device: an int for an accelerator's index, the string "cpu" or "disk" otherwise,
// e.g. {"model.embed_tokens": 0, ..., "lm_head": "cpu"}, as Accelerate's for the same sizes and
// budget. See docs/big-models.md.
func (m *Model) InferAutoDeviceMap(options any) (map[string]any, error) {
	opts, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var text string
	err = wrap(raw.Acc_infer_auto_device_map(m.p(), opts, &text))
	runtime.KeepAlive(m)
	if err != nil {
		return nil, err
	}
	var devices map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	if err := dec.Decode(&devices); err != nil {
		return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("device map: %v", err)}
	}
	for name, d := range devices {
		switch v := d.(type) {
		case json.Number:
			i, err := v.Int64()
			if err != nil {
				return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("device map: %s: %v", name, err)}
			}
			devices[name] = int(i)
		case string:
		default:
			return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("device map: %s: unexpected %v", name, d)}
		}
	}
	return devices, nil
}

// NamedTensor is one entry of a state dict.
type NamedTensor struct {
	Name   string
	Tensor *Tensor
}

// StateDict returns copies of the named parameters and buffers, in order. Close the tensors. Under ZeRO-3 or
// FSDP each tensor is gathered from the shards (Accelerate's get_state_dict): a collective, every process calls it.
func (m *Model) StateDict() ([]NamedTensor, error) {
	var n int64
	if err := wrap(raw.Acc_model_state_size(m.p(), &n)); err != nil {
		return nil, err
	}
	out := make([]NamedTensor, 0, n)
	for i := int64(0); i < n; i++ {
		var name string
		var t uintptr
		if err := wrap(raw.Acc_model_state_get(m.p(), i, &name, &t)); err != nil {
			for _, e := range out {
				e.Tensor.Close()
			}
			return nil, err
		}
		out = append(out, NamedTensor{name, newTensor(t)})
	}
	runtime.KeepAlive(m)
	return out, nil
}

// SaveSafetensors writes the state dict to a safetensors file, atomically. Under ZeRO-3 or FSDP the state is
// gathered from the shards: a collective, every process calls it and the main process writes.
func (m *Model) SaveSafetensors(path string) error {
	err := wrap(raw.Acc_model_save_safetensors(m.p(), path))
	runtime.KeepAlive(m)
	return err
}

// SaveModel is Accelerate's save_model: the unwrapped model in Hugging Face format under dir:
// model.safetensors, or shards model-00001-of-0000N.safetensors with model.safetensors.index.json when it
// is larger than maxShardSize ("10GB": 10^10 bytes, "10GiB": 10 * 2^30, or a number of bytes; "" for
// "10GB"). A prepared model is written by the main process, every process calling (collective). See
// docs/checkpoints.md.
func (m *Model) SaveModel(dir, maxShardSize string) error {
	err := wrap(raw.Acc_save_model(m.p(), dir, maxShardSize))
	runtime.KeepAlive(m)
	return err
}

// SavePretrained is transformers' save_pretrained for a model of ModelFromPretrained or
// ModelFromConfig: SaveModel's files (model.safetensors, or shards past maxShardSize with
// model.safetensors.index.json; "" for "10GB") plus config.json (its "dtype" the weights') and
// generation_config.json, so that ModelFromPretrained and transformers' from_pretrained load dir.
// Another model is ErrInvalidArgument. A prepared model is written by the main process, every process
// calling (collective).
func (m *Model) SavePretrained(dir, maxShardSize string) error {
	err := wrap(raw.Acc_model_save_pretrained(m.p(), dir, maxShardSize))
	runtime.KeepAlive(m)
	return err
}

// LoadSafetensors loads a safetensors file into the model; every name and shape must match.
func (m *Model) LoadSafetensors(path string) error {
	err := wrap(raw.Acc_model_load_safetensors(m.p(), path))
	runtime.KeepAlive(m)
	return err
}

// Optimizer updates a model's parameters.
type Optimizer struct{ handle }

func (o *Optimizer) p() uintptr {
	if o == nil {
		return 0
	}
	return o.ptr
}

// NewOptimizer creates an optimizer over all parameters of model: {"type": "sgd"|"adam"|"adamw", "lr",
// "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad", "fused"}, with PyTorch's
// defaults; the table of keys and defaults is in docs/c-api.md, "Optimizer options". "param_groups"
// gives groups of parameters their own options: [{"params": ["lm_head\\..*"], "lr": 1e-4}, ...]
// (regular expressions over whole parameter names; the rest take the top-level options), or
// "transformers" (the Trainer's: no weight decay for biases and norms).
func NewOptimizer(model *Model, options any) (*Optimizer, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	err = wrap(raw.Acc_optimizer_create(model.p(), text, &out))
	runtime.KeepAlive(model)
	if err != nil {
		return nil, err
	}
	o := &Optimizer{}
	track(o, &o.handle, out, "Optimizer", raw.Acc_optimizer_destroy)
	return o, nil
}

// Close releases the optimizer. Idempotent.
func (o *Optimizer) Close() error {
	if o != nil {
		raw.Acc_optimizer_destroy(o.release())
	}
	return nil
}

// Step applies the gradients.
func (o *Optimizer) Step() error {
	err := wrap(raw.Acc_optimizer_step(o.p()))
	runtime.KeepAlive(o)
	return err
}

// ZeroGrad clears the gradients.
func (o *Optimizer) ZeroGrad() error {
	err := wrap(raw.Acc_optimizer_zero_grad(o.p()))
	runtime.KeepAlive(o)
	return err
}

// LR is the current learning rate.
func (o *Optimizer) LR() (float64, error) {
	var v float64
	err := wrap(raw.Acc_optimizer_lr(o.p(), &v))
	runtime.KeepAlive(o)
	return v, err
}

// Scheduler sets an optimizer's learning rate by step.
type Scheduler struct{ handle }

func (s *Scheduler) p() uintptr {
	if s == nil {
		return 0
	}
	return s.ptr
}

// NewScheduler creates a learning-rate schedule: {"type": "constant"|"linear"|"cosine",
// "warmup_steps": 0, "total_steps": N, "min_lr_ratio": 0.0}.
func NewScheduler(opt *Optimizer, options any) (*Scheduler, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	err = wrap(raw.Acc_scheduler_create(opt.p(), text, &out))
	runtime.KeepAlive(opt)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{}
	track(s, &s.handle, out, "Scheduler", raw.Acc_scheduler_destroy)
	return s, nil
}

// Close releases the scheduler. Idempotent.
func (s *Scheduler) Close() error {
	if s != nil {
		raw.Acc_scheduler_destroy(s.release())
	}
	return nil
}

// Step advances the schedule by one step.
func (s *Scheduler) Step() error {
	err := wrap(raw.Acc_scheduler_step(s.p()))
	runtime.KeepAlive(s)
	return err
}

// LastLR is the learning rate the schedule set last.
func (s *Scheduler) LastLR() (float64, error) {
	var v float64
	err := wrap(raw.Acc_scheduler_last_lr(s.p(), &v))
	runtime.KeepAlive(s)
	return v, err
}
