package acc_test

// The shared conformance scenarios (tests/bindings/scenarios.txt), in Go.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libacc/libacc/bindings/go/acc"
)

// must returns v, or panics (failing the test with a stack trace) on an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// expectErr checks that err is an *acc.Error with code whose message contains needle, through both
// errors.Is (sentinel) and errors.As (details).
func expectErr(t *testing.T, err error, sentinel *acc.Error, needle string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %v naming %q, got success", sentinel.Code, needle)
	}
	var e *acc.Error
	if !errors.As(err, &e) {
		t.Fatalf("expected *acc.Error, got %T %v", err, err)
	}
	if !errors.Is(err, sentinel) || e.Code != sentinel.Code {
		t.Fatalf("expected %v, got %v (%q)", sentinel.Code, e.Code, e.Message)
	}
	if !strings.Contains(e.Message, needle) {
		t.Fatalf("expected the message to name %q, got %q", needle, e.Message)
	}
}

// scenario: library
func TestLibrary(t *testing.T) {
	if v := acc.Version(); strings.Count(v, ".") != 2 {
		t.Fatalf("version %q", v)
	}
	ok(t, acc.CheckABI())
	var info map[string]any
	ok(t, json.Unmarshal([]byte(acc.BuildInfo()), &info))
	if _, has := info["torch"]; !has {
		t.Fatalf("build info without torch: %v", info)
	}
	if acc.CodeInvalidConfig.String() != "ACC_ERR_INVALID_CONFIG" || acc.Code(999).String() != "ACC_ERR_UNKNOWN" {
		t.Fatal("status names")
	}
}

// scenario: create
func TestCreate(t *testing.T) {
	a := must(acc.NewAccelerator(nil))
	defer a.Close()
	if d := must(a.Device()); d != "cpu" {
		t.Fatalf("device %q", d)
	}
	if d := must(a.DistributedType()); d != "NO" {
		t.Fatalf("distributed type %q", d)
	}
	if r := must(a.ProcessIndex()); r != 0 {
		t.Fatal(r)
	}
	if r := must(a.LocalProcessIndex()); r != 0 {
		t.Fatal(r)
	}
	if n := must(a.NumProcesses()); n != 1 {
		t.Fatal(n)
	}
	if !must(a.IsMainProcess()) {
		t.Fatal("not main")
	}
	if c := must(a.ConfigJSON()); !strings.Contains(c, "bucket_cap_mb") {
		t.Fatalf("config %s", c)
	}
	// Options as a map and as a struct.
	b := must(acc.NewAccelerator(map[string]any{"seed": 3, "cpu": true}))
	b.Close()
	c := must(acc.NewAccelerator(struct {
		Seed int `json:"seed"`
	}{5}))
	c.Close()
}

// scenario: bad_config
func TestBadConfig(t *testing.T) {
	_, err := acc.NewAccelerator(`{"gradient_acumulation_steps": 2}`)
	expectErr(t, err, acc.ErrInvalidConfig, "gradient_accumulation_steps")
	_, err = acc.NewAccelerator(map[string]any{"mixed_precision": "fp32"})
	expectErr(t, err, acc.ErrInvalidConfig, "bf16")
	_, err = acc.NewAccelerator(`{"cpu": true`)
	expectErr(t, err, acc.ErrInvalidConfig, "JSON")
	_, err = acc.NewModel(`{"type": "mlp", "sizes": [2, 1], "layers": 3}`)
	expectErr(t, err, acc.ErrInvalidConfig, "unknown key 'layers'")
	_, err = acc.NewAccelerator(map[string]any{"bad": make(chan int)})
	expectErr(t, err, acc.ErrInvalidConfig, "JSON")
}

// The message comes from the very call that failed even when goroutines hop between OS threads:
// many goroutines fail with different keys at once and each must read its own message.
func TestErrorMessagesStayWithTheirCall(t *testing.T) {
	runtime.GOMAXPROCS(4)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				key := fmt.Sprintf("no_such_key_%d_%d", g, i)
				_, err := acc.NewModel(fmt.Sprintf(`{"type": "mlp", "sizes": [2, 1], "%s": 1}`, key))
				var e *acc.Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, key) {
					errs <- fmt.Errorf("goroutine %d: expected a message naming %s, got %v", g, key, err)
					return
				}
				runtime.Gosched()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// scenario: null_handle
func TestNullHandle(t *testing.T) {
	var a *acc.Accelerator
	_, err := a.ProcessIndex()
	expectErr(t, err, acc.ErrInvalidArgument, "accelerator is NULL")
	expectErr(t, a.Backward(nil), acc.ErrInvalidArgument, "accelerator is NULL")
	var m *acc.Model
	_, _, err = m.Forward(nil, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "model is NULL")
	_, err = acc.NewOptimizer(nil, `{"type": "sgd"}`)
	expectErr(t, err, acc.ErrInvalidArgument, "model is NULL")
	var o *acc.Optimizer
	expectErr(t, o.Step(), acc.ErrInvalidArgument, "optimizer is NULL")
	var s *acc.Scheduler
	expectErr(t, s.Step(), acc.ErrInvalidArgument, "scheduler is NULL")
	var l *acc.DataLoader
	_, _, _, err = l.Next()
	expectErr(t, err, acc.ErrInvalidArgument, "dataloader is NULL")
	var x *acc.Tensor
	_, err = x.Numel()
	expectErr(t, err, acc.ErrInvalidArgument, "tensor is NULL")
	b := must(acc.NewAccelerator(nil))
	defer b.Close()
	expectErr(t, b.Prepare(nil, nil, nil, nil), acc.ErrInvalidArgument, "nothing to prepare")
	_, err = b.Gather(nil)
	expectErr(t, err, acc.ErrInvalidArgument, "NULL")
}

// scenario: closed_handle
func TestClosedHandle(t *testing.T) {
	a := must(acc.NewAccelerator(nil))
	ok(t, a.Close())
	ok(t, a.Close()) // idempotent
	_, err := a.NumProcesses()
	expectErr(t, err, acc.ErrInvalidArgument, "accelerator is NULL")
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`))
	ok(t, m.Close())
	_, err = m.NumParameters()
	expectErr(t, err, acc.ErrInvalidArgument, "model is NULL")
	x := must(acc.FromFloat32([]float32{1, 2}))
	ok(t, x.Close())
	ok(t, x.Close())
	_, err = x.Float32s()
	expectErr(t, err, acc.ErrInvalidArgument, "tensor is NULL")
}

func regression(t *testing.T, n int) *acc.Dataset {
	t.Helper()
	x := make([]float32, 2*n)
	y := make([]float32, n)
	for i := 0; i < n; i++ {
		x[2*i] = float32(math.Sin(float64(i) * 0.37))
		x[2*i+1] = float32(math.Cos(float64(i) * 0.11))
		y[i] = 3*x[2*i] - 2*x[2*i+1] + 1
	}
	tx := must(acc.FromFloat32(x, int64(n), 2))
	ty := must(acc.FromFloat32(y, int64(n), 1))
	defer tx.Close()
	defer ty.Close()
	return must(acc.DatasetFromTensors(tx, ty))
}

// scenario: call_order
func TestCallOrder(t *testing.T) {
	a := must(acc.NewAccelerator(`{"seed": 7}`))
	defer a.Close()
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 8, 1]}`))
	defer m.Close()
	other := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`))
	defer other.Close()
	o := must(acc.NewOptimizer(m, `{"type": "sgd", "lr": 0.1}`))
	defer o.Close()
	otherOpt := must(acc.NewOptimizer(other, `{"type": "sgd"}`))
	defer otherOpt.Close()
	expectErr(t, a.Prepare(nil, otherOpt, nil, nil), acc.ErrInvalidState, "model is not prepared")
	expectErr(t, a.Prepare(nil, nil, nil, nil), acc.ErrInvalidArgument, "nothing to prepare")
	ok(t, a.Prepare(m, o, nil, nil))
	expectErr(t, a.Prepare(m, nil, nil, nil), acc.ErrInvalidState, "already prepared")
	_, err := acc.NewScheduler(o, `{"type": "cosine"}`)
	expectErr(t, err, acc.ErrInvalidConfig, "total_steps")
}

// scenario: tensor_errors
func TestTensorErrors(t *testing.T) {
	_, err := acc.NewTensor(make([]byte, 12), acc.Float32, 4)
	expectErr(t, err, acc.ErrInvalidArgument, "nbytes")
	_, err = acc.NewTensor(make([]byte, 16), acc.DType(42), 4)
	expectErr(t, err, acc.ErrInvalidArgument, "dtype 42")
	x := must(acc.FromFloat32([]float32{1, 2, 3, 4}))
	defer x.Close()
	_, err = x.Item()
	expectErr(t, err, acc.ErrInvalidArgument, "one-element")
	expectErr(t, x.CopyTo(make([]byte, 8)), acc.ErrInvalidArgument, "nbytes")
	_, err = x.Int64s()
	expectErr(t, err, acc.ErrInvalidArgument, "not int64")
	a := must(acc.NewAccelerator(nil))
	defer a.Close()
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [4, 1]}`))
	defer m.Close()
	in := must(acc.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 2, 4))
	defer in.Close()
	out := must(m.Predict(in))
	defer out.Close()
	expectErr(t, a.Backward(out), acc.ErrInvalidArgument, "one element")
	s := must(acc.FromFloat32([]float32{1}, 1, 1))
	defer s.Close()
	expectErr(t, a.Backward(s), acc.ErrInvalidArgument, "autograd graph")
}

