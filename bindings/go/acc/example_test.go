package acc_test

import (
	"errors"
	"fmt"

	"github.com/libacc/libacc/bindings/go/acc"
)

// Training a small regression for a few epochs.
func Example() {
	a, err := acc.NewAccelerator(map[string]any{"seed": 1234})
	if err != nil {
		panic(err)
	}
	defer a.Close()
	x, _ := acc.FromFloat32([]float32{0, 1, 2, 3}, 4, 1)
	y, _ := acc.FromFloat32([]float32{1, 3, 5, 7}, 4, 1)
	data, _ := acc.DatasetFromTensors(x, y)
	x.Close()
	y.Close()
	defer data.Close()
	loader, _ := acc.NewDataLoader(data, `{"batch_size": 2, "shuffle": true}`)
	defer loader.Close()
	model, _ := acc.NewModel(`{"type": "mlp", "sizes": [1, 16, 1], "loss": "mse"}`)
	defer model.Close()
	opt, _ := acc.NewOptimizer(model, `{"type": "adamw", "lr": 0.05}`)
	defer opt.Close()
	if err := a.Prepare(model, opt, nil, loader); err != nil {
		panic(err)
	}
	steps := 0
	for epoch := 0; epoch < 20; epoch++ {
		for {
			bx, by, ok, err := loader.Next()
			if err != nil {
				panic(err)
			}
			if !ok {
				break
			}
			loss, _ := model.Loss(bx, by)
			_ = a.Backward(loss)
			_ = opt.Step()
			_ = opt.ZeroGrad()
			steps++
			loss.Close()
			bx.Close()
			by.Close()
		}
	}
	fmt.Println("steps:", steps)
	// Output: steps: 40
}

// Errors carry the status code and libacc's message.
func ExampleError() {
	_, err := acc.NewAccelerator(`{"gradient_acumulation_steps": 2}`)
	var e *acc.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, errors.Is(err, acc.ErrInvalidConfig))
	}
	// Output: ACC_ERR_INVALID_CONFIG true
}
