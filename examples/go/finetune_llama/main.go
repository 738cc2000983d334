// Command finetune_llama is examples/c/finetune_llama.c in Go: a tiny Llama (transformers'
// LlamaForCausalLM, built from a config with acc.ModelFromConfig) fine-tuned on the demo's text (the
// license texts of /usr/share/common-licenses, one token a byte) in any number of processes, saved in
// Hugging Face format (SavePretrained: transformers loads it), then asked to continue a prompt with
// Generate, the bytes printed as they come.
//
//	go build -o finetune_llama ./finetune_llama   (in examples/go)
//	acc launch --num_processes 2 finetune_llama [--steps N] [--batch B] [--out DIR] [--text-dir DIR]
//	                                            [--prompt TEXT] [--new-tokens N] [--lora]
//
// --batch is per process (Accelerate's batch_size): N processes with batch B train as one with N x B.
// --lora fine-tunes a LoRA adapter instead (peft's get_peft_model: r 8, lora_alpha 16 on every linear
// layer; the base stays frozen): the base model is saved to OUT/model first, the trained adapter to
// OUT/adapter (peft's files), and the continuation comes from a fresh copy of the base with the adapter
// loaded (LoadAdapter).
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/libacc/libacc/bindings/go/acc"
)

const block = 64

// config is transformers' LlamaConfig, small: bytes as tokens (vocabulary 256), grouped-query attention.
const config = `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
	"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
	"num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
	"hidden_act": "silu", "initializer_range": 0.02, "tie_word_embeddings": false, "bos_token_id": 1,
	"eos_token_id": 0, "dtype": "float32"}`

// loraConfig is peft's LoraConfig for --lora.
const loraConfig = `{"r": 8, "lora_alpha": 16, "target_modules": "all-linear"}`

// must returns v, or ends the program with err.
func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal("finetune_llama: ", err)
	}
}

// writeTokens writes the regular files of dir (sorted by name, links followed) as uint16 token ids, one
// a byte.
func writeTokens(dir, path string) {
	entries := must(os.ReadDir(dir)) // sorted by name
	var tokens []byte
	for _, e := range entries {
		file := filepath.Join(dir, e.Name())
		if info, err := os.Stat(file); err == nil && info.Mode().IsRegular() && e.Name()[0] != '.' {
			for _, b := range must(os.ReadFile(file)) {
				tokens = binary.LittleEndian.AppendUint16(tokens, uint16(b))
			}
		}
	}
	check(os.WriteFile(path, tokens, 0o644))
}