// scenario: dtype_roundtrip
func TestDTypeRoundTrip(t *testing.T) {
	for _, d := range acc.DTypes {
		in := make([]byte, 6*d.Size())
		for i := range in {
			if d == acc.Bool {
				in[i] = byte(i % 2)
			} else {
				in[i] = byte((i*7 + 3) % 64)
			}
		}
		x := must(acc.NewTensor(in, d, 2, 3))
		if got := must(x.DType()); got != d {
			t.Fatalf("%v: dtype %v", d, got)
		}
		if s := must(x.Shape()); len(s) != 2 || s[0] != 2 || s[1] != 3 {
			t.Fatalf("%v: shape %v", d, s)
		}
		if n := must(x.Numel()); n != 6 {
			t.Fatalf("%v: numel %d", d, n)
		}
		if n := must(x.NBytes()); n != len(in) {
			t.Fatalf("%v: nbytes %d", d, n)
		}
		if out := must(x.Bytes()); string(out) != string(in) {
			t.Fatalf("%v: round trip %v != %v", d, out, in)
		}
		x.Close()
	}
	f := must(acc.FromFloat64([]float64{2.5}, []int64{}...))
	defer f.Close()
	if v := must(f.Item()); v != 2.5 {
		t.Fatal(v)
	}
	i64 := must(acc.FromInt64([]int64{-1, 1 << 40}))
	defer i64.Close()
	if v := must(i64.Int64s()); v[0] != -1 || v[1] != 1<<40 {
		t.Fatal(v)
	}
	i32 := must(acc.FromInt32([]int32{-7, 9}))
	defer i32.Close()
	if v := must(i32.Int32s()); v[0] != -7 || v[1] != 9 {
		t.Fatal(v)
	}
	scalar := must(acc.NewTensor(make([]byte, 4), acc.Float32))
	defer scalar.Close()
	if s := must(scalar.Shape()); len(s) != 0 {
		t.Fatalf("scalar shape %v", s)
	}
}

// scenario: zero_copy
func TestZeroCopy(t *testing.T) {
	// In: the tensor views C memory the Go code filled (no copy).
	buf := acc.NewHostBuffer(4 * 4)
	mem := buf.Bytes()
	for i := range mem {
		mem[i] = 0
	}
	x := must(acc.TensorFromHostBuffer(buf, acc.Float32, 2, 2))
	defer x.Close()
	// Writing through the Go view after the handover changes the tensor: proof of no copy.
	one := must(acc.FromFloat32([]float32{1}))
	copy(mem[4:8], must(one.Bytes()))
	one.Close()
	if v := must(x.Float32s()); v[1] != 1 || v[0] != 0 {
		t.Fatalf("tensor does not view the buffer: %v", v)
	}
	// Out: a DLPack view aliases the tensor's memory, and outlives the tensor handle.
	y := must(acc.FromFloat32([]float32{1, 2, 3}))
	view := must(y.View())
	ok(t, y.Close())
	if len(view.Bytes()) != 12 {
		t.Fatalf("view of %d bytes", len(view.Bytes()))
	}
	back := must(acc.NewTensor(view.Bytes(), acc.Float32, 3))
	if v := must(back.Float32s()); v[2] != 3 {
		t.Fatal(v)
	}
	back.Close()
	ok(t, view.Close())
	ok(t, view.Close())
	// A view of a view-backed tensor writes through to the same memory.
	v2 := must(x.View())
	v2.Bytes()[0], v2.Bytes()[1], v2.Bytes()[2], v2.Bytes()[3] = 0, 0, 0x80, 0x3f // 1.0f
	if v := must(x.Float32s()); v[0] != 1 {
		t.Fatalf("export is not a view: %v", v)
	}
	v2.Close()
	_, err := acc.TensorFromHostBuffer(buf, acc.Float32, 2, 2)
	expectErr(t, err, acc.ErrInvalidArgument, "handed over")
	bad := acc.NewHostBuffer(8)
	_, err = acc.TensorFromHostBuffer(bad, acc.Float32, 3)
	expectErr(t, err, acc.ErrInvalidArgument, "nbytes")
}

// scenario: train
func TestTrain(t *testing.T) {
	a := must(acc.NewAccelerator(`{"seed": 7}`))
	defer a.Close()
	ds := regression(t, 64)
	defer ds.Close()
	dl := must(acc.NewDataLoader(ds, map[string]any{"batch_size": 16, "shuffle": true, "seed": 3}))
	defer dl.Close()
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}`))
	defer m.Close()
	o := must(acc.NewOptimizer(m, `{"type": "adam", "lr": 0.05}`))
	defer o.Close()
	s := must(acc.NewScheduler(o, `{"type": "linear", "warmup_steps": 2, "total_steps": 100}`))
	defer s.Close()
	ok(t, a.Prepare(m, o, s, dl))
	if n := must(dl.Len()); n != 4 {
		t.Fatalf("%d batches", n)
	}
	first, last, steps := -1.0, 0.0, 0
	for epoch := 0; epoch < 25; epoch++ {
		for {
			x, y, more, err := dl.Next()
			ok(t, err)
			if !more {
				break
			}
			loss := must(m.Loss(x, y))
			last = must(loss.Item())
			if first < 0 {
				first = last
			}
			ok(t, a.Backward(loss))
			ok(t, o.Step())
			ok(t, s.Step())
			ok(t, o.ZeroGrad())
			steps++
			loss.Close()
			x.Close()
			y.Close()
		}
	}
	if steps != 100 || last > first*0.05 {
		t.Fatalf("%d steps, loss %g -> %g", steps, first, last)
	}
	if lr := must(s.LastLR()); math.Abs(lr) > 1e-12 {
		t.Fatalf("lr %g after the linear decay", lr)
	}
	if lr := must(o.LR()); math.Abs(lr) > 1e-12 {
		t.Fatalf("optimizer lr %g", lr)
	}
	if n := must(m.NumParameters()); n != 2*16+16+16+1 {
		t.Fatalf("%d parameters", n)
	}
}

// scenario: gather
func TestGather(t *testing.T) {
	a := must(acc.NewAccelerator(nil))
	defer a.Close()
	x := must(acc.FromFloat32([]float32{1, 2}))
	defer x.Close()
	g := must(a.Gather(x))
	if v := must(g.Float32s()); len(v) != 2 || v[1] != 2 {
		t.Fatal(v)
	}
	g.Close()
	for _, op := range []acc.ReduceOp{acc.ReduceSum, acc.ReduceMean, acc.ReduceMax} {
		r := must(a.Reduce(x, op))
		if v := must(r.Float32s()); v[0] != 1 || v[1] != 2 {
			t.Fatal(op, v)
		}
		r.Close()
	}
	_, err := a.Reduce(x, acc.ReduceOp(9))
	expectErr(t, err, acc.ErrInvalidArgument, "op 9")
	ok(t, a.WaitForEveryone())
	// gather_for_metrics over a prepared loader sees every sample once, in order.
	vals := make([]float32, 37)
	for i := range vals {
		vals[i] = float32(i)
	}
	all := must(acc.FromFloat32(vals))
	defer all.Close()
	ds := must(acc.DatasetFromTensors(all, nil))
	defer ds.Close()
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 8}`))
	defer dl.Close()
	ok(t, a.Prepare(nil, nil, nil, dl))
	seen := 0
	for {
		b, y, more, err := dl.Next()
		ok(t, err)
		if !more {
			break
		}
		if y != nil {
			t.Fatal("targets from a dataset without targets")
		}
		gb := must(a.GatherForMetrics(b))
		for _, v := range must(gb.Float32s()) {
			if v != float32(seen) {
				t.Fatalf("sample %v at position %d", v, seen)
			}
			seen++
		}
		gb.Close()
		b.Close()
	}
	if seen != 37 {
		t.Fatalf("saw %d samples", seen)
	}
	// Objects: byte strings the caller serializes.
	objs := must(a.GatherObject([][]byte{[]byte(`{"id": 1}`), {}, []byte("x")}))
	if len(objs) != 3 || string(objs[0]) != `{"id": 1}` || len(objs[1]) != 0 || string(objs[2]) != "x" {
		t.Fatalf("gather_object: %q", objs)
	}
	if none := must(a.GatherObject(nil)); len(none) != 0 {
		t.Fatalf("gather_object of nothing: %q", none)
	}
}

// Gradient accumulation: with 2 steps, every second micro-step synchronizes and steps the optimizer.
func TestAccumulate(t *testing.T) {
	a := must(acc.NewAccelerator(`{"seed": 5, "gradient_accumulation_steps": 2}`))
	defer a.Close()
	ok(t, a.SetSeed(5, false, false))
	x := must(acc.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 4, 2))
	defer x.Close()
	y := must(acc.FromFloat32([]float32{1, 2, 3, 4}, 4, 1))
	defer y.Close()
	ds := must(acc.DatasetFromTensors(x, y))
	defer ds.Close()
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 1}`))
	defer dl.Close()
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`))
	defer m.Close()
	o := must(acc.NewOptimizer(m, `{"type": "sgd", "lr": 0.1}`))
	defer o.Close()
	ok(t, a.Prepare(m, o, nil, dl))
	weights := func() string {
		sd := must(m.StateDict())
		defer func() {
			for _, e := range sd {
				e.Tensor.Close()
			}
		}()
		return string(must(sd[0].Tensor.Bytes()))
	}
	var syncs []bool
	var changed []bool
	for {
		bx, by, more, err := dl.Next()
		ok(t, err)
		if !more {
			break
		}
		before := weights()
		ok(t, a.Accumulate(m, func() error {
			syncs = append(syncs, must(a.SyncGradients()))
			loss := must(m.Loss(bx, by))
			defer loss.Close()
			if err := a.Backward(loss); err != nil {
				return err
			}
			if norm := must(a.ClipGradNorm(m, 100, 2)); norm <= 0 {
				return fmt.Errorf("gradient norm %g", norm)
			}
			if err := o.Step(); err != nil {
				return err
			}
			return o.ZeroGrad()
		}))
		changed = append(changed, weights() != before)
		if must(o.StepWasSkipped()) {
			t.Fatal("a step was skipped without fp16")
		}
		bx.Close()
		by.Close()
	}
	if fmt.Sprint(syncs) != "[false true false true]" || fmt.Sprint(changed) != "[false true false true]" {
		t.Fatalf("sync %v, weights changed %v", syncs, changed)
	}
	// The scope closes even when the step fails, and the step's error comes back.
	err := a.Accumulate(m, func() error { return errors.New("step failed") })
	if err == nil || !strings.Contains(err.Error(), "step failed") {
		t.Fatal(err)
	}
	b := must(a.Broadcast(y, 0))
	if v := must(b.Float32s()); v[3] != 4 {
		t.Fatal(v)
	}
	b.Close()
	ok(t, a.ClipGradValue(m, 1))
}

