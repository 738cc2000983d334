package acc

import (
	"runtime"
	"unsafe"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// bytesList copies items into a new libacc byte-string list (the caller destroys it).
func bytesList(items [][]byte) (uintptr, error) {
	var list uintptr
	if err := wrap(raw.Acc_bytes_list_create(&list)); err != nil {
		return 0, err
	}
	for _, it := range items {
		if err := wrap(raw.Acc_bytes_list_append(list, it)); err != nil {
			raw.Acc_bytes_list_destroy(list)
			return 0, err
		}
	}
	return list, nil
}

// fromBytesList copies a libacc byte-string list into Go memory.
func fromBytesList(list uintptr) ([][]byte, error) {
	var n int64
	if err := wrap(raw.Acc_bytes_list_count(list, &n)); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for i := int64(0); i < n; i++ {
		var p unsafe.Pointer
		var size uint64
		if err := wrap(raw.Acc_bytes_list_get(list, i, &p, &size)); err != nil {
			return nil, err
		}
		out[i] = make([]byte, size)
		if size > 0 {
			copy(out[i], unsafe.Slice((*byte)(p), size))
		}
	}
	return out, nil
}

func (a *Accelerator) objectOp(items [][]byte, f func(uintptr, uintptr, *uintptr) error) ([][]byte, error) {
	in, err := bytesList(items)
	if err != nil {
		return nil, err
	}
	defer raw.Acc_bytes_list_destroy(in)
	var out uintptr
	err = wrap(f(a.p(), in, &out))
	runtime.KeepAlive(a)
	if err != nil {
		return nil, err
	}
	defer raw.Acc_bytes_list_destroy(out)
	return fromBytesList(out)
}

// GatherObject is Accelerate's gather_object: the items of every process (serialized by the caller,
// e.g. as JSON), concatenated in rank order, on every process. A collective; a process may give none.
func (a *Accelerator) GatherObject(items [][]byte) ([][]byte, error) {
	return a.objectOp(items, raw.Acc_gather_object)
}

// GatherObjectForMetrics is GatherForMetrics for objects, one item per sample of the batch: on the
// last batch of the active prepared loader only the real samples are kept.
func (a *Accelerator) GatherObjectForMetrics(items [][]byte) ([][]byte, error) {
	return a.objectOp(items, raw.Acc_gather_object_for_metrics)
}

// SkipFirstBatches returns a loader over the same data that skips the first n batches of its next
// pass (Accelerate's skip_first_batches, to resume mid-epoch). Close it like any loader.
func (l *DataLoader) SkipFirstBatches(n int64) (*DataLoader, error) {
	var out uintptr
	err := wrap(raw.Acc_dataloader_skip_first_batches(l.p(), n, &out))
	runtime.KeepAlive(l)
	if err != nil {
		return nil, err
	}
	s := &DataLoader{ds: l.ds}
	track(s, &s.handle, out, "DataLoader", raw.Acc_dataloader_destroy)
	return s, nil
}

// Epoch is the epoch the current pass runs, or the next one between passes.
func (l *DataLoader) Epoch() (int64, error) {
	var v int64
	err := wrap(raw.Acc_dataloader_epoch(l.p(), &v))
	runtime.KeepAlive(l)
	return v, err
}
