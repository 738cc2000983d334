package acc

import (
	"runtime"

	"github.com/libacc/libacc/bindings/go/internal/raw"
)

// Accelerator is the context of one training process (Accelerate's Accelerator): process state,
// the process group, preparation of models, optimizers and data, backward, collectives and
// checkpoints (SaveState, LoadState, ResumeFromCheckpoint, RegisterForCheckpointing).
//
// A handle may be used by one goroutine at a time; different handles may be used concurrently.
// Concurrent use of one handle fails with ErrBusy instead of corrupting anything.
type Accelerator struct {
	handle
	checkpoints *checkpointFailure // shared with the objects registered for checkpointing
}

func (a *Accelerator) p() uintptr {
	if a == nil {
		return 0
	}
	return a.ptr
}

// NewAccelerator creates the accelerator from Accelerate's constructor keys, given as JSON text, a
// map or a struct (nil for the defaults): "cpu", "mixed_precision", "gradient_accumulation_steps",
// "seed", "dataloader_config", "ddp_kwargs", ... Values set by `acc launch` apply beneath these.
// With WORLD_SIZE > 1 in the environment this joins the process group.
func NewAccelerator(config any) (*Accelerator, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	text, err := jsonText(config)
	if err != nil {
		return nil, err
	}
	var out uintptr
	if err := wrap(raw.Acc_accelerator_create(text, &out)); err != nil {
		return nil, err
	}
	a := &Accelerator{checkpoints: &checkpointFailure{}}
	track(a, &a.handle, out, "Accelerator", raw.Acc_accelerator_destroy)
	return a, nil
}

// Close releases the accelerator. Objects created with it stay valid (they keep what they need
// alive). Idempotent.
func (a *Accelerator) Close() error {
	if a != nil {
		raw.Acc_accelerator_destroy(a.release())
	}
	return nil
}

func (a *Accelerator) int32Query(f func(uintptr, *int32) error) (int, error) {
	var v int32
	err := wrap(f(a.p(), &v))
	runtime.KeepAlive(a)
	return int(v), err
}

// ProcessIndex is this process's global rank.
func (a *Accelerator) ProcessIndex() (int, error) { return a.int32Query(raw.Acc_process_index) }

// LocalProcessIndex is this process's rank on its machine.
func (a *Accelerator) LocalProcessIndex() (int, error) {
	return a.int32Query(raw.Acc_local_process_index)
}

// NumProcesses is the number of processes in the job.
func (a *Accelerator) NumProcesses() (int, error) { return a.int32Query(raw.Acc_num_processes) }

// IsMainProcess reports whether this is the global main process (rank 0).
func (a *Accelerator) IsMainProcess() (bool, error) {
	v, err := a.int32Query(raw.Acc_is_main_process)
	return v != 0, err
}

func (a *Accelerator) stringQuery(f func(uintptr, *string) error) (string, error) {
	var s string
	err := wrap(f(a.p(), &s))
	runtime.KeepAlive(a)
	return s, err
}

// Device is this process's device, e.g. "cpu" or "cuda:0".
func (a *Accelerator) Device() (string, error) { return a.stringQuery(raw.Acc_device) }

// DistributedType is Accelerate's name for the setup: "NO", "MULTI_CPU", "MULTI_GPU".
func (a *Accelerator) DistributedType() (string, error) {
	return a.stringQuery(raw.Acc_distributed_type)
}

// ConfigJSON is the resolved configuration as JSON, each value with where it came from.
func (a *Accelerator) ConfigJSON() (string, error) { return a.stringQuery(raw.Acc_config_json) }

// Prepare prepares any of model, optimizer, scheduler and data loader (each may be nil) for this
// process, in place: the model moves to the device and is wrapped for distributed training, the
// loader is sharded across processes. An optimizer needs its model prepared (now or before).
// Preparing an object twice fails with ErrInvalidState.
func (a *Accelerator) Prepare(model *Model, opt *Optimizer, sched *Scheduler, dl *DataLoader) error {
	err := wrap(raw.Acc_prepare(a.p(), model.p(), opt.p(), sched.p(), dl.p()))
	runtime.KeepAlive(a)
	runtime.KeepAlive(model)
	runtime.KeepAlive(opt)
	runtime.KeepAlive(sched)
	runtime.KeepAlive(dl)
	return err
}

// Backward back-propagates a scalar loss from Model.Forward (gradients are all-reduced across
// processes under DDP).
func (a *Accelerator) Backward(loss *Tensor) error {
	err := wrap(raw.Acc_backward(a.p(), loss.p()))
	runtime.KeepAlive(a)
	runtime.KeepAlive(loss)
	return err
}

func (a *Accelerator) tensorOp(t *Tensor, f func(uintptr, uintptr, *uintptr) error) (*Tensor, error) {
	var out uintptr
	err := wrap(f(a.p(), t.p(), &out))
	runtime.KeepAlive(a)
	runtime.KeepAlive(t)
	return newTensor(out), err
}

// Gather concatenates t from every process along dim 0, in rank order. Every process must call it.
func (a *Accelerator) Gather(t *Tensor) (*Tensor, error) { return a.tensorOp(t, raw.Acc_gather) }

// GatherForMetrics is Gather, but on the last batch of the active prepared data loader it drops the
// samples that sharding duplicated, so metrics see each sample exactly once.
func (a *Accelerator) GatherForMetrics(t *Tensor) (*Tensor, error) {
	return a.tensorOp(t, raw.Acc_gather_for_metrics)
}

// ReduceOp is an element-wise reduction across processes.
type ReduceOp int32

// Reductions for Reduce.
const (
	ReduceSum  ReduceOp = ReduceOp(raw.ACC_REDUCE_SUM)
	ReduceMean ReduceOp = ReduceOp(raw.ACC_REDUCE_MEAN)
	ReduceMax  ReduceOp = ReduceOp(raw.ACC_REDUCE_MAX)
)

// Reduce reduces t element-wise across processes; every process gets the result.
func (a *Accelerator) Reduce(t *Tensor, op ReduceOp) (*Tensor, error) {
	var out uintptr
	err := wrap(raw.Acc_reduce(a.p(), t.p(), int(op), &out))
	runtime.KeepAlive(a)
	runtime.KeepAlive(t)
	return newTensor(out), err
}

// WaitForEveryone is a barrier across all processes.
func (a *Accelerator) WaitForEveryone() error {
	err := wrap(raw.Acc_wait_for_everyone(a.p()))
	runtime.KeepAlive(a)
	return err
}