// Resuming mid-epoch: a loader that skips the first batches yields the rest of the same pass.
func TestSkipFirstBatches(t *testing.T) {
	vals := make([]float32, 10)
	for i := range vals {
		vals[i] = float32(i)
	}
	all := must(acc.FromFloat32(vals))
	defer all.Close()
	ds := must(acc.DatasetFromTensors(all, nil))
	defer ds.Close()
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 2}`))
	defer dl.Close()
	skip := must(dl.SkipFirstBatches(3))
	defer skip.Close()
	var got []float32
	for {
		b, _, more, err := skip.Next()
		ok(t, err)
		if !more {
			break
		}
		got = append(got, must(b.Float32s())...)
		b.Close()
	}
	if len(got) != 4 || got[0] != 6 || got[3] != 9 {
		t.Fatalf("after skipping 3 batches: %v", got)
	}
	if e := must(dl.Epoch()); e != 0 {
		t.Fatalf("epoch %d", e)
	}
}

type setup struct {
	a  *acc.Accelerator
	m  *acc.Model
	o  *acc.Optimizer
	s  *acc.Scheduler
	ds *acc.Dataset
	dl *acc.DataLoader
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// scenario: destroy_orders
func TestDestroyOrders(t *testing.T) {
	x := must(acc.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 4, 2))
	defer x.Close()
	y := must(acc.FromFloat32([]float32{1, 2, 3, 4}, 4, 1))
	defer y.Close()
	orders := permutations(6)
	if len(orders) != 720 {
		t.Fatal(len(orders))
	}
	for _, order := range orders {
		var st setup
		st.a = must(acc.NewAccelerator(nil))
		st.m = must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`))
		st.o = must(acc.NewOptimizer(st.m, `{"type": "sgd", "lr": 0.1}`))
		st.s = must(acc.NewScheduler(st.o, `{"type": "constant"}`))
		st.ds = must(acc.DatasetFromTensors(x, y))
		st.dl = must(acc.NewDataLoader(st.ds, `{"batch_size": 2}`))
		ok(t, st.a.Prepare(st.m, st.o, st.s, st.dl))
		closed := map[int]bool{}
		for _, h := range order {
			switch h {
			case 0:
				st.a.Close()
			case 1:
				st.m.Close()
			case 2:
				st.o.Close()
			case 3:
				st.s.Close()
			case 4:
				st.ds.Close()
			case 5:
				st.dl.Close()
			}
			closed[h] = true
			// Everything still open keeps working.
			if !closed[5] {
				bx, by, _, err := st.dl.Next()
				ok(t, err)
				bx.Close()
				by.Close()
			}
			if !closed[1] {
				_ = must(st.m.NumParameters())
			}
			if !closed[2] {
				ok(t, st.o.Step())
			}
			if !closed[3] {
				ok(t, st.s.Step())
			}
			if !closed[4] {
				_ = must(st.ds.Len())
			}
			if !closed[0] {
				_ = must(st.a.NumProcesses())
			}
		}
	}
}

// scenario: safetensors
func TestSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mlp.safetensors")
	spec := `{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}`
	m := must(acc.NewModel(spec))
	defer m.Close()
	ok(t, m.SaveSafetensors(path))
	c := must(acc.NewModel(spec))
	defer c.Close()
	ok(t, c.LoadSafetensors(path))
	a, b := must(m.StateDict()), must(c.StateDict())
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("%d, %d state tensors", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(must(a[i].Tensor.Bytes())) != string(must(b[i].Tensor.Bytes())) {
			t.Fatalf("state %s differs", a[i].Name)
		}
		a[i].Tensor.Close()
		b[i].Tensor.Close()
	}
	other := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`))
	defer other.Close()
	expectErr(t, other.LoadSafetensors(path), acc.ErrInvalidArgument, "shape")
	expectErr(t, other.LoadSafetensors("/nonexistent.safetensors"), acc.ErrIO, "cannot open")
	_, err := acc.DatasetFromTokenFile("/nonexistent/train.bin", `{"block_size": 8}`)
	expectErr(t, err, acc.ErrIO, "/nonexistent/train.bin")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// scenario: save_model
func TestSaveModel(t *testing.T) {
	dir := t.TempDir()
	spec := `{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}`
	m := must(acc.NewModel(spec))
	defer m.Close()
	ok(t, m.SaveModel(dir, ""))
	c := must(acc.NewModel(spec))
	defer c.Close()
	ok(t, c.LoadSafetensors(filepath.Join(dir, "model.safetensors")))
	a, b := must(m.StateDict()), must(c.StateDict())
	for i := range a {
		if a[i].Name != b[i].Name || string(must(a[i].Tensor.Bytes())) != string(must(b[i].Tensor.Bytes())) {
			t.Fatalf("state %s differs", a[i].Name)
		}
		a[i].Tensor.Close()
		b[i].Tensor.Close()
	}
	ok(t, m.SaveModel(dir, "100"))
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json")); err != nil {
		t.Fatal(err)
	}
	if shards, _ := filepath.Glob(filepath.Join(dir, "model-00001-of-*.safetensors")); len(shards) != 1 {
		t.Fatalf("shards: %v", shards)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); !os.IsNotExist(err) {
		t.Fatalf("model.safetensors is still there: %v", err)
	}
	expectErr(t, m.SaveModel(dir, "10XB"), acc.ErrInvalidArgument, "10XB")
}

// scenario: callback_dataset
func TestCallbackDataset(t *testing.T) {
	calls := 0
	ds := must(acc.DatasetFromFunc(8, func(i int64) (*acc.Tensor, *acc.Tensor, error) {
		calls++
		if i == 5 {
			return nil, nil, fmt.Errorf("no sample %d", i)
		}
		x, err := acc.FromFloat32([]float32{float32(i), float32(i)})
		if err != nil {
			return nil, nil, err
		}
		y, err := acc.FromFloat32([]float32{float32(2 * i)}, []int64{}...)
		return x, y, err
	}))
	if n := must(ds.Len()); n != 8 {
		t.Fatal(n)
	}
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 4}`))
	ds.Close() // the loader keeps it
	x, y, more, err := dl.Next()
	ok(t, err)
	if !more {
		t.Fatal("no batch")
	}
	xs, ys := must(x.Float32s()), must(y.Float32s())
	if xs[6] != 3 || ys[3] != 6 {
		t.Fatal(xs, ys)
	}
	x.Close()
	y.Close()
	_, _, _, err = dl.Next()
	expectErr(t, err, acc.ErrCallback, "index 5")
	if errors.Unwrap(err) == nil || !strings.Contains(errors.Unwrap(err).Error(), "no sample 5") {
		t.Fatalf("the callback's error is not wrapped: %v", err)
	}
	dl.Close()
	// A panic in the callback becomes an error, not a crash.
	pds := must(acc.DatasetFromFunc(2, func(i int64) (*acc.Tensor, *acc.Tensor, error) { panic("boom") }))
	pdl := must(acc.NewDataLoader(pds, nil))
	_, _, _, err = pdl.Next()
	expectErr(t, err, acc.ErrCallback, "")
	if !strings.Contains(errors.Unwrap(err).Error(), "boom") {
		t.Fatal(err)
	}
	pdl.Close()
	pds.Close()
	_, err = acc.DatasetFromFunc(-1, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "length")
	_ = calls
}

const gptSpec = `{"type": "gpt", "vocab_size": 7, "block_size": 3, "n_layer": 1, "n_head": 1, "n_embd": 8}`

// checkGPTOutputs checks a ForwardBatch result: "loss" finite and > 0, "logits" [rows, 3, 7].
func checkGPTOutputs(t *testing.T, out *acc.Batch, rows int64) *acc.Tensor {
	t.Helper()
	loss := must(out.Get("loss"))
	if l := must(loss.Item()); math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 {
		t.Fatalf("loss %v", l)
	}
	logits := must(out.Get("logits"))
	defer logits.Close()
	if s := must(logits.Shape()); len(s) != 3 || s[0] != rows || s[1] != 3 || s[2] != 7 {
		t.Fatalf("logits shape %v", s)
	}
	return loss
}

