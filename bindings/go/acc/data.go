package acc

import (
	"errors"
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Dataset is a source of samples (rows of tensors, named or not, a token file, data files prepared with a
// tokenizer, or a Go function).
type Dataset struct {
	handle
	fn *funcSource // the Go side of DatasetFromFunc and DatasetFromBatchFunc; nil otherwise
}

func (d *Dataset) p() uintptr {
	if d == nil {
		return 0
	}
	return d.ptr
}

func newDataset(out uintptr, err error) (*Dataset, error) {
	if err != nil {
		return nil, err
	}
	d := &Dataset{}
	track(d, &d.handle, out, "Dataset", raw.Acc_dataset_destroy)
	return d, nil
}

// DatasetFromTensors makes a dataset whose samples are the rows (dim 0) of inputs and, when not nil,
// of targets. Both are copied.
func DatasetFromTensors(inputs, targets *Tensor) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var out uintptr
	err := wrap(raw.Acc_dataset_from_tensors(inputs.p(), targets.p(), &out))
	runtime.KeepAlive(inputs)
	runtime.KeepAlive(targets)
	return newDataset(out, err)
}

// DatasetFromTokenFile memory-maps a file of little-endian tokens: {"block_size": T, "dtype":
// "uint16"|"int32"}. Sample i is tokens [i*T, i*T+T) as input and the next-token shift as target.
func DatasetFromTokenFile(path string, options any) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	// Two statements: Go does not order reading out against the call that sets it.
	err = wrap(raw.Acc_dataset_from_token_file(path, text, &out))
	return newDataset(out, err)
}

// DatasetFromFiles reads data files (JSON lines, CSV, Parquet, Arrow; a file or a folder) and prepares
// their rows with tok as datasets and TRL do; its batches are the collator's padded batches of named
// int64 tensors ("input_ids", "attention_mask", "labels", ...). path is "" when the options name
// "files". options (nil: the defaults; a JSON string or a value json.Marshal encodes) are
// acc_dataset_from_files' in acc.h and docs/data.md, e.g. {"mode": "tokenize", "collator":
// "with_padding"}. A bad option is ErrInvalidConfig naming it, a column the files lack ErrInvalidArgument
// listing theirs, an unreadable file ErrIO naming it. The dataset does not keep tok.
func DatasetFromFiles(path string, tok *Tokenizer, options any) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	p, done := tok.use()
	defer done()
	var out uintptr
	err = wrap(raw.Accx_dataset_from_files(path, p, text, &out))
	return newDataset(out, err)
}

// DatasetFromConfig is DatasetFromFiles with the accelerator's data.* settings (docs/configuration.md:
// from the environment or the accelerator's config, recorded in the run record), so that a run's data
// is its configuration. A bad setting is ErrInvalidConfig naming the key, its value and its source.
func DatasetFromConfig(a *Accelerator, tok *Tokenizer) (*Dataset, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	p, done := tok.use()
	defer done()
	var out uintptr
	err := wrap(raw.Acc_dataset_from_config(a.p(), p, &out))
	runtime.KeepAlive(a)
	return newDataset(out, err)
}

// GetBatch returns the batch a loader makes of the samples at indices, in that order (for a files
// dataset, the collator's padded batch of those rows): a look at the data without a loader. Close the
// batch when done. No index, or one outside the dataset, is ErrInvalidArgument naming it. For a
// DatasetFromBatchFunc dataset, a failure of the function is an ErrCallback that wraps its error.
func (d *Dataset) GetBatch(indices []int64) (*Batch, error) {
	var out uintptr
	err := wrap(raw.Acc_dataset_get_batch(d.p(), indices, &out))
	runtime.KeepAlive(d)
	if err != nil {
		var e *Error
		if d != nil && d.fn != nil && errors.As(err, &e) && e.Code == CodeCallback {
			e.cause = d.fn.takeErr()
		}
		return nil, err
	}
	return newBatch(out), nil
}

// Close releases the dataset (loaders made from it keep it alive). Idempotent.
func (d *Dataset) Close() error {
	if d != nil {
		raw.Acc_dataset_destroy(d.release())
	}
	return nil
}

// Len is the number of samples.
func (d *Dataset) Len() (int64, error) {
	var n int64
	err := wrap(raw.Acc_dataset_length(d.p(), &n))
	runtime.KeepAlive(d)
	return n, err
}

// DataLoader batches a dataset; once prepared, it yields this process's shard of every batch.
type DataLoader struct {
	handle
	ds *Dataset
}

func (l *DataLoader) p() uintptr {
	if l == nil {
		return 0
	}
	return l.ptr
}

// NewDataLoader makes a loader: {"batch_size": 1, "shuffle": false, "seed": 0, "drop_last": false}.
func NewDataLoader(ds *Dataset, options any) (*DataLoader, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(options)
	if err != nil {
		return nil, err
	}
	var out uintptr
	err = wrap(raw.Acc_dataloader_create(ds.p(), text, &out))
	runtime.KeepAlive(ds)
	if err != nil {
		return nil, err
	}
	l := &DataLoader{ds: ds}
	track(l, &l.handle, out, "DataLoader", raw.Acc_dataloader_destroy)
	return l, nil
}

// Close releases the loader. Idempotent.
func (l *DataLoader) Close() error {
	if l != nil {
		raw.Acc_dataloader_destroy(l.release())
	}
	return nil
}

// Next returns this process's next batch. At the end of an epoch ok is false and both tensors are
// nil; the following call starts the next epoch (reshuffled by the loader's generator). target is nil when
// the dataset has no targets. Close the tensors when done. A named batch of one or two tensors arrives
// as (input, target) in its order; NextBatch returns it by name.
func (l *DataLoader) Next() (input, target *Tensor, ok bool, err error) {
	var x, y uintptr
	var has int32
	err = wrap(raw.Acc_dataloader_next(l.p(), &x, &y, &has))
	runtime.KeepAlive(l)
	if err != nil {
		return nil, nil, false, l.withCause(err)
	}
	return newTensor(x), newTensor(y), has != 0, nil
}

// Len is the number of batches per epoch on this process.
func (l *DataLoader) Len() (int64, error) {
	var n int64
	err := wrap(raw.Acc_dataloader_length(l.p(), &n))
	runtime.KeepAlive(l)
	return n, err
}

// SetEpoch restarts at the beginning of epoch (the shuffle of that epoch).
func (l *DataLoader) SetEpoch(epoch int64) error {
	err := wrap(raw.Acc_dataloader_set_epoch(l.p(), epoch))
	runtime.KeepAlive(l)
	return err
}

// EndOfEpoch reports whether the last batch of the epoch is current.
func (l *DataLoader) EndOfEpoch() (bool, error) {
	var v int32
	err := wrap(raw.Acc_dataloader_end_of_epoch(l.p(), &v))
	runtime.KeepAlive(l)
	return v != 0, err
}
