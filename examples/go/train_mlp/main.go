// Command train_mlp is examples/c/train_mlp.c in Go: an MLP learns a synthetic regression in several
// processes started by `acc launch`, evaluates with GatherForMetrics, and the main process saves the
// weights. For the same recipe its final parameters equal the C program's.
//
//	acc launch --num_processes 2 train_mlp OUT.safetensors [STEPS]
package main

import (
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/libacc/libacc/bindings/go/acc"
)

const (
	features  = 4
	trainSize = 512
	evalSize  = 100
)

// feature is exact in float32: an integer hash, scaled by a power of two.
func feature(i, j uint32) float32 {
	h := (i*4 + j) * 2654435761 // wraps mod 2^32
	return float32((float64(h>>24) - 128.0) / 64.0)
}

// makeDataset builds samples [first, first+n): inputs [n, 4], targets [n, 1].
func makeDataset(first, n uint32) (*acc.Dataset, error) {
	x := make([]float32, features*n)
	y := make([]float32, n)
	for k := uint32(0); k < n; k++ {
		var f [features]float64
		for j := uint32(0); j < features; j++ {
			f[j] = float64(feature(first+k, j))
			x[features*k+j] = float32(f[j])
		}
		y[k] = float32(f[0]*f[1] - f[2]/2.0 + f[3]*f[3]/4.0)
	}
	tx, err := acc.FromFloat32(x, int64(n), features)
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	ty, err := acc.FromFloat32(y, int64(n), 1)
	if err != nil {
		return nil, err
	}
	defer ty.Close()
	return acc.DatasetFromTensors(tx, ty)
}

func run(outPath string, steps int) error {
	a, err := acc.NewAccelerator(`{"seed": 1234}`)
	if err != nil {
		return err
	}
	defer a.Close()
	isMain, err := a.IsMainProcess()
	if err != nil {
		return err
	}
	world, err := a.NumProcesses()
	if err != nil {
		return err
	}

	trainDS, err := makeDataset(0, trainSize)
	if err != nil {
		return err
	}
	defer trainDS.Close()
	evalDS, err := makeDataset(trainSize, evalSize)
	if err != nil {
		return err
	}
	defer evalDS.Close()
	trainDL, err := acc.NewDataLoader(trainDS, `{"batch_size": 16, "shuffle": true, "seed": 7}`)
	if err != nil {
		return err
	}
	defer trainDL.Close()
	evalDL, err := acc.NewDataLoader(evalDS, `{"batch_size": 16}`)
	if err != nil {
		return err
	}
	defer evalDL.Close()

	model, err := acc.NewModel(`{"type": "mlp", "sizes": [4, 32, 32, 1], "activation": "tanh", "loss": "mse"}`)
	if err != nil {
		return err
	}
	defer model.Close()
	opt, err := acc.NewOptimizer(model, `{"type": "adamw", "lr": 0.01, "weight_decay": 0.01}`)
	if err != nil {
		return err
	}
	defer opt.Close()
	sched, err := acc.NewScheduler(opt, map[string]any{"type": "cosine", "warmup_steps": 5, "total_steps": steps})
	if err != nil {
		return err
	}
	defer sched.Close()
	if err := a.Prepare(model, opt, sched, trainDL); err != nil {
		return err
	}
	if err := a.Prepare(nil, nil, nil, evalDL); err != nil {
		return err
	}

	// Train: a fixed number of optimizer steps, starting a new epoch whenever the loader runs out.
	lastLoss := 0.0
	for step := 0; step < steps; {
		x, y, ok, err := trainDL.Next()
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		err = func() error {
			defer x.Close()
			defer y.Close()
			loss, err := model.Loss(x, y)
			if err != nil {
				return err
			}
			defer loss.Close()
			if err := a.Backward(loss); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			if err := sched.Step(); err != nil {
				return err
			}
			if err := opt.ZeroGrad(); err != nil {
				return err
			}
			if step++; step == steps {
				mean, err := a.Reduce(loss, acc.ReduceMean)
				if err != nil {
					return err
				}
				defer mean.Close()
				lastLoss, err = mean.Item()
				return err
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}

	// Evaluate: every process predicts its shard; GatherForMetrics drops the padding duplicates.
	if err := model.SetTraining(false); err != nil {
		return err
	}
	sqSum, seen := 0.0, 0
	for {
		x, y, ok, err := evalDL.Next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		pred, err := model.Predict(x)
		if err != nil {
			return err
		}
		allPred, err := a.GatherForMetrics(pred)
		if err != nil {
			return err
		}
		allY, err := a.GatherForMetrics(y)
		if err != nil {
			return err
		}
		p, err := allPred.Float32s()
		if err != nil {
			return err
		}
		t, err := allY.Float32s()
		if err != nil {
			return err
		}
		for k := range p {
			d := float64(p[k]) - float64(t[k])
			sqSum += d * d
		}
		seen += len(p)
		for _, h := range []*acc.Tensor{x, y, pred, allPred, allY} {
			h.Close()
		}
	}

	if isMain {
		if err := model.SaveSafetensors(outPath); err != nil {
			return err
		}
		fmt.Printf("processes: %d, steps: %d\n", world, steps)
		fmt.Printf("eval mse: %.6f over %d samples\n", sqSum/float64(seen), seen)
		fmt.Printf("final loss: %.6f\n", lastLoss)
	}
	return nil
}

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: train_mlp OUT.safetensors [STEPS]")
		os.Exit(2)
	}
	steps := 100
	if len(os.Args) == 3 {
		var err error
		if steps, err = strconv.Atoi(os.Args[2]); err != nil {
			log.Fatalf("bad STEPS %q", os.Args[2])
		}
	}
	if err := run(os.Args[1], steps); err != nil {
		log.Fatal(err)
	}
}