// scenario: named_batch
func TestNamedBatch(t *testing.T) {
	// The handle: insertion order, replacement in place, shared data.
	ids := must(acc.FromInt64([]int64{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4}, 4, 3))
	defer ids.Close()
	mask := must(acc.FromInt64([]int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 4, 3))
	defer mask.Close()
	b := must(acc.NewBatch())
	if n := must(b.Len()); n != 0 {
		t.Fatal(n)
	}
	ok(t, b.Set("input_ids", mask))
	ok(t, b.Set("labels", ids))
	ok(t, b.Set("input_ids", ids)) // replaced in its place
	if n := must(b.Len()); n != 2 {
		t.Fatal(n)
	}
	if names := must(b.Names()); strings.Join(names, ",") != "input_ids,labels" {
		t.Fatal(names)
	}
	if !must(b.Contains("labels")) || must(b.Contains("attention_mask")) {
		t.Fatal("contains")
	}
	got := must(b.Get("input_ids"))
	if v := must(got.Int64s()); v[4] != 4 {
		t.Fatal(v)
	}
	got.Close()
	entries := must(b.Tensors())
	if len(entries) != 2 || entries[1].Name != "labels" || must(entries[1].Tensor.Numel()) != 12 {
		t.Fatal(entries)
	}
	for _, e := range entries {
		e.Tensor.Close()
	}
	_, err := b.Get("attention_mask")
	expectErr(t, err, acc.ErrInvalidArgument, "attention_mask")
	expectErr(t, err, acc.ErrInvalidArgument, "input_ids, labels")
	expectErr(t, b.Set("", ids), acc.ErrInvalidArgument, "empty")

	// A dataset of named columns (copied: the batch may go), a loader, NextBatch.
	ds := must(acc.DatasetFromBatch(b))
	defer ds.Close()
	b.Close()
	b.Close() // idempotent
	expectErr(t, b.Set("x", ids), acc.ErrInvalidArgument, "batch is NULL")
	if n := must(ds.Len()); n != 4 {
		t.Fatal(n)
	}
	a := must(acc.NewAccelerator(`{"seed": 5}`))
	defer a.Close()
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 2}`))
	defer dl.Close()
	m := must(acc.NewModel(gptSpec))
	defer m.Close()
	o := must(acc.NewOptimizer(m, `{"type": "adamw", "lr": 0.01}`))
	defer o.Close()
	ok(t, a.Prepare(m, o, nil, dl))
	batches := 0
	for {
		batch, err := dl.NextBatch()
		ok(t, err)
		if batch == nil {
			break // end of the epoch
		}
		if names := must(batch.Names()); strings.Join(names, ",") != "input_ids,labels" {
			t.Fatal(names)
		}
		// ForwardBatch with Hugging Face's "labels": the loss is ready for Backward.
		out := must(m.ForwardBatch(batch))
		loss := checkGPTOutputs(t, out, 2)
		ok(t, a.Backward(loss))
		ok(t, o.Step())
		ok(t, o.ZeroGrad())
		loss.Close()
		out.Close()
		batch.Close()
		batches++
	}
	if batches != 2 {
		t.Fatal(batches)
	}
	// A name the model does not take is refused by name.
	extra := must(acc.NewBatch(acc.NamedTensor{Name: "input_ids", Tensor: ids}, acc.NamedTensor{Name: "token_type_ids", Tensor: ids}))
	defer extra.Close()
	_, err = m.ForwardBatch(extra)
	expectErr(t, err, acc.ErrInvalidArgument, "token_type_ids")
	_, err = m.ForwardBatch(nil)
	expectErr(t, err, acc.ErrInvalidArgument, "batch is NULL")
	// The (x, y) path still reads a named batch of two tensors.
	x, y, more, err := dl.Next()
	ok(t, err)
	if !more || x == nil || y == nil {
		t.Fatal("no (input, target) batch")
	}
	x.Close()
	y.Close()
}

// scenario: named_callback_dataset
func TestNamedCallbackDataset(t *testing.T) {
	// Sample i: {"input_ids": [i, i+1, i+2] mod 7, "labels": the same}; sample 5 fails.
	ds := must(acc.DatasetFromBatchFunc(6, func(i int64) (*acc.Batch, error) {
		if i == 5 {
			return nil, fmt.Errorf("no sample %d", i)
		}
		ids, err := acc.FromInt64([]int64{i % 7, (i + 1) % 7, (i + 2) % 7})
		if err != nil {
			return nil, err
		}
		defer ids.Close()
		return acc.NewBatch(acc.NamedTensor{Name: "input_ids", Tensor: ids}, acc.NamedTensor{Name: "labels", Tensor: ids})
	}))
	if n := must(ds.Len()); n != 6 {
		t.Fatal(n)
	}
	dl := must(acc.NewDataLoader(ds, `{"batch_size": 2}`))
	ds.Close() // the loader keeps it
	m := must(acc.NewModel(gptSpec))
	defer m.Close()
	b := must(dl.NextBatch())
	if b == nil {
		t.Fatal("no batch")
	}
	labels := must(b.Get("labels"))
	if v := must(labels.Int64s()); fmt.Sprint(v) != "[0 1 2 1 2 3]" {
		t.Fatal(v)
	}
	labels.Close()
	out := must(m.ForwardBatch(b))
	checkGPTOutputs(t, out, 2).Close()
	out.Close()
	b.Close()
	must(dl.NextBatch()).Close()
	_, err := dl.NextBatch()
	expectErr(t, err, acc.ErrCallback, "index 5")
	if errors.Unwrap(err) == nil || !strings.Contains(errors.Unwrap(err).Error(), "no sample 5") {
		t.Fatalf("the callback's error is not wrapped: %v", err)
	}
	dl.Close()
	// An empty sample is refused; a panic becomes an error, not a crash.
	eds := must(acc.DatasetFromBatchFunc(1, func(int64) (*acc.Batch, error) { return acc.NewBatch() }))
	edl := must(acc.NewDataLoader(eds, nil))
	_, err = edl.NextBatch()
	expectErr(t, err, acc.ErrCallback, "no tensor for index 0")
	edl.Close()
	eds.Close()
	pds := must(acc.DatasetFromBatchFunc(2, func(int64) (*acc.Batch, error) { panic("boom") }))
	pdl := must(acc.NewDataLoader(pds, nil))
	_, err = pdl.NextBatch()
	expectErr(t, err, acc.ErrCallback, "")
	if !strings.Contains(errors.Unwrap(err).Error(), "boom") {
		t.Fatal(err)
	}
	pdl.Close()
	pds.Close()
}

// The safety net: handles that are never closed are released by the garbage collector.
func TestCleanupSafetyNet(t *testing.T) {
	var mu sync.Mutex
	kinds := map[string]int{}
	acc.OnLeak = func(kind string) {
		mu.Lock()
		kinds[kind]++
		mu.Unlock()
	}
	defer func() { acc.OnLeak = nil }()
	func() {
		for i := 0; i < 10; i++ {
			_, _ = acc.FromFloat32([]float32{1, 2, 3})
			_, _ = acc.NewModel(`{"type": "mlp", "sizes": [2, 1]}`)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		runtime.GC()
		mu.Lock()
		done := kinds["Tensor"] >= 10 && kinds["Model"] >= 10
		mu.Unlock()
		if done {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("cleanups ran for %v", kinds)
}

// scenario: trackers
func TestTrackers(t *testing.T) {
	_, err := acc.NewAccelerator(`{"log_with": ["comet_ml"]}`)
	expectErr(t, err, acc.ErrUnsupported, "comet_ml")
	dir := t.TempDir()
	a := must(acc.NewAccelerator(map[string]any{"log_with": []string{"jsonl", "csv"}, "project_dir": dir}))
	defer a.Close()
	expectErr(t, a.LogScalars([]acc.Scalar{{Name: "loss", Value: 1}}, 0), acc.ErrInvalidState, "init_trackers")
	ok(t, a.InitTrackers("go", `{"lr": 0.5, "opt": {"name": "sgd"}}`, nil))
	ok(t, a.LogScalars([]acc.Scalar{{Name: "loss", Value: 0.5}, {Name: "lr", Value: 0.25}}, 1))
	ok(t, a.LogScalars([]acc.Scalar{{Name: "loss", Value: math.NaN()}}, acc.NoStep))
	ok(t, a.Log(map[string]any{"note": "done", "acc": map[string]float64{"train": 1}}, 2))
	expectErr(t, a.Log("[1]", 3), acc.ErrInvalidArgument, "JSON object")
	ok(t, a.EndTraining())
	run := filepath.Join(dir, "go")
	text, err := os.ReadFile(filepath.Join(run, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"step": 1`) ||
		!strings.Contains(lines[0], `"values": {"loss": 0.5, "lr": 0.25}`) || !strings.Contains(lines[1], "NaN") {
		t.Fatalf("metrics.jsonl: %q", lines)
	}
	hp, err := os.ReadFile(filepath.Join(run, "hparams.json"))
	if err != nil || string(hp) != "{\"lr\": 0.5, \"opt.name\": \"sgd\"}\n" {
		t.Fatalf("hparams.json: %q, %v", hp, err)
	}
	csvText, err := os.ReadFile(filepath.Join(run, "metrics.csv"))
	if err != nil || !strings.HasPrefix(string(csvText), "step,time,loss,lr,") {
		t.Fatalf("metrics.csv: %q, %v", csvText, err)
	}
}

