package acc

import (
	"math"
	"runtime"
	"strconv"
	"strings"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// NoStep logs values without a step (Accelerate's step=None).
const NoStep int64 = -1

// Scalar is one named value for LogScalars.
type Scalar struct {
	Name  string
	Value float64
}

// InitTrackers is Accelerate's init_trackers: it starts the trackers the config's "log_with" names
// ("tensorboard", "jsonl", "csv", "mlflow", "wandb", "all") for a run named projectName, on the main process
// only (the others check the arguments), and records config (JSON text, a map or a struct; nil for
// none) as its hyperparameters. initKwargs holds options per tracker, e.g.
// map[string]any{"mlflow": map[string]any{"run_name": "baseline"}} (nil for none).
func (a *Accelerator) InitTrackers(projectName string, config, initKwargs any) error {
	cfg, err := jsonText(config)
	if err != nil {
		return err
	}
	kw, err := jsonText(initKwargs)
	if err != nil {
		return err
	}
	err = wrap(raw.Acc_init_trackers(a.p(), projectName, cfg, kw))
	runtime.KeepAlive(a)
	return err
}

// Log logs values (JSON text, a map or a struct: numbers and booleans are scalars, strings text,
// objects of numbers several scalars under one name) to every tracker at step (NoStep: none), on the
// main process only. encoding/json cannot write NaN: log such values with LogScalars.
func (a *Accelerator) Log(values any, step int64) error {
	text, err := jsonText(values)
	if err != nil {
		return err
	}
	err = wrap(raw.Acc_log(a.p(), text, step))
	runtime.KeepAlive(a)
	return err
}

// LogScalars logs named numbers, in order, at step (NoStep: none); NaN and the infinities are allowed.
func (a *Accelerator) LogScalars(values []Scalar, step int64) error {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(v.Name))
		b.WriteString(": ")
		switch {
		case math.IsNaN(v.Value):
			b.WriteString("NaN")
		case math.IsInf(v.Value, 1):
			b.WriteString("Infinity")
		case math.IsInf(v.Value, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(strconv.FormatFloat(v.Value, 'g', -1, 64))
		}
	}
	b.WriteByte('}')
	return a.Log(b.String(), step)
}

// EndTraining is Accelerate's end_training: it finishes the trackers (files synced and closed, runs
// marked finished).
func (a *Accelerator) EndTraining() error {
	err := wrap(raw.Acc_end_training(a.p()))
	runtime.KeepAlive(a)
	return err
}