func main() {
	steps := flag.Int("steps", 300, "optimizer steps")
	batch := flag.Int("batch", 8, "sequences per process and step")
	out := flag.String("out", "out/llama-go", "output directory (token file, model/)")
	textDir := flag.String("text-dir", "/usr/share/common-licenses", "directory of text files to train on")
	prompt := flag.String("prompt", "This program is free software", "text to continue")
	newTokens := flag.Int("new-tokens", 120, "tokens to generate")
	lora := flag.Bool("lora", false, "train a LoRA adapter (r 8 on every linear layer) instead of every weight")
	flag.Parse()

	a := must(acc.NewAccelerator(`{"seed": 42}`))
	defer a.Close()
	world, isMain := must(a.NumProcesses()), must(a.IsMainProcess())

	// The main process writes the token file; the others wait, then map it.
	tokensPath, modelDir := filepath.Join(*out, "train.bin"), filepath.Join(*out, "model")
	adapterDir := filepath.Join(*out, "adapter")
	if isMain {
		check(os.MkdirAll(*out, 0o755))
		writeTokens(*textDir, tokensPath)
	}
	check(a.WaitForEveryone())
	ds := must(acc.DatasetFromTokenFile(tokensPath, map[string]any{"block_size": block, "dtype": "uint16"}))
	defer ds.Close()
	dl := must(acc.NewDataLoader(ds, map[string]any{"batch_size": *batch, "shuffle": true, "seed": 42, "drop_last": true}))
	defer dl.Close()

	model := must(acc.ModelFromConfig(config, nil))
	defer model.Close()
	check(model.SetTraining(true))
	nParams := must(model.NumParameters())
	if *lora {
		// The base the adapter trains on (frozen from here on), saved for loading the adapter onto it below.
		if isMain {
			check(model.SavePretrained(modelDir, ""))
		}
		check(model.AddLoRA(loraConfig))
	}
	nAll := must(model.NumParameters())
	opt := must(acc.NewOptimizer(model, `{"type": "adamw", "lr": 0.003, "weight_decay": 0.01}`))
	defer opt.Close()
	check(a.Prepare(model, opt, nil, dl))
	if isMain {
		fmt.Printf("LlamaForCausalLM, %d parameters; batch %d x %d processes x %d tokens; %d steps\n",
			nParams, *batch, world, block, *steps)
		if *lora { // as peft's print_trainable_parameters
			fmt.Printf("LoRA %s: trainable params: %d || all params: %d || trainable%%: %.4f\n", loraConfig,
				nAll-nParams, nAll, 100*float64(nAll-nParams)/float64(nAll))
		}
	}

	for step := 1; step <= *steps; {
		x, y, ok := must3(dl.Next())
		if !ok {
			continue // a new epoch
		}
		// transformers' labels are the inputs themselves: the model shifts them (the loader's y is pre-shifted).
		loss := must(model.Loss(x, x))
		check(a.Backward(loss))
		must(a.ClipGradNorm(model, 1.0, 2.0))
		check(opt.Step())
		check(opt.ZeroGrad())
		if step%50 == 0 || step == 1 || step == *steps {
			mean := must(a.Reduce(loss, acc.ReduceMean))
			if l := must(mean.Item()); isMain {
				fmt.Printf("step %4d/%d  loss %.4f\n", step, *steps, l)
			}
			mean.Close()
		}
		loss.Close()
		x.Close()
		y.Close()
		step++
	}

	// Hugging Face format (config.json and model.safetensors; with --lora peft's adapter files): the main
	// process writes, the others wait.
	if *lora {
		check(model.SaveAdapter(adapterDir))
	} else {
		check(model.SavePretrained(modelDir, ""))
	}
	if isMain {
		generator := model
		if *lora {
			fmt.Printf("saved the adapter to %s (peft: PeftModel.from_pretrained("+
				"AutoModelForCausalLM.from_pretrained(%q), %q))\n", adapterDir, modelDir, adapterDir)
			// As a user of the adapter would: a fresh copy of the base, the adapter loaded onto it.
			generator = must(acc.ModelFromPretrained(modelDir, nil))
			defer generator.Close()
			check(generator.LoadAdapter(adapterDir, nil))
			fmt.Printf("loaded %s onto %s\n", adapterDir, modelDir)
		} else {
			fmt.Printf("saved to %s (transformers: AutoModelForCausalLM.from_pretrained(%q))\n", modelDir, modelDir)
		}
		check(generator.SetTraining(false))
		ids := make([]int64, len(*prompt))
		for i, c := range []byte(*prompt) {
			ids[i] = int64(c)
		}
		input := must(acc.FromInt64(ids, 1, int64(len(ids))))
		defer input.Close()
		options := map[string]any{"max_new_tokens": *newTokens, "do_sample": true, "temperature": 0.8, "top_k": 40, "seed": 0}
		fmt.Print("--- ", *prompt)
		seq := must(generator.Generate(input, nil, options, func(tokens []int64) bool {
			if c := tokens[0]; c == '\n' || (c >= 32 && c < 127) {
				fmt.Printf("%c", c)
			} else {
				fmt.Print("?")
			}
			return true
		}))
		seq.Close()
		fmt.Println("\n---")
	}
	check(a.WaitForEveryone())
}

// must3 is must for DataLoader.Next's three results.
func must3[A, B, C any](a A, b B, c C, err error) (A, B, C) {
	check(err)
	return a, b, c
}