// checkpointed is the checkpoint scenario's setup: an accelerator with an MLP and AdamW prepared and a
// counter registered for checkpointing (saved as 8 little-endian bytes).
func checkpointed(t *testing.T, config any) (*acc.Accelerator, *acc.Model, *acc.Optimizer, *uint64) {
	t.Helper()
	a := must(acc.NewAccelerator(config))
	t.Cleanup(func() { a.Close() })
	m := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 8, 1]}`))
	t.Cleanup(func() { m.Close() })
	o := must(acc.NewOptimizer(m, `{"type": "adamw", "lr": 0.01}`))
	t.Cleanup(func() { o.Close() })
	ok(t, a.Prepare(m, o, nil, nil))
	counter := new(uint64)
	ok(t, a.RegisterForCheckpointing(
		func() ([]byte, error) { return binary.LittleEndian.AppendUint64(nil, *counter), nil },
		func(data []byte) error {
			if len(data) != 8 {
				return fmt.Errorf("%d bytes", len(data))
			}
			*counter = binary.LittleEndian.Uint64(data)
			return nil
		}))
	return a, m, o, counter
}

// checkpointStep is one AdamW step on fixed data.
func checkpointStep(t *testing.T, a *acc.Accelerator, m *acc.Model, o *acc.Optimizer) {
	t.Helper()
	x := must(acc.FromFloat32([]float32{0.5, -1, 1.5, 2, -0.25, 0.75, 1, 0}, 4, 2))
	defer x.Close()
	y := must(acc.FromFloat32([]float32{1, -1, 0.5, 2}, 4, 1))
	defer y.Close()
	loss := must(m.Loss(x, y))
	defer loss.Close()
	ok(t, a.Backward(loss))
	ok(t, o.Step())
	ok(t, o.ZeroGrad())
}

func firstParameter(m *acc.Model) string {
	sd := must(m.StateDict())
	defer func() {
		for _, nt := range sd {
			nt.Tensor.Close()
		}
	}()
	return string(must(sd[0].Tensor.Bytes()))
}

// scenario: checkpoint
func TestCheckpoint(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "step_3")
	a, m, o, counter := checkpointed(t, `{"seed": 11}`)
	for i := 0; i < 3; i++ {
		checkpointStep(t, a, m, o)
		*counter++
	}
	ok(t, a.SaveState(dir))
	for _, f := range []string{"manifest.json", "custom_checkpoint_0.bin", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}

	b, m2, o2, counter2 := checkpointed(t, `{"seed": 12}`)
	if firstParameter(m2) == firstParameter(m) {
		t.Fatal("the second model starts equal to the trained one")
	}
	ok(t, b.LoadState(dir))
	if firstParameter(m2) != firstParameter(m) || *counter2 != 3 {
		t.Fatalf("not restored: counter %d", *counter2)
	}
	// The optimizer's moments came back too: one more step agrees bit for bit.
	checkpointStep(t, a, m, o)
	checkpointStep(t, b, m2, o2)
	if firstParameter(m2) != firstParameter(m) {
		t.Fatal("the optimizer state was not restored")
	}

	// A missing directory is refused naming it; a directory without a checkpoint, naming its manifest.
	missing := filepath.Join(root, "missing")
	expectErr(t, b.LoadState(missing), acc.ErrIO, missing)
	ok(t, os.Mkdir(filepath.Join(root, "empty"), 0o755))
	expectErr(t, b.LoadState(filepath.Join(root, "empty")), acc.ErrIO, "manifest.json")
	// Automatic naming ("") needs a project configuration.
	expectErr(t, b.SaveState(""), acc.ErrInvalidArgument, "automatic_checkpoint_naming")
	expectErr(t, b.LoadState(""), acc.ErrInvalidArgument, "project_dir")

	// A failing save function fails SaveState with ErrCallback wrapping its error; a panic too.
	fail := must(acc.NewAccelerator(nil))
	defer fail.Close()
	full := errors.New("disk of the counter is full")
	ok(t, fail.RegisterForCheckpointing(func() ([]byte, error) { return nil, full }, func([]byte) error { return nil }))
	err := fail.SaveState(filepath.Join(root, "failed"))
	expectErr(t, err, acc.ErrCallback, "save callback")
	if !errors.Is(err, full) {
		t.Fatalf("the save function's error is not wrapped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "failed", "manifest.json")); err == nil {
		t.Fatal("a failed save left a checkpoint")
	}
	boom := must(acc.NewAccelerator(nil))
	defer boom.Close()
	ok(t, boom.RegisterForCheckpointing(func() ([]byte, error) { panic("boom") }, func([]byte) error { return nil }))
	err = boom.SaveState(filepath.Join(root, "boom"))
	expectErr(t, err, acc.ErrCallback, "")
	if errors.Unwrap(err) == nil || !strings.Contains(errors.Unwrap(err).Error(), "boom") {
		t.Fatalf("the panic is not wrapped: %v", err)
	}
	// A failing load function: ErrCallback wrapping its error.
	picky, _, _, _ := checkpointed(t, nil)
	wrong := errors.New("wrong version")
	ok(t, picky.RegisterForCheckpointing(func() ([]byte, error) { return nil, nil }, func([]byte) error { return wrong }))
	ok(t, picky.SaveState(filepath.Join(root, "two_objects")))
	err = picky.LoadState(filepath.Join(root, "two_objects"))
	expectErr(t, err, acc.ErrCallback, "load callback")
	if !errors.Is(err, wrong) {
		t.Fatalf("the load function's error is not wrapped: %v", err)
	}
	expectErr(t, fail.RegisterForCheckpointing(nil, nil), acc.ErrInvalidArgument, "nil")
	closed := must(acc.NewAccelerator(nil))
	closed.Close()
	expectErr(t, closed.RegisterForCheckpointing(func() ([]byte, error) { return nil, nil }, func([]byte) error { return nil }),
		acc.ErrInvalidArgument, "NULL")
	expectErr(t, closed.SaveState(dir), acc.ErrInvalidArgument, "NULL")

	// Automatic naming (ProjectConfiguration): SaveState("") / LoadState("").
	config := map[string]any{"seed": 11, "project_config": map[string]any{
		"automatic_checkpoint_naming": true, "project_dir": filepath.Join(root, "project")}}
	c, m4, _, counter4 := checkpointed(t, config)
	*counter4 = 7
	ok(t, c.SaveState(""))
	if _, err := os.Stat(filepath.Join(root, "project", "checkpoints", "checkpoint_0", "manifest.json")); err != nil {
		t.Fatal(err)
	}
	d, m5, o5, counter5 := checkpointed(t, config)
	checkpointStep(t, d, m5, o5)
	ok(t, d.LoadState(""))
	if *counter5 != 7 || firstParameter(m5) != firstParameter(m4) {
		t.Fatalf("automatic naming: counter %d", *counter5)
	}

	// "resume_from_checkpoint": "latest": nothing before the first save (a fresh start), then the
	// newest checkpoint, into a second accelerator with the same config.
	resume := map[string]any{"seed": 13, "project_config": map[string]any{
		"project_dir": filepath.Join(root, "resume"), "automatic_checkpoint_naming": true},
		"resume_from_checkpoint": "latest"}
	e, m6, o6, counter6 := checkpointed(t, resume)
	if resumed := must(e.ResumeFromCheckpoint()); resumed {
		t.Fatal("resumed without a checkpoint")
	}
	checkpointStep(t, e, m6, o6)
	*counter6 = 5
	ok(t, e.SaveState(""))
	f, m7, _, counter7 := checkpointed(t, resume)
	if firstParameter(m7) == firstParameter(m6) {
		t.Fatal("the second model starts equal to the saved one")
	}
	if resumed := must(f.ResumeFromCheckpoint()); !resumed {
		t.Fatal("did not resume from the saved checkpoint")
	}
	if *counter7 != 5 || firstParameter(m7) != firstParameter(m6) {
		t.Fatalf("resume: counter %d", *counter7)
	}
}

// hfFixture is a Hugging Face fixture model directory of tests/hf (made by transformers); go test runs
// in the package directory.
func hfFixture(t *testing.T, name string) string {
	t.Helper()
	return must(filepath.Abs(filepath.Join("..", "..", "..", "tests", "hf", "fixtures", name, "model")))
}

// scenario: hf_generate
func TestHFGenerate(t *testing.T) {
	_, err := acc.ModelFromPretrained(hfFixture(t, "no-such-model"), nil)
	expectErr(t, err, acc.ErrIO, "no-such-model")
	m := must(acc.ModelFromPretrained(hfFixture(t, "llama"), `{"dtype": "float32"}`))
	defer m.Close()
	prompt := []int64{3, 17, 42, 8, 64}
	x := must(acc.FromInt64(prompt, 1, 5))
	defer x.Close()
	greedy := map[string]any{"max_new_tokens": 6}

	// Greedy, streaming every step to the callback.
	var seen [][]int64
	out := must(m.Generate(x, nil, greedy, func(tokens []int64) bool {
		seen = append(seen, tokens)
		return true
	}))
	defer out.Close()
	if s := must(out.Shape()); len(s) != 2 || s[0] != 1 || s[1] != 11 {
		t.Fatalf("shape %v", s)
	}
	seq := must(out.Int64s())
	for i, v := range prompt {
		if seq[i] != v {
			t.Fatalf("the output does not start with the prompt: %v", seq)
		}
	}
	if len(seen) != 6 || len(seen[5]) != 1 || seen[5][0] != seq[10] {
		t.Fatalf("callback saw %v, output %v", seen, seq)
	}
	// Without a callback (and with an all-ones mask): the same tokens.
	mask := must(acc.FromInt64([]int64{1, 1, 1, 1, 1}, 1, 5))
	defer mask.Close()
	same := must(m.Generate(x, mask, `{"max_new_tokens": 6}`, nil))
	if fmt.Sprint(must(same.Int64s())) != fmt.Sprint(seq) {
		t.Fatalf("%v != %v", must(same.Int64s()), seq)
	}
	same.Close()

	// The callback stops it after 2 steps.
	calls := 0
	stopped := must(m.Generate(x, nil, greedy, func([]int64) bool {
		calls++
		return calls < 2
	}))
	if s := must(stopped.Shape()); calls != 2 || s[1] != 7 {
		t.Fatalf("calls %d, shape %v", calls, s)
	}
	stopped.Close()

	// A panic stops generating and becomes ErrCallback wrapping it, not a crash.
	_, err = m.Generate(x, nil, greedy, func([]int64) bool { panic("boom") })
	expectErr(t, err, acc.ErrCallback, "panicked")
	if errors.Unwrap(err) == nil || !strings.Contains(errors.Unwrap(err).Error(), "boom") {
		t.Fatalf("the panic is not wrapped: %v", err)
	}

	// Bad options name the key; a nil model is refused.
	_, err = m.Generate(x, nil, `{"top_p": 2}`, nil)
	expectErr(t, err, acc.ErrInvalidConfig, "top_p")
	var none *acc.Model
	_, err = none.Generate(x, nil, nil, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "model is NULL")
}

// scenario: hf_save
func TestHFSave(t *testing.T) {
	config := `{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16,
		"intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}`
	m := must(acc.ModelFromConfig(config, nil))
	defer m.Close()
	dir := t.TempDir()
	ok(t, m.SavePretrained(dir, ""))
	for _, f := range []string{"config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	loaded := must(acc.ModelFromPretrained(dir, nil))
	defer loaded.Close()
	x := must(acc.FromInt64([]int64{1, 2, 3}, 1, 3))
	defer x.Close()
	greedy := map[string]any{"max_new_tokens": 5}
	a, b := must(m.Generate(x, nil, greedy, nil)), must(loaded.Generate(x, nil, greedy, nil))
	defer a.Close()
	defer b.Close()
	as, bs := must(a.Int64s()), must(b.Int64s())
	if len(as) != 8 || fmt.Sprint(as) != fmt.Sprint(bs) {
		t.Fatalf("generated %v, loaded back %v", as, bs)
	}

	_, err := acc.ModelFromConfig(`{"architectures": ["T5Model"]}`, nil)
	expectErr(t, err, acc.ErrUnsupported, "T5Model")
}

// scenario: bigmodel
func TestBigModel(t *testing.T) {
	config := `{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
		"intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
		"max_position_embeddings": 4096, "tie_word_embeddings": false}`
	m := must(acc.ModelFromConfig(config, map[string]any{"device": "meta", "dtype": "float16"}))
	defer m.Close()
	n := must(m.NumParameters())
	if n != 6738415616 {
		t.Fatalf("num_parameters %d", n)
	}
	// The weights and, as Accelerate counts them, rotary_emb's inv_freq and original_inv_freq (64 float32 each).
	if sizes := must(m.ModuleSizes("")); sizes[""] != 2*n+512 || len(sizes) < 32 {
		t.Fatalf("module sizes: whole model %d of %d entries", sizes[""], len(sizes))
	}
	if sizes := must(m.ModuleSizes("float32")); sizes[""] != 2*n+512 { // as Accelerate: never wider than its own
		t.Fatalf("module sizes in float32: %d", sizes[""])
	}

	devices := must(m.InferAutoDeviceMap(map[string]any{
		"device_map": "sequential",
		"max_memory": map[string]any{"0": "5GiB", "1": "5GiB", "cpu": "64GB"},
	}))
	for name, want := range map[string]any{"model.embed_tokens": 0, "model.layers.20": 1, "lm_head": "cpu"} {
		if got, found := devices[name]; !found || got != want {
			t.Fatalf("%s on %#v, want %#v (map %v)", name, got, want, devices)
		}
	}
	_, err := m.InferAutoDeviceMap(`{"max_memory": {"npu0": "1GB"}}`)
	expectErr(t, err, acc.ErrInvalidConfig, "npu0")
	_, err = m.ModuleSizes("int8")
	expectErr(t, err, acc.ErrInvalidConfig, "int8")

	// Gradients off on this thread: a forward records no graph, so its loss cannot be backpropagated.
	runtime.LockOSThread() // the setting is thread-local
	defer runtime.UnlockOSThread()
	defer acc.SetGradEnabled(true) //nolint:errcheck // the thread goes back to the pool with gradients on
	a := must(acc.NewAccelerator(nil))
	defer a.Close()
	small := must(acc.NewModel(`{"type": "mlp", "sizes": [2, 1], "loss": "mse"}`))
	defer small.Close()
	x := must(acc.FromFloat32([]float32{1, 2}, 1, 2))
	defer x.Close()
	y := must(acc.FromFloat32([]float32{3}, 1, 1))
	defer y.Close()
	if previous := must(acc.SetGradEnabled(false)); !previous {
		t.Fatal("gradients were off before")
	}
	loss := must(small.Loss(x, y))
	expectErr(t, a.Backward(loss), acc.ErrInvalidArgument, "grad")
	loss.Close()
	if previous := must(acc.SetGradEnabled(true)); previous {
		t.Fatal("SetGradEnabled(false) did not stick")
	}
	loss = must(small.Loss(x, y))
	ok(t, a.Backward(loss))
	loss.Close()
	err = acc.NoGrad(func() error {
		loss := must(small.Loss(x, y))
		defer loss.Close()
		return a.Backward(loss)
	})
	expectErr(t, err, acc.ErrInvalidArgument, "grad")
	if previous := must(acc.SetGradEnabled(true)); !previous {
		t.Fatal("NoGrad did not restore the setting")
	}
}

// params copies a model's parameters by name.
func params(t *testing.T, m *acc.Model) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, e := range must(m.StateDict()) {
		out[e.Name] = must(e.Tensor.Float32s())
		e.Tensor.Close()
	}
	return out
}

