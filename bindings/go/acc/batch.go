package acc

import (
	"errors"
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Batch is a named batch: an ordered mapping name -> tensor ("input_ids", "attention_mask",
// "labels", ...), the dict Accelerate hands to a model. Datasets hold such samples (DatasetFromBatch,
// DatasetFromBatchFunc), loaders yield them (DataLoader.NextBatch) and a model takes one and returns
// its outputs as one (Model.ForwardBatch: "loss", "logits" or "output"). A batch shares its tensors'
// data with the tensors put in and taken out (no copy). Close it when done.
type Batch struct{ handle }

func (b *Batch) p() uintptr {
	if b == nil {
		return 0
	}
	return b.ptr
}

func newBatch(ptr uintptr) *Batch {
	if ptr == 0 {
		return nil
	}
	b := &Batch{}
	track(b, &b.handle, ptr, "Batch", raw.Acc_batch_destroy)
	return b
}

// NewBatch makes a batch of the given entries, in order (none: an empty batch). The batch shares the
// tensors' data; the tensors stay the caller's to close.
func NewBatch(entries ...NamedTensor) (*Batch, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var out uintptr
	if err := wrap(raw.Acc_batch_create(&out)); err != nil {
		return nil, err
	}
	b := newBatch(out)
	for _, e := range entries {
		if err := b.Set(e.Name, e.Tensor); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// Close releases the batch (tensors taken from it stay valid). Idempotent.
func (b *Batch) Close() error {
	if b != nil {
		raw.Acc_batch_destroy(b.release())
	}
	return nil
}

// Set adds name -> t, or replaces the tensor of name in its place. The batch shares t's data; t stays
// the caller's to close. name must not be empty.
func (b *Batch) Set(name string, t *Tensor) error {
	err := wrap(raw.Acc_batch_set(b.p(), name, t.p()))
	runtime.KeepAlive(b)
	runtime.KeepAlive(t)
	return err
}

// Get returns the tensor of name (sharing its data); close it when done. A missing name is
// ErrInvalidArgument, whose message lists the names present.
func (b *Batch) Get(name string) (*Tensor, error) {
	var out uintptr
	err := wrap(raw.Acc_batch_get(b.p(), name, &out))
	runtime.KeepAlive(b)
	if err != nil {
		return nil, err
	}
	return newTensor(out), nil
}

// Contains reports whether the batch has a tensor named name.
func (b *Batch) Contains(name string) (bool, error) {
	var v int32
	err := wrap(raw.Acc_batch_contains(b.p(), name, &v))
	runtime.KeepAlive(b)
	return v != 0, err
}

// Len is the number of tensors.
func (b *Batch) Len() (int, error) {
	var n int64
	err := wrap(raw.Acc_batch_count(b.p(), &n))
	runtime.KeepAlive(b)
	return int(n), err
}

// Names returns the names, in insertion order.
func (b *Batch) Names() ([]string, error) {
	n, err := b.Len()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var name string // a fresh variable: cgo refuses a pointer into memory that holds Go pointers
		if err := wrap(raw.Acc_batch_name(b.p(), int64(i), &name)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	runtime.KeepAlive(b)
	return names, nil
}

// Tensors returns the entries in insertion order (each tensor shares the batch's data). Close the
// tensors when done.
func (b *Batch) Tensors() ([]NamedTensor, error) {
	names, err := b.Names()
	if err != nil {
		return nil, err
	}
	out := make([]NamedTensor, 0, len(names))
	for _, name := range names {
		t, err := b.Get(name)
		if err != nil {
			for _, e := range out {
				e.Tensor.Close()
			}
			return nil, err
		}
		out = append(out, NamedTensor{Name: name, Tensor: t})
	}
	return out, nil
}

// DatasetFromBatch makes a dataset of named columns (torch's TensorDataset, named): sample i is
// {name: columns[name][i]}. The tensors must agree in their number of rows; they are copied, so
// columns may be closed at once.
func DatasetFromBatch(columns *Batch) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var out uintptr
	err := wrap(raw.Acc_dataset_from_batch(columns.p(), &out))
	runtime.KeepAlive(columns)
	return newDataset(out, err)
}

// NextBatch returns this process's next batch with its tensors by name, or nil (and no error) at the
// end of an epoch; the following call starts the next epoch. Close the batch when done. For a
// DatasetFromBatchFunc dataset, a failure of the function is an ErrCallback that wraps its error.
func (l *DataLoader) NextBatch() (*Batch, error) {
	var out uintptr
	err := wrap(raw.Acc_dataloader_next_batch(l.p(), &out))
	runtime.KeepAlive(l)
	if err != nil {
		return nil, l.withCause(err)
	}
	return newBatch(out), nil
}

// withCause attaches a dataset function's own error to the ErrCallback it caused.
func (l *DataLoader) withCause(err error) error {
	var e *Error
	if l != nil && l.ds != nil && l.ds.fn != nil && errors.As(err, &e) && e.Code == CodeCallback {
		e.cause = l.ds.fn.takeErr()
	}
	return err
}

// ForwardBatch runs the model on a named batch, as Accelerate's model(**batch), and returns its
// outputs as a batch (close it). The built-in MLP takes "input" (and "targets") and returns "output"
// (and "loss"); the GPT takes "input_ids" with "targets" (aligned, -1 ignored) or Hugging Face's
// "labels" (shifted inside, -100 ignored) and returns "logits" (and "loss"); a TorchScript module gets
// the tensors by its forward's argument names. A name the model does not take is refused. The loss
// keeps its graph, ready for Backward.
func (m *Model) ForwardBatch(batch *Batch) (*Batch, error) {
	var out uintptr
	err := wrap(raw.Acc_model_forward_batch(m.p(), batch.p(), &out))
	runtime.KeepAlive(m)
	runtime.KeepAlive(batch)
	if err != nil {
		return nil, err
	}
	return newBatch(out), nil
}