// maxDiff is max |a[i] * scale - b[i]|.
func maxDiff(a []float32, scale float64, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])*scale-float64(b[i])))
	}
	return d
}

// sgdStep runs one forward, backward and step of a prepared MLP on a fixed batch.
func sgdStep(t *testing.T, a *acc.Accelerator, m *acc.Model, o *acc.Optimizer) {
	t.Helper()
	x := must(acc.FromFloat32([]float32{1, 2, 3, 4, -1, 0.5, 2, -2}, 4, 2))
	y := must(acc.FromFloat32([]float32{1, -1, 0.5, 2}, 4, 1))
	loss := must(m.Loss(x, y))
	ok(t, a.Backward(loss))
	ok(t, o.Step())
	ok(t, o.ZeroGrad())
	loss.Close()
	x.Close()
	y.Close()
}

const mlp281 = `{"type": "mlp", "sizes": [2, 8, 1], "activation": "tanh", "loss": "mse"}`

// scenario: freeze
func TestFreeze(t *testing.T) {
	a := must(acc.NewAccelerator(`{"seed": 3}`))
	defer a.Close()
	m := must(acc.NewModel(mlp281))
	defer m.Close()
	if n := must(m.SetRequiresGrad(`layers\.0\..*`, false)); n != 2 {
		t.Fatalf("%d parameters frozen, want 2", n)
	}
	_, err := m.SetRequiresGrad("nothing", false)
	expectErr(t, err, acc.ErrInvalidArgument, "nothing")
	_, err = acc.NewOptimizer(m, map[string]any{"type": "sgd", "param_groups": []any{map[string]any{"params": `layers\.0\..*`}}})
	expectErr(t, err, acc.ErrInvalidConfig, "selects no trainable parameter")
	o := must(acc.NewOptimizer(m, `{"type": "sgd", "lr": 0.1}`))
	defer o.Close()
	ok(t, a.Prepare(m, o, nil, nil))
	before := params(t, m)
	sgdStep(t, a, m, o)
	after := params(t, m)
	for name, v := range before {
		moved := maxDiff(v, 1, after[name])
		if frozen := strings.HasPrefix(name, "layers.0."); frozen != (moved == 0) {
			t.Fatalf("%s moved by %g (frozen: %v)", name, moved, frozen)
		}
	}
	_, err = m.SetRequiresGrad(`layers\.0\..*`, true)
	expectErr(t, err, acc.ErrInvalidState, "prepare")
}

// scenario: param_groups
func TestParamGroups(t *testing.T) {
	a := must(acc.NewAccelerator(`{"seed": 3}`))
	defer a.Close()
	path := filepath.Join(t.TempDir(), "init.safetensors")
	one := must(acc.NewModel(mlp281))
	defer one.Close()
	ok(t, one.SaveSafetensors(path))
	grouped := must(acc.NewModel(mlp281))
	defer grouped.Close()
	ok(t, grouped.LoadSafetensors(path))
	o1 := must(acc.NewOptimizer(one, `{"type": "sgd", "lr": 0.1}`))
	defer o1.Close()
	o2 := must(acc.NewOptimizer(grouped, map[string]any{
		"type": "sgd", "lr": 0.1, "param_groups": []any{map[string]any{"params": []string{`layers\.0\..*`}, "lr": 0.3}}}))
	defer o2.Close()
	ok(t, a.Prepare(one, o1, nil, nil))
	ok(t, a.Prepare(grouped, o2, nil, nil))
	start := params(t, one)
	sgdStep(t, a, one, o1)
	sgdStep(t, a, grouped, o2)
	p1, p2 := params(t, one), params(t, grouped)
	for name, s := range start {
		d1, d2 := make([]float32, len(s)), make([]float32, len(s))
		for i := range s {
			d1[i], d2[i] = p1[name][i]-s[i], p2[name][i]-s[i]
		}
		ratio := 1.0 // the first group's lr is 3x the top-level one
		if strings.HasPrefix(name, "layers.0.") {
			ratio = 3
		}
		if diff := maxDiff(d1, ratio, d2); diff > 1e-6 || maxDiff(d1, 1, make([]float32, len(s))) == 0 {
			t.Fatalf("%s: the grouped step is not %gx the plain one (|diff| %g)", name, ratio, diff)
		}
	}
	_, err := acc.NewOptimizer(one, `{"type": "sgd", "param_groups": [{"params": "nothing"}]}`)
	expectErr(t, err, acc.ErrInvalidConfig, "param_groups[0]")
	must(acc.NewOptimizer(grouped, `{"type": "adamw", "param_groups": "transformers"}`)).Close()
}

// logits runs a model in eval mode on fixed input ids.
func logits(t *testing.T, m *acc.Model) []float32 {
	t.Helper()
	ok(t, m.SetTraining(false))
	ids := must(acc.FromInt64([]int64{3, 17, 42, 8, 64, 5}, 1, 6))
	defer ids.Close()
	in := must(acc.NewBatch(acc.NamedTensor{Name: "input_ids", Tensor: ids}))
	defer in.Close()
	out := must(m.ForwardBatch(in))
	defer out.Close()
	l := must(out.Get("logits"))
	defer l.Close()
	return must(l.Float32s())
}

// scenario: lora
func TestLoRA(t *testing.T) {
	fixture := hfFixture(t, "llama")
	lora := map[string]any{"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}
	a := must(acc.NewAccelerator(`{"seed": 3}`))
	defer a.Close()
	m := must(acc.ModelFromPretrained(fixture, nil))
	defer m.Close()
	expectErr(t, m.SaveAdapter(t.TempDir()), acc.ErrInvalidState, "no adapter")
	expectErr(t, m.AddLoRA(`{"r": 0}`), acc.ErrInvalidArgument, "r must be a positive integer")
	expectErr(t, m.AddLoRA(`{"target_modules": ["nope"]}`), acc.ErrInvalidArgument, "q_proj")
	ok(t, m.AddLoRA(lora))
	expectErr(t, m.AddLoRA(lora), acc.ErrInvalidState, "adapter already")
	start := params(t, m)
	const loraB = "model.layers.0.self_attn.q_proj.lora_B.weight"
	if _, has := start["model.layers.0.self_attn.q_proj.lora_A.weight"]; !has {
		t.Fatalf("no LoRA weights among %d tensors", len(start))
	}

	// Three AdamW steps: only the adapter moves.
	o := must(acc.NewOptimizer(m, `{"type": "adamw", "lr": 0.01}`))
	defer o.Close()
	ok(t, m.SetTraining(true))
	ok(t, a.Prepare(m, o, nil, nil))
	ids := must(acc.FromInt64([]int64{3, 17, 42, 8, 64, 5, 9, 11, 3, 17, 42, 8, 64, 5, 9, 11}, 2, 8))
	defer ids.Close()
	b := must(acc.NewBatch(acc.NamedTensor{Name: "input_ids", Tensor: ids}, acc.NamedTensor{Name: "labels", Tensor: ids}))
	defer b.Close()
	for step := 0; step < 3; step++ {
		out := must(m.ForwardBatch(b))
		ok(t, a.Backward(must(out.Get("loss"))))
		ok(t, o.Step())
		ok(t, o.ZeroGrad())
		out.Close()
	}
	trained := params(t, m)
	const base = "model.layers.0.self_attn.q_proj.weight"
	if maxDiff(start[base], 1, trained[base]) != 0 || maxDiff(start[loraB], 1, trained[loraB]) == 0 {
		t.Fatal("the base weight moved, or the adapter did not")
	}
	want := logits(t, m)

	// Saved as peft saves it, loaded into a fresh base model: the same logits; merged: still.
	dir := filepath.Join(t.TempDir(), "adapter")
	ok(t, m.SaveAdapter(dir))
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	fresh := must(acc.ModelFromPretrained(fixture, nil))
	defer fresh.Close()
	expectErr(t, fresh.LoadAdapter(filepath.Join(dir, "missing"), nil), acc.ErrIO, "missing")
	ok(t, fresh.LoadAdapter(dir, nil))
	if d := maxDiff(logits(t, fresh), 1, want); d > 1e-5 {
		t.Fatalf("the loaded adapter's logits differ by %g", d)
	}
	ok(t, fresh.MergeAdapter())
	// W + B A * scaling rounds otherwise than the two products apart (peft's own merge moves the fixtures' logits by
	// up to 1.7e-5; an optimised build's kernels by more).
	if d := maxDiff(logits(t, fresh), 1, want); d > 1e-4 {
		t.Fatalf("the merged model's logits differ by %g", d)
	}
	for name := range params(t, fresh) {
		if strings.Contains(name, "lora_") {
			t.Fatalf("%s is left after merging", name)
		}
	}
	expectErr(t, fresh.MergeAdapter(), acc.ErrInvalidState, "no adapter")
}

// scenario: profile
func TestProfile(t *testing.T) {
	a := must(acc.NewAccelerator(`{"cpu": true, "seed": 3}`))
	defer a.Close()
	m := must(acc.NewModel(mlp281))
	defer m.Close()
	o := must(acc.NewOptimizer(m, `{"type": "sgd", "lr": 0.1}`))
	defer o.Close()
	ok(t, a.Prepare(m, o, nil, nil))
	noop := func(*acc.Profile) error { return nil }
	expectErr(t, a.Profile(`{"with_stak": true}`, noop), acc.ErrInvalidConfig, "with_stak")
	expectErr(t, a.Profile(map[string]any{"activities": []string{"cuda"}}, noop), acc.ErrUnsupported,
		"profile_kwargs.activities")
	dir := filepath.Join(t.TempDir(), "traces")
	kwargs := map[string]any{"output_trace_dir": dir,
		"schedule_option": map[string]int{"wait": 1, "warmup": 1, "active": 2}}
	ok(t, a.Profile(kwargs, func(p *acc.Profile) error {
		expectErr(t, a.Profile(nil, noop), acc.ErrInvalidState, "profile is running")
		for i := 0; i < 4; i++ {
			sgdStep(t, a, m, o)
			if err := p.Step(); err != nil {
				return err
			}
		}
		return nil
	}))
	entries := must(os.ReadDir(dir))
	if len(entries) != 1 || entries[0].Name() != "profile_0.json" {
		t.Fatalf("the trace directory holds %v, want profile_0.json alone", entries)
	}
	trace := must(os.ReadFile(filepath.Join(dir, "profile_0.json")))
	if !json.Valid(trace) {
		t.Fatal("profile_0.json is not valid JSON")
	}
	for _, want := range []string{`"ProfilerStep#2"`, `"ProfilerStep#3"`, `"acc::forward"`, `"aten::`} {
		if !strings.Contains(string(trace), want) {
			t.Errorf("the trace lacks %s", want)
		}
	}
	if strings.Contains(string(trace), `"ProfilerStep#1"`) {
		t.Error("step 1 (warmup) was recorded")
	}
}

// tinyTokenizer is the tiny byte-level BPE tokenizer of tests/text (with a {% generation %} chat template).
func tinyTokenizer(t *testing.T) string {
	t.Helper()
	return must(filepath.Abs(filepath.Join("..", "..", "..", "tests", "text", "tiny", "bytebpe")))
}

// scenario: text
func TestText(t *testing.T) {
	_, err := acc.TokenizerFromPretrained("/nonexistent/tok")
	expectErr(t, err, acc.ErrInvalidArgument, "/nonexistent/tok")
	tok := must(acc.TokenizerFromPretrained(tinyTokenizer(t)))
	defer tok.Close()
	info := must(tok.Info())
	if !strings.Contains(info.JSON, `"eos_token":"<|im_end|>"`) || info.SpecialTokens["eos_token"] != "<|im_end|>" || info.Len < info.VocabSize {
		t.Fatalf("info %+v", info)
	}

	// A padded batch, its rows and its tensors.
	texts := []string{"Hello world!", "A longer sentence, with more tokens in it."}
	enc := must(tok.Encode(texts, map[string]any{"padding": true, "padding_side": "left"}))
	defer enc.Close()
	if enc.Len() != 2 {
		t.Fatalf("%d rows", enc.Len())
	}
	ids0, ids1, mask0 := must(enc.InputIDs(0)), must(enc.InputIDs(1)), must(enc.AttentionMask(0))
	if len(ids0) != len(ids1) || len(ids0) != len(mask0) || len(ids0) <= 3 || mask0[0] != 0 || mask0[len(mask0)-1] != 1 {
		t.Fatalf("ids %v %v mask %v", ids0, ids1, mask0)
	}
	if s := must(enc.Sample(1)); s != 1 {
		t.Fatalf("sample %d", s)
	}
	if off := must(enc.Offsets(1)); len(off) != len(ids1) {
		t.Fatalf("offsets %v", off)
	}
	_, err = enc.Get(2, "input_ids")
	expectErr(t, err, acc.ErrInvalidArgument, "row 2")
	_, err = enc.Get(0, "labels")
	expectErr(t, err, acc.ErrInvalidArgument, "labels")
	batch := must(enc.ToBatch())
	defer batch.Close()
	ids := must(batch.Get("input_ids"))
	defer ids.Close()
	if shape := must(ids.Shape()); len(shape) != 2 || shape[0] != 2 || shape[1] != int64(len(ids1)) {
		t.Fatalf("shape %v", shape)
	}

	// Unpadded rows are no batch; decode; options named in errors.
	ragged := must(tok.Encode(texts, nil))
	defer ragged.Close()
	_, err = ragged.ToBatch()
	expectErr(t, err, acc.ErrInvalidArgument, "padding")
	if back := must(tok.Decode(must(ragged.InputIDs(0)), `{"skip_special_tokens": true}`)); back != "Hello world!" {
		t.Fatalf("decoded %q", back)
	}
	_, err = tok.Encode(texts, `{"paddin": true}`)
	expectErr(t, err, acc.ErrInvalidConfig, "paddin")
	_, err = tok.Decode([]int64{-1}, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "-1")
	wide := "héllo 👋 世界"
	we := must(tok.Encode([]string{wide}, map[string]any{"add_special_tokens": false}))
	defer we.Close()
	if back := must(tok.Decode(must(we.InputIDs(0)), nil)); back != wide {
		t.Fatalf("decoded %q, want %q", back, wide)
	}
	pe := must(tok.EncodePairs([]string{"question"}, []string{"answer"}, nil))
	defer pe.Close()
	if seq := must(pe.Get(0, "sequence_ids")); !containsInt(seq, 1) {
		t.Fatalf("sequence ids %v", seq)
	}
	_, err = tok.EncodePairs([]string{"a", "b"}, []string{"c"}, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "pairs")

	// Vocabulary look-ups.
	id, found, err := tok.TokenToID("<|im_end|>")
	ok(t, err)
	if !found {
		t.Fatal("<|im_end|> not found")
	}
	if s, found, err := tok.IDToToken(id); err != nil || !found || s != "<|im_end|>" {
		t.Fatalf("id_to_token %q %v %v", s, found, err)
	}
	if _, found, err := tok.TokenToID("definitely not a token"); err != nil || found {
		t.Fatalf("unknown token found (%v)", err)
	}
	if _, found, err := tok.IDToToken(1 << 40); err != nil || found {
		t.Fatalf("unknown id found (%v)", err)
	}

	// The chat template, with the assistant mask of its {% generation %} block.
	chat := []map[string]string{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}}
	rendered, cenc, err := tok.ApplyChatTemplateEncoded(chat, map[string]any{"now": 0})
	ok(t, err)
	defer cenc.Close()
	if !strings.Contains(rendered, "<|im_start|>assistant\nHello!") {
		t.Fatalf("rendered %q", rendered)
	}
	if plain := must(tok.ApplyChatTemplate(chat, `{"now": 0}`)); plain != rendered {
		t.Fatalf("%q != %q", plain, rendered)
	}
	masks := must(cenc.AssistantMasks(0))
	ones := 0
	for _, m := range masks {
		ones += int(m)
	}
	if ones == 0 || ones >= len(masks) {
		t.Fatalf("assistant masks %v", masks)
	}
	_, err = tok.ApplyChatTemplate(chat, map[string]any{"chat_template": "{{ raise_exception('no way') }}"})
	expectErr(t, err, acc.ErrInvalidArgument, "no way")

	// Train, save, load back: the same ids.
	corpus := []string{"the cat sat on the mat", "the dog sat on the log", "a cat and a dog"}
	trained := must(acc.TrainBPE(corpus, map[string]any{"vocab_size": 300, "special_tokens": []string{"<|end|>", "<|pad|>"},
		"eos_token": "<|end|>", "pad_token": "<|pad|>"}))
	defer trained.Close()
	dir := t.TempDir()
	ok(t, trained.SavePretrained(dir))
	reloaded := must(acc.TokenizerFromPretrained(dir))
	defer reloaded.Close()
	a, b := must(trained.Encode(corpus[:1], nil)), must(reloaded.Encode(corpus[:1], nil))
	defer a.Close()
	defer b.Close()
	if x, y := must(a.InputIDs(0)), must(b.InputIDs(0)); len(x) == 0 || fmt.Sprint(x) != fmt.Sprint(y) {
		t.Fatalf("%v != %v", x, y)
	}
	ok(t, reloaded.SetSpecialToken("pad_token", "<|end|>"))
	_, err = acc.TrainBPE(corpus, `{"eos_token": "<|missing|>"}`)
	expectErr(t, err, acc.ErrInvalidArgument, "<|missing|>")

	// One tokenizer shared by data-loader goroutines: the same ids as on one.
	lines := make([]string, 64)
	want := make([]string, len(lines))
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d: the quick brown fox %d jumps", i, i*7919)
		e := must(tok.Encode(lines[i:i+1], nil))
		want[i] = fmt.Sprint(must(e.InputIDs(0)))
		e.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := tok.Encode(lines, nil)
			if err != nil {
				errs <- err
				return
			}
			defer e.Close()
			for r := range lines {
				if got := fmt.Sprint(must(e.InputIDs(r))); got != want[r] {
					errs <- fmt.Errorf("row %d: %s != %s", r, got, want[r])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Text generation: the pieces, through a callback and through a channel, make the text.
	config := fmt.Sprintf(`{"architectures": ["LlamaForCausalLM"], "vocab_size": %d, "hidden_size": 16,
		"intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}`, info.Len)
	model := must(acc.ModelFromConfig(config, nil))
	defer model.Close()
	opts := map[string]any{"max_new_tokens": 8, "eos_token_id": []int{}}
	var pieces strings.Builder
	text := must(model.GenerateText(tok, "Hello", opts, func(p string) bool {
		pieces.WriteString(p)
		return true
	}))
	if text != pieces.String() {
		t.Fatalf("text %q, pieces %q", text, pieces.String())
	}
	_, err = model.GenerateText(tok, "Hello", `{"stop_strings": 3}`, nil)
	expectErr(t, err, acc.ErrInvalidConfig, "stop_strings")
	_, err = model.GenerateText(tok, "Hello", opts, func(string) bool { panic("boom") })
	expectErr(t, err, acc.ErrCallback, "panicked")
	ch, wait := model.StreamText(context.Background(), tok, "Hello", opts)
	var streamed strings.Builder
	for p := range ch {
		streamed.WriteString(p)
	}
	if again := must(wait()); again != streamed.String() || again != text {
		t.Fatalf("streamed %q, returned %q, want %q", streamed.String(), again, text)
	}
}

func containsInt(v []int64, x int64) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}

// prepFile is a committed input of tests/data/prep (the preprocessing fixtures).
func prepFile(t *testing.T, name string) string {
	t.Helper()
	return must(filepath.Abs(filepath.Join("..", "..", "..", "tests", "data", "prep", name)))
}

// fingerprint is a batch as every binding prints it: per tensor in order "name [shape] sum weighted",
// the weighted sum Σ (k+1)·v over the flat data (so that a value moved within the tensor changes it).
func fingerprint(t *testing.T, b *acc.Batch) string {
	t.Helper()
	var parts []string
	for _, name := range must(b.Names()) {
		tensor := must(b.Get(name))
		v := must(tensor.Int64s())
		shape := must(tensor.Shape())
		tensor.Close()
		var sum, weighted int64
		for k, x := range v {
			sum += x
			weighted += int64(k+1) * x
		}
		dims := make([]string, len(shape))
		for i, d := range shape {
			dims[i] = fmt.Sprint(d)
		}
		parts = append(parts, fmt.Sprintf("%s [%s] %d %d", name, strings.Join(dims, ", "), sum, weighted))
	}
	return strings.Join(parts, "; ")
}

// scenario: data_files
func TestDataFiles(t *testing.T) {
	tok := must(acc.TokenizerFromPretrained(tinyTokenizer(t)))
	defer tok.Close()
	messages, text := prepFile(t, "messages.jsonl"), prepFile(t, "text.jsonl")

	// TRL's SFT preparation and collator: the second batch of 4 as TRL makes it.
	sft := must(acc.DatasetFromFiles(messages, tok, map[string]any{"assistant_only_loss": true}))
	defer sft.Close()
	if n := must(sft.Len()); n != 12 {
		t.Fatalf("%d rows", n)
	}
	b := must(sft.GetBatch([]int64{4, 5, 6, 7}))
	line := fingerprint(t, b)
	b.Close()
	t.Logf("data_files sft: %s", line)
	if want := "input_ids [4, 87] 48299 8654156; labels [4, 87] -10996 -1702997; attention_mask [4, 87] 277 48359"; line != want {
		t.Fatalf("sft batch\n got %s\nwant %s", line, want)
	}
	// A loader over it makes the same batches.
	dl := must(acc.NewDataLoader(sft, `{"batch_size": 4}`))
	defer dl.Close()
	must(dl.NextBatch()).Close()
	b = must(dl.NextBatch())
	if got := fingerprint(t, b); got != line {
		t.Fatalf("the loader's second batch %s", got)
	}
	b.Close()

	// tok(text) as datasets.map, batched by DataCollatorWithPadding on the left.
	tokenized := must(acc.DatasetFromFiles(text, tok,
		`{"mode": "tokenize", "truncation": true, "max_length": 24, "collator": "with_padding", "padding_side": "left", "pad_to_multiple_of": 8}`))
	defer tokenized.Close()
	b = must(tokenized.GetBatch([]int64{4, 5, 6, 7}))
	line = fingerprint(t, b)
	b.Close()
	t.Logf("data_files tokenize: %s", line)
	if want := "input_ids [4, 24] 17339 814223; attention_mask [4, 24] 93 4556"; line != want {
		t.Fatalf("tokenize batch\n got %s\nwant %s", line, want)
	}

	// Bad input, named.
	_, err := acc.DatasetFromFiles(text, tok, `{"columns": ["body"]}`)
	expectErr(t, err, acc.ErrInvalidArgument, "'body'")
	if !strings.Contains(err.Error(), "text") {
		t.Fatalf("the columns there are: %v", err)
	}
	_, err = acc.DatasetFromFiles(text, tok, `{"mode": "tokenize", "text_column": "body"}`)
	expectErr(t, err, acc.ErrInvalidArgument, "'body'")
	_, err = acc.DatasetFromFiles(text, tok, `{"block_sise": 8}`)
	expectErr(t, err, acc.ErrInvalidConfig, "block_sise")
	_, err = acc.DatasetFromFiles("/nonexistent/rows.jsonl", tok, nil)
	expectErr(t, err, acc.ErrIO, "/nonexistent/rows.jsonl")
	_, err = acc.DatasetFromFiles("", tok, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "files")
	_, err = acc.DatasetFromFiles(text, nil, nil)
	expectErr(t, err, acc.ErrInvalidArgument, "tok")
	_, err = sft.GetBatch([]int64{12})
	expectErr(t, err, acc.ErrInvalidArgument, "12")
	_, err = sft.GetBatch(nil)
	expectErr(t, err, acc.ErrInvalidArgument, "count")
	// A function dataset's failure comes back through GetBatch with its error.
	fds := must(acc.DatasetFromBatchFunc(2, func(i int64) (*acc.Batch, error) { return nil, fmt.Errorf("no sample %d", i) }))
	defer fds.Close()
	_, err = fds.GetBatch([]int64{1})
	expectErr(t, err, acc.ErrCallback, "")
	if errors.Unwrap(err) == nil || !strings.Contains(errors.Unwrap(err).Error(), "no sample 1") {
		t.Fatalf("the function's error is not wrapped: %v", err)
	}

	// From the accelerator's data settings.
	a := must(acc.NewAccelerator(map[string]any{"data": map[string]any{"files": text, "mode": "group_texts", "block_size": 16}}))
	defer a.Close()
	grouped := must(acc.DatasetFromConfig(a, tok))
	defer grouped.Close()
	b = must(grouped.GetBatch([]int64{1}))
	labels := must(b.Get("labels"))
	if s := must(labels.Shape()); len(s) != 2 || s[0] != 1 || s[1] != 16 {
		t.Fatalf("labels %v", s)
	}
	labels.Close()
	b.Close()
	bad := must(acc.NewAccelerator(`{"data": {"mode": "tokenize"}}`))
	defer bad.Close()
	_, err = acc.DatasetFromConfig(bad, tok)
	expectErr(t, err, acc.ErrInvalidConfig, "'data.files'")
}
